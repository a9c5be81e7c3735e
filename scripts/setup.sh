#!/usr/bin/env bash
# Idempotent setup for arl on a fresh Debian machine.
#
#  * Debian packages the project needs (bubblewrap for the sandbox, build tools,
#    OpenMPI for data-parallel `arl-train` (feature `mpi`), and
#    the PostgreSQL server for the SQL environment's tests, which start their
#    own server in a temporary directory; the package's default cluster is not used;
#    Chromium for the web environment, driven headless over the DevTools pipe).
#  * A Python virtualenv, cached OUTSIDE the repository, holding the PyPI wheel
#    torch==2.13.0 (the libtorch that `tch` 0.26 links against) and the Python
#    packages the tests and benchmarks compare against.
#  * scripts/env.sh, sourced by the Makefile, exports the variables that wire
#    `tch` to that libtorch.
#
# Re-running it does nothing that is already done.
#
# Environment:
#   ARL_CACHE     cache directory (default: ~/.cache/arl)
#   ARL_NO_APT=1  skip the Debian packages
#   ARL_NO_TORCH=1  skip torch (builds with --no-default-features need no libtorch)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ARL_CACHE:-$HOME/.cache/arl}
venv=$cache/venv-torch-2.13.0
mkdir -p "$cache"

log() { printf 'setup: %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------
apt_pkgs=(bubblewrap pkg-config build-essential python3-venv bc curl jq openmpi-bin libopenmpi-dev postgresql chromium)
if [ "${ARL_NO_APT:-0}" != 1 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${apt_pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

# --- Python virtualenv with torch and the test/benchmark packages ----------
req=$here/requirements.txt
stamp=$venv/.arl-stamp
want=$(cat "$req" | sha256sum | cut -c1-16)
if [ "${ARL_NO_TORCH:-0}" != 1 ]; then
  if [ ! -x "$venv/bin/python" ]; then
    log "creating virtualenv $venv"
    python3 -m venv "$venv"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing Python packages into $venv (torch==2.13.0 takes a minute or two)"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    echo "$want" > "$stamp"
  fi
fi
log "ok"
