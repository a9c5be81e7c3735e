#!/usr/bin/env bash
# Training throughput: arl-train next to a plain PyTorch loop (transformers
# model, SDPA, torch.optim.AdamW foreach) on the same random Qwen2 model
# (LAYERS × HIDDEN, char vocabulary) and the same records, one PPO step per
# batch of BATCH sequences of LEN tokens. Prints tokens/s of the steps after
# the first (warm-up) and the ratio arl/PyTorch (> 1 means arl is faster).
#
#   STEPS=6 BATCH=8 LEN=256 LAYERS=4 HIDDEN=256 scripts/bench/train.sh
#   DEVICE=cuda PRECISION=bf16 BATCH=32 LEN=1024 scripts/bench/train.sh   # one GPU
#   PRECISION=amp …   # float32 weights, bf16 autocast (torch.autocast on the PyTorch side)
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
# The environment `make` sets (tch finds libtorch in the cached venv).
. scripts/env.sh
STEPS=${STEPS:-12}; BATCH=${BATCH:-8}; LEN=${LEN:-256}; LAYERS=${LAYERS:-4}; HIDDEN=${HIDDEN:-256}
DEVICE=${DEVICE:-cpu}; PRECISION=${PRECISION:-fp32}; THREADS=${THREADS:-$(nproc)}
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
# One OpenMP waiting policy for both sides: arl-train's default (a spin of
# 1000, docs/install.md) unless the caller chose one. libgomp's own default
# (300000) favours whichever side gets it by ~10% on an idle machine;
# `GOMP_SPINCOUNT=300000 scripts/bench/train.sh` compares at that one.
if [ -z "${GOMP_SPINCOUNT:-}" ] && [ -z "${OMP_WAIT_POLICY:-}" ]; then export GOMP_SPINCOUNT=1000; fi
cargo build --release --quiet -p arl-train
ARL=target/release/arl-train
. scripts/lib/progress.sh
W=$(mktemp -d); trap 'rm -rf "$W"; progress_exit' EXIT

. scripts/bench/lib/train-setup.sh

progress_phase "train: arl-train, $STEPS steps" progress_metrics "$W/m.jsonl"
"$ARL" --model "$W/model" -i "$W/recs.jsonl" --global-batch-size "$BATCH" --max-tokens-per-micro-batch $((BATCH * LEN)) \
  --device "$DEVICE" --precision "$PRECISION" --threads "$THREADS" --metrics "$W/m.jsonl" -q
ARL_TPS=$("$PY" -c "
import json,sys
m=[json.loads(l) for l in open('$W/m.jsonl')][1:]
print(sum(x['tokens'] for x in m)/sum(x['step_time_s'] for x in m))")
progress_phase "train: the PyTorch loop, $STEPS steps"
PT=$("$PY" scripts/bench/py/train_baseline.py "$W/model" "$W/recs.jsonl" "$BATCH" "$DEVICE" "$PRECISION" "$THREADS")
progress_stop
PT_TPS=$(echo "$PT" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['tokens_per_s'])")

printf '\nmodel %d layers × hidden %d, %d steps of %d × %d tokens, %s %s, %s threads, OpenMP %s\n' \
  "$LAYERS" "$HIDDEN" "$STEPS" "$BATCH" "$LEN" "$DEVICE" "$PRECISION" "$THREADS" "${OMP_WAIT_POLICY:+OMP_WAIT_POLICY=$OMP_WAIT_POLICY}${GOMP_SPINCOUNT:+GOMP_SPINCOUNT=$GOMP_SPINCOUNT}"
printf '%-10s %14s\n' tool tokens/s
printf '%-10s %14.0f\n' arl-train "$ARL_TPS" pytorch "$PT_TPS"
printf 'arl-train / pytorch: %.2fx\n' "$(echo "$ARL_TPS / $PT_TPS" | bc -l)"
