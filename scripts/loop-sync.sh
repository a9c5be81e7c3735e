#!/usr/bin/env bash
# The synchronous agent-RL loop, any number of steps, on files:
#
#   per step K:  arl-rollout (batch K of $PROMPTS, $N samples each, against the
#                endpoint) | arl-reward → arl-filter | arl-advantage → arl-train
#                (ckpt/step-K-1 → ckpt/step-K) → arl-sync (weight version K)
#
#   With ESTIMATOR=gae (PPO with a learned critic): arl-filter | arl-train
#   values (critic/step-K-1) | arl-advantage --estimator gae → arl-train
#   --train-critic (policy → ckpt/step-K, critic → critic/step-K).
#
# Everything is a variable, so the same script drives this machine's CPUs
# (arl-serve started here) or a GPU trainer and an SGLang fleet:
#
#   RUN=runs/x MODEL=ckpt/sft PROMPTS=prompts.jsonl STEPS=100 scripts/loop-sync.sh
#   ENDPOINT=http://router:30000 SYNC_ARGS="--router http://router:30000 --server-path /shared/ckpt" \
#     TRAIN_ARGS="--device cuda --lr 1e-6" ... scripts/loop-sync.sh
#
# Variables: RUN, MODEL (the policy at step 0), PROMPTS, STEPS (required);
# BATCH, N, ROLLOUT_ARGS, REWARD_ARGS, FILTER_ARGS, ESTIMATOR, ADV_ARGS,
# TRAIN_ARGS, CRITIC, CRITIC_ARGS, VALUES_ARGS, SEED (scripts/lib/loop.sh); ENDPOINT (default: start arl-serve on PORT, 30123);
# SYNC_ARGS (default: --endpoint $ENDPOINT); EVAL_PROMPTS with EVAL_EVERY and
# EVAL_K for held-out evaluation; EXP: an experiment file to source first;
# TRACKING=tensorboard,wandb,mlflow to forward the metrics (scripts/track.py);
# PROGRESS_EVERY, PROGRESS for the progress lines (scripts/lib/progress.sh).
#
# It resumes: a step whose checkpoint exists is done (checkpoints appear
# atomically); a re-run continues after the last one and re-syncs it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1090
[ -n "${EXP:-}" ] && . "$EXP"
: "${RUN:?set RUN}" "${MODEL:?set MODEL}" "${PROMPTS:?set PROMPTS}" "${STEPS:?set STEPS}"
. scripts/lib/loop.sh
mkdir -p "$RUN"/{logs,ckpt,steps,eval}
track_start
[ -e "$RUN/ckpt/step-0" ] || ln -s "$(realpath "$MODEL")" "$RUN/ckpt/step-0"
init_critic
last=0
while [ -d "$RUN/ckpt/step-$((last + 1))" ]; do last=$((last + 1)); done
trap '[ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null; progress_exit; true' EXIT
serve_or_sync "$last"
EVAL_EVERY=${EVAL_EVERY:-0}
T0=$(now)
# For each step's line: step K/STEPS, the loop's time so far and left.
LOOP_T0=$T0 LOOP_FROM=$last
samples=0
eval_s=0
for step in $(seq "$((last + 1))" "$STEPS"); do
  rl_step "$step" "$ENDPOINT" "$RUN/ckpt/step-$((step - 1))" "$RUN/ckpt/step-$step"
  sync_to "$step"
  if [ -n "${EVAL_PROMPTS:-}" ] && [ "$EVAL_EVERY" -gt 0 ] && { [ "$step" = "$STEPS" ] || [ $((step % EVAL_EVERY)) = 0 ]; }; then
    te=$(now)
    eval_policy "$step" "$ENDPOINT" "$RUN/ckpt/step-$step"
    eval_s=$(echo "$eval_s + $(elapsed "$te")" | bc)
  fi
  samples=$((samples + $(jq .records "$RUN/steps/step-$step/stats.json")))
done
# Throughput of the loop itself (evaluation time excluded), for comparison
# with scripts/loop-async.sh.
wall=$(echo "$(elapsed "$T0") - $eval_s" | bc)
jq -nc --argjson s "$samples" --argjson w "$wall" --argjson first "$((last + 1))" --argjson steps "$STEPS" \
  'if $s > 0 then {phase: "sync", steps: ($steps - $first + 1), samples: $s, seconds: $w, samples_per_s: ($s / $w)} else empty end' \
  | tee -a "$RUN/metrics.jsonl" >&2
track_stop
