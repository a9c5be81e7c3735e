#!/usr/bin/env bash
# Idempotent setup for arl on a fresh Debian machine.
#
#   scripts/setup.sh           what building arl and `make demo` need
#   scripts/setup.sh --tests   ... and what only the tests and benchmarks need
#   scripts/setup.sh --tracking   ... and the experiment-tracking libraries
#                              (TensorBoard, W&B, MLflow: scripts/track.py)
#   scripts/setup.sh --device  only the second virtualenv `make device-bundle`
#                              builds against: the GPU machine's torch==2.11.0
#                              and transformers (scripts/requirements-device.txt)
#
#  * Debian packages. To build: a C/C++ toolchain, pkg-config, python3-venv,
#    OpenMPI (for data-parallel `arl-train`; without it the trainer builds
#    single-process), bubblewrap (the code sandbox) and the small tools the
#    scripts use (bc, curl, jq). For the tests only: the PostgreSQL server (the
#    SQL environment's tests start their own server in a temporary directory;
#    the package's default cluster is not used), Chromium (the web
#    environment, driven headless over the DevTools pipe) and openssl (the
#    HTTPS tests make a throwaway certificate authority).
#  * A Python virtualenv, cached OUTSIDE the repository, holding the PyPI wheel
#    torch==2.13.0 (the libtorch that `tch` 0.26 links against:
#    scripts/requirements.txt), with --tracking the tracking libraries
#    (scripts/requirements-track.txt) and, with --tests, those and the pinned
#    packages the tests and benchmarks compare against
#    (scripts/requirements-test.txt).
#  * scripts/env.sh, sourced by every script, exports the variables that wire
#    `tch` to that libtorch.
#
# Re-running it does nothing that is already done.
#
# Environment:
#   ARL_CACHE       cache directory (default: ~/.cache/arl)
#   ARL_NO_APT=1    skip the Debian packages
#   ARL_NO_TORCH=1  skip the virtualenv (the data tools need no libtorch:
#                   `cargo build --release` builds them alone)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ARL_CACHE:-$HOME/.cache/arl}
venv=$cache/venv-torch-2.13.0
mkdir -p "$cache"

tests=0
tracking=0
device=0
for a in "$@"; do
  case "$a" in
    --tests) tests=1; tracking=1 ;;
    --tracking) tracking=1 ;;
    --device) device=1 ;;
    *) echo "usage: scripts/setup.sh [--tests] [--tracking] [--device]" >&2; exit 2 ;;
  esac
done

log() { printf 'setup: %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------
apt_pkgs=(bubblewrap pkg-config build-essential python3-venv bc curl jq openmpi-bin libopenmpi-dev)
[ "$tests" = 1 ] && apt_pkgs+=(postgresql chromium openssl)
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

# --- Python virtualenv -----------------------------------------------------
# One stamp per requirements file: the test packages are added to the same
# venv when asked for, and a changed file is installed again.
install_reqs() {
  local req=$1 venv=${2:-$venv} stamp
  stamp=$venv/.arl-stamp-$(basename "$req" .txt)
  local want
  want=$(cat "$here/requirements.txt" "$req" | sha256sum | cut -c1-16)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing $(basename "$req") into $venv (a torch wheel takes a minute or two)"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    echo "$want" > "$stamp"
  fi
}
if [ "$device" = 1 ]; then
  # The device bundle's torch 2.11 (no Debian packages beyond the build's).
  dvenv=$cache/venv-torch-2.11.0
  if [ ! -x "$dvenv/bin/python" ]; then
    log "creating virtualenv $dvenv"
    python3 -m venv "$dvenv"
  fi
  install_reqs "$here/requirements-device.txt" "$dvenv"
  log "ok"
  exit 0
fi
if [ "${ARL_NO_TORCH:-0}" != 1 ]; then
  if [ ! -x "$venv/bin/python" ]; then
    log "creating virtualenv $venv"
    python3 -m venv "$venv"
  fi
  install_reqs "$here/requirements.txt"
  [ "$tracking" = 1 ] && install_reqs "$here/requirements-track.txt"
  [ "$tests" = 1 ] && install_reqs "$here/requirements-test.txt"
fi
log "ok"
