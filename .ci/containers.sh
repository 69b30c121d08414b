#!/usr/bin/env bash
# Install (if missing) what the image targets and tests/image need: Debian's debootstrap (the stand-in
# base image, make base-image) and, unless a Docker engine answers `docker info`, podman and runc.
# Idempotent; prints nothing when everything is there. dev/pstool/image.py passes podman the `runc`
# runtime and explicit ulimits on every command, so no containers.conf is written.
set -euo pipefail

apt_updated=0
need() {  # need <command> <debian packages...>
  local probe=$1; shift
  if ! command -v "$probe" >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
      echo "containers.sh: $probe is missing and only root can install it (apt-get install $*)" >&2
      exit 1
    fi
    if [ $apt_updated -eq 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq; apt_updated=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  fi
}

need debootstrap debootstrap
if ! { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }; then
  need podman podman
  need runc runc
fi
