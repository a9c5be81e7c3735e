#!/usr/bin/env bash
# Data-parallel scaling of arl-train: the same random Qwen2 model (LAYERS ×
# HIDDEN, char vocabulary), the same records and the same global batch
# (BATCH sequences of LEN tokens per optimizer step), trained by 1 process and
# by NPROC ranks (`--nproc`, OpenMPI on this machine). Prints tokens/s of the
# steps after the first (warm-up) for each, the scaling ratio (NPROC ranks /
# 1 process; NPROC is the ideal), and the gradient all-reduce time per step.
#
# Each rank gets THREADS/NPROC libtorch threads, so both runs use the same
# cores: the ratio measures data parallelism, not extra hardware. On a
# machine with fewer cores than NPROC, or shared with other work, it says
# little (see docs/benchmarks.md).
#
#   STEPS=6 BATCH=8 LEN=256 LAYERS=4 HIDDEN=256 NPROC=2 scripts/bench/train-dp.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
# The environment `make` sets (tch finds libtorch in the cached venv).
. scripts/env.sh
STEPS=${STEPS:-6}; BATCH=${BATCH:-8}; LEN=${LEN:-256}; LAYERS=${LAYERS:-4}; HIDDEN=${HIDDEN:-256}
NPROC=${NPROC:-2}; THREADS=${THREADS:-$(nproc)}
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
cargo build --release --quiet -p arl-train
ARL=target/release/arl-train
. scripts/lib/progress.sh
W=$(mktemp -d); trap 'rm -rf "$W"; progress_exit' EXIT

. scripts/bench/lib/train-setup.sh

run() { # nproc threads-per-rank metrics
  progress_phase "train-dp: $STEPS steps as $1 process(es) of $2 thread(s)" progress_metrics "$3"
  "$ARL" --model "$W/model" -i "$W/recs.jsonl" --global-batch-size "$BATCH" \
    --max-tokens-per-micro-batch $((BATCH * LEN)) --threads "$2" --nproc "$1" --metrics "$3" -q
}
PER_RANK=$(( THREADS / NPROC > 0 ? THREADS / NPROC : 1 ))
run 1 "$THREADS" "$W/m1.jsonl"
run "$NPROC" "$PER_RANK" "$W/mN.jsonl"
progress_stop

"$PY" - "$W/m1.jsonl" "$W/mN.jsonl" "$NPROC" "$LAYERS" "$HIDDEN" "$STEPS" "$BATCH" "$LEN" "$THREADS" <<'PYEOF'
import json, sys
f1, fn, nproc, layers, hidden, steps, batch, n, threads = sys.argv[1:]
def load(f):
    m = [json.loads(l) for l in open(f)][1:]  # the first step warms up
    tps = sum(x["tokens"] for x in m) / sum(x["step_time_s"] for x in m)
    ar = sum(x.get("allreduce_s", 0.0) for x in m) / len(m)
    st = sum(x["step_time_s"] for x in m) / len(m)
    return tps, ar, st
t1, _, s1 = load(f1)
tn, arn, sn = load(fn)
print(f"\nmodel {layers} layers × hidden {hidden}, {steps} steps of {batch} × {n} tokens, cpu fp32, {threads} threads in all")
print(f"{'processes':<10} {'tokens/s':>10} {'step s':>8} {'all-reduce s/step':>18}")
print(f"{1:<10} {t1:>10.0f} {s1:>8.3f} {'-':>18}")
print(f"{nproc:<10} {tn:>10.0f} {sn:>8.3f} {arn:>18.4f}")
print(f"scaling {nproc} ranks / 1 process: {tn / t1:.2f}x (ideal {nproc}x)")
PYEOF
