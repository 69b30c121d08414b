#!/usr/bin/env bash
# Install (if missing) what a container target needs, with apt (root only):
#   bash .ci/containers.sh image        make image: a container engine, i.e. nothing when a Docker engine
#                                       answers `docker info`, else Debian's podman and runc. No root and
#                                       no debootstrap: the base is the official image (or BASE=...).
#   bash .ci/containers.sh base-image   make base-image: the engine, and debootstrap (the stand-in base's
#                                       Debian root filesystem, dev/pstool/image.py).
#   bash .ci/containers.sh [all]        both (make test, make test-e2e and CI: tests/image builds the stand-in).
#   bash .ci/containers.sh --list T     print the commands target T needs here, one a line; install nothing.
# Idempotent; prints nothing when everything is there. dev/pstool/image.py passes podman the `runc`
# runtime and explicit ulimits on every command, so no containers.conf is written.
set -euo pipefail

list=0
if [ "${1:-}" = "--list" ]; then list=1; shift; fi
target=${1:-all}

# tools_for <target>: "<command>:<debian package>" per line, what the target needs on this machine.
tools_for() {
  case "$1" in
    image|base-image|all) ;;
    *) echo "containers.sh: unknown target '$1' (image, base-image or all)" >&2; return 2 ;;
  esac
  if [ "$1" != image ]; then echo "debootstrap:debootstrap"; fi
  if ! { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }; then
    echo "podman:podman"
    echo "runc:runc"
  fi
}

tools=$(tools_for "$target")
if [ $list -eq 1 ]; then
  [ -z "$tools" ] || printf '%s\n' "$tools" | cut -d: -f1
  exit 0
fi

apt_updated=0
for tool in $tools; do
  probe=${tool%%:*} package=${tool#*:}
  if command -v "$probe" >/dev/null 2>&1; then continue; fi
  if [ "$(id -u)" != 0 ]; then
    echo "containers.sh: $probe is missing (make $target needs it) and only root can install it (apt-get install $package)" >&2
    exit 1
  fi
  echo "containers.sh: installing $probe (apt-get install $package) for make $target" >&2
  if [ $apt_updated -eq 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
done
