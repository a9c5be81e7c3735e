#!/usr/bin/env bash
# Generation throughput of arl-serve for CONC concurrent requests (continuous
# batching, one KV cache per sequence) next to Hugging Face transformers'
# `generate` on the same weights, batch, prompts and lengths, in the same run.
# Both decode greedily, on CPU in float32, exactly NEW tokens per sequence
# (ignore_eos / min_new_tokens). Prints tokens/s and the ratio arl/HF (> 1 means
# arl is faster; target ≥ 2). Each side runs the batch REPEAT times (10) and the
# best round counts; the medians are printed too.
#
# Both sides get the whole machine: transformers runs with torch's default
# threads (one per core), arl-serve on the CPU with `--dp-size DP` replicas
# (default: one per core, each one thread; DP=1 for a single replica), with
# its default `--cpu-matmul auto` (SERVE_ARGS='--cpu-matmul blas' for MKL).
#
#   MODEL=testdata/tiny-model CONC=64 NEW=64 PROMPT=32 REPEAT=10 DP=2 scripts/bench/serve.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
# The environment `make` sets (tch finds libtorch in the cached venv).
. scripts/env.sh
MODEL=${MODEL:-testdata/tiny-model}; CONC=${CONC:-64}; NEW=${NEW:-64}; PROMPT=${PROMPT:-32}; REPEAT=${REPEAT:-10}
DEVICE=${DEVICE:-cpu}
if [ "$DEVICE" = cpu ]; then DP=${DP:-$(nproc)}; else DP=${DP:-1}; fi
echo "arl-serve --dp-size $DP on $DEVICE"
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
export LIBTORCH_USE_PYTORCH=1 PATH="$(dirname "$PY"):$PATH"
cargo build --release --quiet -p arl-serve
W=$(mktemp -d)
LOG="$W/serve.log"
target/release/arl-serve --model-path "$MODEL" --port 0 --device "$DEVICE" --max-running-requests "$CONC" --dp-size "$DP" ${SERVE_ARGS:-} 2>"$LOG" &
SERVER=$!
. scripts/lib/progress.sh
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$W"; progress_exit' EXIT
for _ in $(seq 600); do grep -q 'listening on' "$LOG" && break; sleep 0.1; done
URL=$(sed -n 's/^arl-serve: listening on //p' "$LOG" | head -1)
[ -n "$URL" ] || { cat "$LOG" >&2; exit 1; }
# Which matrix multiply the server measured faster (`--cpu-matmul auto`).
sed -n 's/^arl-serve: CPU matmul/CPU matmul/p' "$LOG"
progress_phase "serve: $REPEAT rounds of $CONC × $NEW new tokens, arl-serve then transformers.generate"
OUT=$("$PY" scripts/bench/py/serve_bench.py "$URL" "$MODEL" "$CONC" "$NEW" "$PROMPT" "$DEVICE" "$REPEAT")
progress_stop
printf '%s\n' "$OUT"
