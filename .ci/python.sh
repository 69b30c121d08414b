#!/usr/bin/env bash
# Print the name of a Python 3.11+ interpreter for the tooling (pstool needs tomllib, typing.Self).
# On a bare Debian/Ubuntu machine whose python3 is older, install one with apt when a package of a
# suitable version exists (as root); otherwise say exactly what is missing and exit 1.
set -uo pipefail

suitable() {
  local candidate
  for candidate in python3 python3.14 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null 2>&1 \
      && "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null \
      && "$candidate" -c 'import venv, ensurepip' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if suitable; then exit 0; fi

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null 2>&1 || true
  for version in 3.13 3.12 3.11; do
    if apt-cache show "python$version" >/dev/null 2>&1; then
      apt-get install -y -qq "python$version" "python$version-venv" >/dev/null 2>&1 && break
    fi
  done
  # python3 itself may be the suitable one once python3-venv (ensurepip) is there.
  apt-get install -y -qq python3-venv >/dev/null 2>&1 || true
  if suitable; then exit 0; fi
fi

found=$(command -v python3 >/dev/null 2>&1 && python3 --version 2>&1 || echo "no python3")
echo "error: the patch-set tooling needs Python 3.11 or newer with venv and ensurepip; this machine has ${found}," >&2
echo "and no python3.11+ package could be installed here. Install one (e.g. apt-get install python3.11 python3.11-venv)" >&2
echo "and run again, or run: make test PY=/path/to/python3.11" >&2
exit 1
