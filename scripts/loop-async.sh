#!/usr/bin/env bash
# The asynchronous agent-RL loop: rollout runs continuously into a spool
# directory of batch files while the trainer consumes them and syncs weights.
#
#   producer (background): for k = 0, 1, …  arl-rollout (batch k of $PROMPTS)
#       | arl-reward → $SPOOL/ready/batch-k.jsonl   (atomic rename; at most
#       $MAX_AHEAD ready batches wait, so rollouts never run far ahead)
#   trainer (foreground): for step N: claim the oldest ready batch (rename to
#       claimed/), arl-filter --current-version N-1 --max-staleness $MAX_STALENESS
#       | arl-advantage → arl-train (ckpt/step-N) → arl-sync (version N) →
#       move the batch to done/
#
# A batch is in exactly one of ready/, claimed/, done/ (renames are atomic;
# one whose every sample is too stale goes to done/ as `stale.…` untrained),
# so none is lost or used twice: on a restart, a claimed batch whose step has
# its checkpoint is finished, one without is trained again, and the producer
# continues after the highest batch number it ever wrote. Samples generated
# more than MAX_STALENESS weight versions before the step are dropped by
# arl-filter (each record's weight_versions says which versions produced it).
#
# Variables: those of scripts/loop-sync.sh, plus SPOOL ($RUN/spool),
# MAX_AHEAD (2), MAX_STALENESS (2). The run ends after STEPS trained steps;
# metrics.jsonl gets one {"phase":"rl"} line per step and a final
# {"phase":"async"} line with the measured samples/s.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1090
[ -n "${EXP:-}" ] && . "$EXP"
: "${RUN:?set RUN}" "${MODEL:?set MODEL}" "${PROMPTS:?set PROMPTS}" "${STEPS:?set STEPS}"
. scripts/lib/loop.sh
if is_gae; then
  # The producer scores batches ahead of training; with a critic it would
  # need the critic the trainer has not written yet.
  echo "loop-async.sh: ESTIMATOR=gae (PPO with a critic) runs in scripts/loop-sync.sh only" >&2
  exit 2
fi
if lora_on; then
  # The producer's rollouts would ask for an adapter the server has not been
  # given before the first step (and one process spans many versions).
  echo "loop-async.sh: LORA_RANK (LoRA) runs in scripts/loop-sync.sh only, for now" >&2
  exit 2
fi
SPOOL=${SPOOL:-$RUN/spool}
MAX_AHEAD=${MAX_AHEAD:-2}
MAX_STALENESS=${MAX_STALENESS:-2}
mkdir -p "$RUN"/{logs,ckpt,steps,eval} "$SPOOL"/{ready,claimed,done,traces}
track_start
rm -f "$SPOOL"/ready/.tmp-*
[ -e "$RUN/ckpt/step-0" ] || ln -s "$(realpath "$MODEL")" "$RUN/ckpt/step-0"
last=0
while [ -d "$RUN/ckpt/step-$((last + 1))" ]; do last=$((last + 1)); done

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; [ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null; progress_exit; true; }
trap cleanup EXIT
serve_or_sync "$last"

# Finish what a crash left: a claimed batch whose step has a checkpoint is done.
for f in "$SPOOL"/claimed/*.jsonl; do
  [ -e "$f" ] || continue
  s=$(basename "$f" | sed -E 's/^step-([0-9]+)\..*/\1/')
  [ -d "$RUN/ckpt/step-$s" ] && mv "$f" "$SPOOL/done/"
done

batch_no() { basename "$1" | sed -E 's/.*batch-0*([0-9]+)\.jsonl$/\1/'; }

producer() {
  local k=0 f n
  for f in "$SPOOL"/{ready,claimed,done}/*.jsonl; do
    [ -e "$f" ] || continue
    n=$(batch_no "$f")
    [ "$n" -ge "$k" ] && k=$((n + 1))
  done
  while :; do
    while [ "$(find "$SPOOL/ready" -name 'batch-*.jsonl' | wc -l)" -ge "$MAX_AHEAD" ]; do sleep 0.2; done
    local tmp="$SPOOL/ready/.tmp-$k" out
    out=$SPOOL/ready/batch-$(printf %06d "$k").jsonl
    arl arl-rollout -q -i "$PROMPTS" --batch-size "$BATCH" --step "$k" --seed "$SEED" \
        --endpoint "$ENDPOINT" --tokenizer "$MODEL" -n "$N" --temperature "$TEMPERATURE" $ROLLOUT_ARGS \
        --trace "$SPOOL/traces/batch-$(printf %06d "$k").trace.jsonl" \
      | arl arl-reward -q $REWARD_ARGS >"$tmp"
    mv "$tmp" "$out"
    k=$((k + 1))
  done
}
producer >>"$RUN/logs/producer.log" 2>&1 &
PIDS+=($!)

T0=$(now)
samples=0
for step in $(seq "$((last + 1))" "$STEPS"); do
  d="$RUN/steps/step-$step"
  mkdir -p "$d"
  claimed=$(ls "$SPOOL"/claimed/step-"$step".*.jsonl 2>/dev/null | head -n 1 || true)
  t0=$(now)
  progress_start "step $step/$STEPS: waiting for a batch"
  while :; do
    if [ -z "$claimed" ]; then
      while :; do
        next=$(ls "$SPOOL"/ready/batch-*.jsonl 2>/dev/null | head -n 1 || true)
        [ -n "$next" ] && break
        kill -0 "${PIDS[0]}" 2>/dev/null || { progress_stop; echo "loop-async: the producer died; see $RUN/logs/producer.log" >&2; exit 1; }
        sleep 0.1
      done
      claimed=$SPOOL/claimed/step-$step.$(basename "$next")
      mv "$next" "$claimed"
    fi
    arl arl-filter -q $FILTER_ARGS --current-version "$((step - 1))" --max-staleness "$MAX_STALENESS" \
        --stats-json "$d/filter.json" -i "$claimed" \
      | arl arl-advantage -q $ADV_ESTIMATOR $ADV_ARGS $(group_size) -o "$d/batch.jsonl"
    [ -s "$d/batch.jsonl" ] && break
    # Every sample of this batch is too old: it is spent, not trained.
    progress_stop
    log "step $step: $(basename "$claimed") is entirely staler than $MAX_STALENESS versions; dropped"
    mv "$claimed" "$SPOOL/done/stale.$(basename "$claimed")"
    progress_start "step $step/$STEPS: waiting for a batch"
    claimed=""
  done
  policy=$RUN/ckpt/step-$((step - 1))
  train_step "$step" "$policy" "$RUN/ckpt/step-$step" "$d"
  sync_to "$step"
  cp "$claimed" "$d/scored.jsonl"
  mv "$claimed" "$SPOOL/done/"
  arl arl-inspect stats -q --json -i "$d/scored.jsonl" >"$d/stats.json"
  n=$(jq .records "$d/stats.json"); samples=$((samples + n))
  jq -nc --argjson step "$step" --slurpfile st "$d/stats.json" --slurpfile f "$d/filter.json" \
     --slurpfile tm <(tail -n 1 "$d/train-metrics.jsonl") --arg b "$(basename "$claimed")" --argjson ts "$(elapsed "$t0")" \
     '{phase: "rl", mode: "async", step: $step, batch: $b, samples: $st[0].records, kept: $f[0].records.kept, dropped: $f[0].dropped_by_reason,
       reward_mean: $st[0].reward.mean, tool_call_rate: ($st[0].tool_calls.mean // 0),
       response_len: $st[0].response_len.mean, loss: $tm[0].loss, grad_norm: $tm[0].grad_norm, clip_frac: $tm[0].clipfrac,
       entropy: $tm[0].entropy, kl_loss: $tm[0].kl_loss, train_s: $ts}' >>"$RUN/metrics.jsonl"
  progress_eta "$step" "$STEPS" "$T0" "$last"
  tail -n 1 "$RUN/metrics.jsonl" | jq -r --arg steps "$STEPS" --arg run "$REPLY" \
    '"step \(.step)/\($steps) (\(.batch)): reward \(.reward_mean*1000|round/1000)  kept \(.kept)  train \(.train_s|round)s  (\($run))"' >&2
done
wall=$(elapsed "$T0")
jq -nc --argjson s "$samples" --argjson w "$wall" --argjson steps "$STEPS" \
  '{phase: "async", steps: $steps, samples: $s, seconds: $w, samples_per_s: ($s / $w)}' | tee -a "$RUN/metrics.jsonl" >&2
track_stop
