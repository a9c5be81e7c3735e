#!/usr/bin/env bash
# Idempotent setup for coverage-guided fuzzing (fuzz/, scripts/fuzz.sh).
#
#  * cargo-fuzz, pinned, installed with `cargo install --locked` only when the
#    installed one is missing or another version.
#  * libFuzzer (built by libfuzzer-sys's build script) needs a C++ compiler:
#    checked here; scripts/setup.sh installs one (build-essential).
#
# The stable toolchain is used with RUSTC_BOOTSTRAP=1 (scripts/fuzz.sh sets
# it): no nightly toolchain is needed.
#
# Re-running it does nothing that is already done (a second or so).
set -euo pipefail

CARGO_FUZZ_VERSION=0.13.2

log() { printf 'setup-fuzz: %s\n' "$*" >&2; }

if ! command -v cargo >/dev/null; then
  log "cargo not found: install Rust (rustup) first"
  exit 1
fi

cxx=""
for c in "${CXX:-}" c++ g++ clang++; do
  if [ -n "$c" ] && command -v "$c" >/dev/null; then cxx=$c; break; fi
done
if [ -z "$cxx" ]; then
  log "no C++ compiler (libFuzzer needs one): run scripts/setup.sh, or apt-get install g++"
  exit 1
fi

have=$(cargo fuzz --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$CARGO_FUZZ_VERSION" ]; then
  log "installing cargo-fuzz $CARGO_FUZZ_VERSION${have:+ (found $have)} (a minute or two)"
  cargo install --locked --quiet cargo-fuzz --version "$CARGO_FUZZ_VERSION" --force
fi
log "ok (cargo-fuzz $(cargo fuzz --version 2>/dev/null | awk '{print $2}'), C++ compiler $cxx)"
