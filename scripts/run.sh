#!/usr/bin/env bash
# Run an experiment end to end on this machine: `make run EXP=experiments/X.env`
# (`make demo` is EXP=experiments/demo.env). Everything goes to runs/<NAME>/
# (or $RUN): the experiment file, the data, every checkpoint, each step's
# rollouts and batch, logs, metrics.jsonl, reward.svg and summary.txt.
#
#   1. a model from scratch (arl-train make-tokenizer, arl-train init), or
#      BASE_MODEL: a pretrained checkpoint, which is step 0 (no SFT)
#   2. SFT on arl-tasks demonstrations (rendered once by arl-train render;
#      arl-train --loss sft)                                        → ckpt/step-0
#   3. arl-serve serving step-0; held-out evaluation (greedy, pass@k/mean@k)
#   4. STEPS synchronous GRPO steps: arl-rollout | arl-reward → arl-filter |
#      arl-advantage → arl-train → arl-sync (weight version = step), with an
#      evaluation every EVAL_EVERY steps and after the last one
#   5. scripts/plot.py → reward.svg; a one-screen summary
#
# TRACKING=tensorboard,wandb,mlflow (in the experiment file or the
# environment) also sends every metric to those backends as the run goes
# (scripts/track.py: TensorBoard event files, an offline W&B run and an
# MLflow store under $RUN/tracking/, the experiment's variables as
# hyper-parameters, the exact commands attached).
#
# The long phases (SFT, evaluations, RL steps) show where they are on stderr
# (scripts/lib/progress.sh): a line redrawn in place on a terminal, else a
# plain line every PROGRESS_EVERY seconds (30; CI logs); PROGRESS=0: none.
#
# Re-running with RESUME=1 continues an interrupted run from its last
# complete step (checkpoints are written atomically, so a step either has
# its checkpoint or is redone).
set -euo pipefail
cd "$(dirname "$0")/.."
EXP=${1:-${EXP:-experiments/demo.env}}
[ -f "$EXP" ] || { echo "run.sh: no experiment file \`$EXP\`" >&2; exit 2; }
# shellcheck disable=SC1090
. "$EXP"
RUN=${RUN:-runs/$NAME}
. scripts/lib/loop.sh
URL=http://127.0.0.1:$PORT
T_START=$(now)

if [ "${RESUME:-0}" != 1 ]; then
  rm -rf "$RUN"
fi
mkdir -p "$RUN"/{logs,ckpt,data,steps,eval}
cp "$EXP" "$RUN/experiment.env"
# TRACKING=tensorboard,wandb,mlflow (any of them, or all): every metrics line
# also goes to those backends (scripts/track.py; records in $RUN/tracking/).
track_start
env | grep -E '^(SEED|STEPS|BATCH|N|SFT_N|EVAL_N|EVAL_K|TASK_ARGS|SFT_TASK_ARGS|SFT_ARGS|ROLLOUT_ARGS|TRAIN_ARGS|ADV_ARGS)=' \
  >"$RUN/overrides.env" || true
# 1. model and data --------------------------------------------------------
if [ -n "${BASE_MODEL:-}" ]; then
  # A pretrained checkpoint (e.g. SmolLM2 from scripts/fetch-models.sh): no
  # init and no SFT; RL starts from it.
  [ -d "$BASE_MODEL" ] || { echo "run.sh: BASE_MODEL \`$BASE_MODEL\` is not a directory (scripts/fetch-models.sh)" >&2; exit 2; }
  [ -e "$RUN/ckpt/step-0" ] || ln -s "$(realpath "$BASE_MODEL")" "$RUN/ckpt/step-0"
elif [ ! -d "$RUN/ckpt/init" ]; then
  log "model: arl-train init --config $MODEL_CONFIG (tokenizer: character-level, $TEMPLATE chat template)"
  arl arl-train make-tokenizer --template "$TEMPLATE" --out "$RUN/tokenizer"
  arl arl-train init --config "$MODEL_CONFIG" --tokenizer "$RUN/tokenizer" --out "$RUN/ckpt/init" --seed "${INIT_SEED:-$SEED}"
fi
PROMPTS=$RUN/data/train-prompts.jsonl
EVAL_PROMPTS=$RUN/data/eval-prompts.jsonl
# An experiment may define `make_prompts N SEED OUT` (e.g. a mix of levels);
# otherwise: arl-tasks $TASK $TASK_ARGS.
if ! declare -F make_prompts >/dev/null; then
  make_prompts() { arl arl-tasks "$TASK" -q -n "$1" $TASK_ARGS --seed "$2" -o "$3"; }
fi
make_prompts "$((BATCH * STEPS))" "$((SEED + 1000))" "$PROMPTS"
make_prompts "$EVAL_N" "$((SEED + 2000))" "$EVAL_PROMPTS"

# A server this script starts (evaluations, SFT checks) ends with it.
# So does the progress line of the phase it is in (scripts/lib/progress.sh),
# last: the server first.
trap '[ -n "${SERVER_PID:-}" ] && kill "$SERVER_PID" 2>/dev/null; progress_exit; true' EXIT

# 2. SFT warm start -----------------------------------------------------------
# With SFT_CHECK_EVERY=K, SFT runs K optimizer steps at a time (arl-train
# --max-steps, then --resume: one schedule over the whole input) and after
# each stretch samples SFT_CHECK_N held-out prompts × SFT_CHECK_K from the
# checkpoint (the first check at step SFT_CHECK_FROM, if set): once the
# samples that call the tool answer right at least
# SFT_STOP_COPY of the time — the copying of the tool's result into the
# answer, which RL builds on, has formed — SFT stops; SFT_N demonstrations
# are the most it runs. Each check is a {"phase":"sft_check"} line.
sft_until_copying() {
  local k=0 prev="$RUN/ckpt/init" resume="" out n steps=0 c d every t0 from
  make_prompts "${SFT_CHECK_N:-32}" "$((SEED + 4000))" "$RUN/data/sft-check-prompts.jsonl"
  # RESUME=1: continue from the last stretch's checkpoint.
  for c in "$RUN"/ckpt/sft-*; do
    [ -d "$c" ] && [ "${c##*-}" -gt "$k" ] || continue
    k=${c##*-}
    prev=$c
    resume=--resume
  done
  if [ -n "$resume" ]; then
    steps=$(wc -l <"$RUN/logs/sft-metrics.jsonl")
    log "SFT: resuming after step $steps ($prev)"
  else
    : >"$RUN/logs/sft-metrics.jsonl"
  fi
  # The progress line: steps out of SFT_STEPS at most, the rate since here.
  printf -v t0 '%(%s)T' -1
  from=$steps
  while :; do
    k=$((k + 1))
    out=$RUN/ckpt/sft-$k
    # No check before step SFT_CHECK_FROM: the stretches before it run as one.
    every=$SFT_CHECK_EVERY
    [ "$steps" -lt "${SFT_CHECK_FROM:-0}" ] && every=$((SFT_CHECK_FROM - steps))
    progress_start -n "$SFT_STEPS" -m -f "$from" -t "$t0" "SFT step" progress_metrics "$RUN/logs/sft-metrics-$k.jsonl" "$steps"
    arl arl-train --loss sft --model "$prev" $resume --save "$out" -i "$RUN/data/sft.parquet" $SFT_ARGS --seed "$SEED" \
        --max-steps "$every" --metrics "$RUN/logs/sft-metrics-$k.jsonl" 2>>"$RUN/logs/sft.log"
    progress_stop
    n=$(wc -l <"$RUN/logs/sft-metrics-$k.jsonl")
    cat "$RUN/logs/sft-metrics-$k.jsonl" >>"$RUN/logs/sft-metrics.jsonl"
    rm -f "$RUN/logs/sft-metrics-$k.jsonl"
    steps=$((steps + n))
    if [ ! -d "$out" ] || [ "$n" = 0 ]; then out=$prev; break; fi
    [ "$prev" != "$RUN/ckpt/init" ] && rm -rf "$prev"
    prev=$out
    resume=--resume
    # The end of the input (a resume after it would start the input again).
    [ "$(jq '.input.complete // false' "$out/trainer_state/state.json")" = true ] && break
    d=$RUN/eval/sft-check-$steps
    mkdir -p "$d"
    progress_start "SFT check at step $steps: sampling"
    start_server "$out" "$PORT" 0
    arl arl-rollout -q -i "$RUN/data/sft-check-prompts.jsonl" --endpoint "$URL" --tokenizer "$out" \
        -n "${SFT_CHECK_K:-8}" --temperature "$TEMPERATURE" $ROLLOUT_ARGS \
      | arl arl-reward -q $REWARD_ARGS -o "$d/sampled.jsonl"
    progress_stop
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=
    c=$(jq -sc --argjson step "$steps" '[.[] | select((.tool_calls // 0) > 0)] as $t
        | {phase: "sft_check", step: $step, tool_call_rate: (($t | length) / length),
           copy_accuracy: (if ($t | length) == 0 then 0 else ([$t[] | if (.reward_detail.score // .reward // 0) >= 1 then 1 else 0 end] | add) / ($t | length) end)}' \
        "$d/sampled.jsonl")
    echo "$c" >>"$RUN/metrics.jsonl"
    log "SFT check at step $steps: $(jq -r '"tool calls \(.tool_call_rate*100|round/100), right when calling the tool \(.copy_accuracy*100|round/100)"' <<<"$c")"
    if [ "$(jq --argjson x "${SFT_STOP_COPY:-0.5}" '.copy_accuracy >= $x' <<<"$c")" = true ]; then
      break
    fi
  done
  mv "$out" "$RUN/ckpt/step-0"
}

if [ -z "${BASE_MODEL:-}" ] && [ ! -d "$RUN/ckpt/step-0" ]; then
  progress_start "SFT data: $SFT_N demonstrations"
  arl arl-tasks "$TASK" -q -n "$SFT_N" $TASK_ARGS $SFT_TASK_ARGS --with-solutions --seed "$SEED" -o "$RUN/data/sft.jsonl"
  # A warm-up: SFT_WARMUP_N demonstrations (SFT_WARMUP_TASK_ARGS) trained
  # first — arl-train keeps the file's order — within the same run and schedule.
  if [ "${SFT_WARMUP_N:-0}" -gt 0 ]; then
    arl arl-tasks "$TASK" -q -n "$SFT_WARMUP_N" $TASK_ARGS ${SFT_WARMUP_TASK_ARGS:-} --with-solutions --seed "$((SEED + 3000))" \
      -o "$RUN/data/sft-warmup.jsonl"
    cat "$RUN/data/sft-warmup.jsonl" "$RUN/data/sft.jsonl" >"$RUN/data/sft.jsonl.tmp"
    mv "$RUN/data/sft.jsonl.tmp" "$RUN/data/sft.jsonl"
    progress_stop
    log "SFT warm-up: the first $SFT_WARMUP_N demonstrations with ${SFT_WARMUP_TASK_ARGS:-no extra flags}"
    progress_start "SFT data: rendering"
  fi
  # Rendered with the chat template and tokenized once (arl-train render):
  # each SFT stretch below reads tokens instead of rendering every
  # demonstration again.
  arl arl-train render -q --model "$RUN/ckpt/init" -i "$RUN/data/sft.jsonl" -o "$RUN/data/sft.parquet"
  progress_stop
  # The most optimizer steps SFT makes (the progress line's count).
  SFT_STEPS=$(progress_train_steps "$(wc -l <"$RUN/data/sft.jsonl")" "$SFT_ARGS")
  t=$(now)
  if [ "${SFT_CHECK_EVERY:-0}" -gt 0 ]; then
    log "SFT: at most $SFT_N demonstrations ($SFT_TASK_ARGS), until the tool-calling samples are right ≥ ${SFT_STOP_COPY:-0.5} of the time → ckpt/step-0"
    sft_until_copying
  else
    log "SFT: $SFT_N demonstrations ($SFT_TASK_ARGS) → ckpt/step-0"
    progress_start -n "$SFT_STEPS" -t "$t" "SFT step" progress_metrics "$RUN/logs/sft-metrics.jsonl"
    arl arl-train --loss sft --model "$RUN/ckpt/init" --save "$RUN/ckpt/step-0" -i "$RUN/data/sft.parquet" \
        $SFT_ARGS --seed "$SEED" --metrics "$RUN/logs/sft-metrics.jsonl" 2>"$RUN/logs/sft.log"
    progress_stop
  fi
  jq -c --arg s "$(elapsed "$t")" -s '{phase: "sft", steps: length, loss_first: .[0].loss, loss_last: .[-1].loss, seconds: ($s|tonumber)}' \
    "$RUN/logs/sft-metrics.jsonl" >>"$RUN/metrics.jsonl"
  tail -n 1 "$RUN/metrics.jsonl" | jq -r '"SFT: \(.steps) steps, loss \(.loss_first*1000|round/1000) → \(.loss_last*1000|round/1000), \(.seconds|round) s"' >&2
fi

# 3–4. evaluate the SFT model, then GRPO (scripts/loop-sync.sh) ----------------
if [ ! -d "$RUN/eval/step-0" ]; then
  log "arl-serve: ckpt/step-0 on $URL; held-out evaluation of the $([ -n "${BASE_MODEL:-}" ] && echo base || echo SFT) model"
  start_server "$RUN/ckpt/step-0" "$PORT" 0
  eval_policy 0 "$URL" "$RUN/ckpt/step-0"
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=
fi
env | grep -E '^(ESTIMATOR|CRITIC|CRITIC_ARGS|VALUES_ARGS|LORA_RANK|LORA_ARGS)=' >>"$RUN/overrides.env" || true
ALGO=GRPO
[ "${ESTIMATOR:-}" = gae ] && ALGO="PPO (GAE, learned critic)"
[ "${LORA_RANK:-0}" -gt 0 ] && ALGO="$ALGO with a LoRA adapter of rank $LORA_RANK"
log "$ALGO: $STEPS steps of $BATCH prompts × $N samples"
RUN=$RUN MODEL=$RUN/ckpt/step-0 PROMPTS=$PROMPTS EVAL_PROMPTS=$EVAL_PROMPTS STEPS=$STEPS PORT=$PORT \
  BATCH=$BATCH N=$N SEED=$SEED TEMPERATURE=$TEMPERATURE KEEP_OPTIMIZER=$KEEP_OPTIMIZER EVAL_EVERY=$EVAL_EVERY EVAL_K=$EVAL_K STATS_BY=$STATS_BY \
  ROLLOUT_ARGS=$ROLLOUT_ARGS REWARD_ARGS=$REWARD_ARGS FILTER_ARGS=$FILTER_ARGS ADV_ARGS=$ADV_ARGS TRAIN_ARGS=$TRAIN_ARGS \
  SERVE_ARGS=${SERVE_ARGS:-} \
  ESTIMATOR=${ESTIMATOR:-} CRITIC_ARGS=${CRITIC_ARGS:---critic-lr 1e-5} VALUES_ARGS=${VALUES_ARGS:-} \
  LORA_RANK=${LORA_RANK:-0} LORA_ARGS=${LORA_ARGS:-} LORA_NAME=${LORA_NAME:-policy} \
  scripts/loop-sync.sh

# 5. plot and summary ------------------------------------------------------------
python3 scripts/plot.py "$RUN/metrics.jsonl" -o "$RUN/reward.svg" --title "${TITLE:-${EXP_TITLE:-arl $NAME}}"
scripts/summary.sh "$RUN" "$(elapsed "$T_START")" | tee "$RUN/summary.txt"
track_stop
