#!/usr/bin/env bash
# Throughput of the asynchronous loop against the synchronous one, in the same
# run, from the same policy and prompts: STEPS steps of each
# (scripts/loop-sync.sh, then scripts/loop-async.sh with MAX_STALENESS), each
# against its own arl-serve. Prints samples/s of both (evaluation excluded)
# and the ratio async/sync (> 1: the async loop is faster).
#
#   MODEL=runs/demo/ckpt/step-0 STEPS=10 scripts/bench/loop.sh
#
# MODEL defaults to the SFT checkpoint of `make demo`; the task, rollout and
# training flags are those of experiments/demo.env (override any of them).
# On a 2-core machine rollout and training share the cores, so the overlap the
# async loop buys is bounded by what the two leave idle; with a GPU trainer
# and a separate inference fleet it is the whole rollout or training time.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
# The environment `make` sets (tch finds libtorch in the cached venv).
. scripts/env.sh
. experiments/demo.env
MODEL=${MODEL:-runs/demo/ckpt/step-0}
STEPS=${BENCH_STEPS:-10}
[ -d "$MODEL" ] || { echo "bench/loop.sh: no model at $MODEL (run \`make demo\` first or set MODEL)" >&2; exit 2; }
OUT=${OUT:-runs/bench-loop}
rm -rf "$OUT"; mkdir -p "$OUT"
BIN=target/release
"$BIN/arl-tasks" "$TASK" -q -n "$((BATCH * (STEPS + 4)))" $TASK_ARGS --seed 4242 -o "$OUT/prompts.jsonl"
export BATCH N TEMPERATURE ROLLOUT_ARGS REWARD_ARGS FILTER_ARGS ADV_ARGS TRAIN_ARGS KEEP_OPTIMIZER
export MODEL PROMPTS=$OUT/prompts.jsonl STEPS SEED
. scripts/lib/progress.sh
trap progress_exit EXIT
progress_phase "loop: scripts/loop-sync.sh, $STEPS steps" progress_last_line "$OUT/sync.log"
RUN=$OUT/sync PORT=30131 scripts/loop-sync.sh 2>"$OUT/sync.log"
progress_phase "loop: scripts/loop-async.sh, $STEPS steps" progress_last_line "$OUT/async.log"
RUN=$OUT/async PORT=30132 MAX_STALENESS=${MAX_STALENESS:-2} MAX_AHEAD=${MAX_AHEAD:-2} scripts/loop-async.sh 2>"$OUT/async.log"
progress_stop
s=$(jq -s '[.[] | select(.phase=="sync")][-1].samples_per_s' "$OUT/sync/metrics.jsonl")
a=$(jq -s '[.[] | select(.phase=="async")][-1].samples_per_s' "$OUT/async/metrics.jsonl")
dropped=$(jq -s '[.[] | select(.phase=="rl") | (.samples - .kept)] | add' "$OUT/async/metrics.jsonl")
printf 'loop      steps  samples/s\n'
printf 'sync      %5d  %9.2f\n' "$STEPS" "$s"
printf 'async     %5d  %9.2f   (max staleness %s, %s samples dropped as stale)\n' "$STEPS" "$a" "${MAX_STALENESS:-2}" "$dropped"
echo "ratio async/sync: $(echo "scale=2; $a / $s" | bc)"
