#!/usr/bin/env bash
# Client cost of rollout: arl-rollout next to a Python asyncio + aiohttp client
# (slime's way), against the same zero-latency SGLang-shaped server (a real HTTP
# server answering one canned /generate body, so the clients are what is
# measured), same requests and concurrency, in the same run: after a warm-up,
# ROUNDS (3) alternating runs of each client. Prints the median requests/s and
# client CPU time (user + sys) per request for both, and the ratios.
# Targets (issue 7): ≥ 5× less CPU per request, no lower requests/s.
#
#   N=20000 CONCURRENCY=64 OUT_TOKENS=64 ROUNDS=3 scripts/bench/rollout.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
# The environment `make` sets (tch finds libtorch in the cached venv).
. scripts/env.sh
N=${N:-10000}; CONCURRENCY=${CONCURRENCY:-64}; OUT_TOKENS=${OUT_TOKENS:-64}
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
cargo build --release --quiet -p arl-rollout
. scripts/lib/progress.sh
trap progress_exit EXIT
progress_phase "rollout: $N requests per run, arl-rollout and the Python client alternating"
OUT=$("$PY" scripts/bench/py/rollout_bench.py target/release/arl-rollout "$N" "$CONCURRENCY" "$OUT_TOKENS")
progress_stop
printf '%s\n' "$OUT"
