# Shared pieces of the loop scripts (scripts/loop-sync.sh, loop-async.sh,
# run.sh); sourced, not run. Every stage is an arl binary; this file only
# wires them together, keeps each step's files, and appends one JSON line per
# step to $RUN/metrics.jsonl.
#
# Variables (set by the caller or an experiment file, see experiments/):
#   BIN        where the arl binaries are            (target/release)
#   RUN        run directory                         (required)
#   PROMPTS    prompt pool (JSONL/Parquet) the steps draw batches from
#   BATCH      prompts per step                      (16)
#   N          samples per prompt                    (8)
#   ROLLOUT_ARGS  extra arl-rollout flags (tools, turns, lengths)
#   TEMPERATURE   sampling temperature of training rollouts (1.0)
#   REWARD_ARGS   arl-reward flags                   (--rm auto)
#   FILTER_ARGS   arl-filter flags                   (--drop-status aborted,failed)
#   ESTIMATOR     when set, arl-advantage gets `--estimator $ESTIMATOR`
#                 before ADV_ARGS (which then names no estimator). `gae` is
#                 PPO with a learned critic: each step scores the batch with
#                 `arl-train values --critic $RUN/critic/step-(K-1)` before
#                 the advantages, and arl-train also trains the critic
#                 (`--train-critic`) into $RUN/critic/step-K
#   ADV_ARGS      arl-advantage flags                (--estimator grpo; none with ESTIMATOR)
#   CRITIC        the critic at step 0 (gae)         (MODEL: the policy, zero value head)
#   CRITIC_ARGS   arl-train critic flags (gae)       (--critic-lr 1e-5)
#   VALUES_ARGS   extra `arl-train values` flags (gae; e.g. --threads 1)
#   TRAIN_ARGS    arl-train flags for an RL step     (--lr 1e-6)
#   SEED       base seed                             (1)
#   KEEP_OPTIMIZER  1: the first RL step also continues the starting
#              checkpoint's AdamW moments (e.g. the SFT run's)   (0)
#   LORA_RANK  R > 0: train a LoRA adapter of rank R instead of the weights
#              (arl-train --lora-rank): ckpt/step-K (K ≥ 1) are adapters; the
#              server keeps the base and gets each new adapter as LORA_NAME
#              (arl-sync --lora), rollouts and evaluations ask for it
#              (arl-rollout --lora)                              (0: off)
#   LORA_ARGS  more arl-train LoRA flags  (--lora-alpha 32 --lora-targets all-linear)
#   LORA_NAME  the adapter's name on the servers                 (policy)

: "${BIN:=target/release}"
: "${BATCH:=16}"
: "${N:=8}"
: "${ROLLOUT_ARGS:=}"
: "${TEMPERATURE:=1.0}"
: "${REWARD_ARGS:=--rm auto}"
: "${FILTER_ARGS:=--drop-status aborted,failed}"
: "${ESTIMATOR:=}"
if [ -n "$ESTIMATOR" ]; then
  : "${ADV_ARGS:=}"
  ADV_ESTIMATOR="--estimator $ESTIMATOR"
else
  : "${ADV_ARGS:=--estimator grpo}"
  ADV_ESTIMATOR=
fi
: "${CRITIC_ARGS:=--critic-lr 1e-5}"
: "${VALUES_ARGS:=}"
: "${TRAIN_ARGS:=--lr 1e-6}"
: "${SEED:=1}"
: "${KEEP_OPTIMIZER:=0}"

# Progress lines of the long phases (progress_start/progress_stop).
. scripts/lib/progress.sh

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }

# arl TOOL ARGS…: runs $BIN/TOOL, first appending the exact command (shell-
# quoted, arguments expanded) to $RUN/logs/commands.log: the run's record of
# what it ran, attached to the tracking backends' runs. arl_exec: the same,
# replacing the (sub)shell.
log_command() {
  local line
  printf -v line ' %q' "${@:2}"
  [ -d "$RUN/logs" ] && printf '%q%s\n' "$BIN/$1" "$line" >>"$RUN/logs/commands.log"
  true
}
arl() { log_command "$@" && "$BIN/$1" "${@:2}"; }
arl_exec() { log_command "$@" && exec "$BIN/$1" "${@:2}"; }

# write_params: $RUN/params.env, the run's hyper-parameters for the tracking
# backends: every variable the experiment file ($EXP) sets and every loop
# variable, with its effective value.
write_params() {
  local v vars=""
  if [ -n "${EXP:-}" ] && [ -f "$EXP" ]; then
    vars=$(grep -oE '^[A-Z][A-Z0-9_]*=' "$EXP" | tr -d =)
  fi
  vars="$vars BIN RUN MODEL PROMPTS EVAL_PROMPTS STEPS BATCH N SEED TEMPERATURE ROLLOUT_ARGS REWARD_ARGS FILTER_ARGS
    ESTIMATOR ADV_ARGS TRAIN_ARGS CRITIC CRITIC_ARGS VALUES_ARGS KEEP_OPTIMIZER EVAL_EVERY EVAL_K SERVE_ARGS
    SYNC_ARGS ENDPOINT MAX_AHEAD MAX_STALENESS"
  {
    if [ -n "${EXP:-}" ]; then printf 'EXPERIMENT=%s\n' "$EXP"; fi
    for v in $(printf '%s\n' $vars | awk '!seen[$0]++'); do
      if [ -n "${!v+x}" ]; then printf '%s=%s\n' "$v" "${!v}"; fi
    done
  } >"$RUN/params.env.tmp"
  mv "$RUN/params.env.tmp" "$RUN/params.env"
}

# track_start: with TRACKING set (any of tensorboard,wandb,mlflow, or all),
# scripts/track.py follows this script's run directory in the background and
# forwards every metrics line to those backends (records in $RUN/tracking/,
# its log in $RUN/logs/tracking.log). One tracker per run: a loop script
# started by run.sh leaves it to run.sh's.
track_start() {
  [ -n "${TRACKING:-}" ] || return 0
  [ -n "${ARL_TRACKER_PID:-}" ] && kill -0 "$ARL_TRACKER_PID" 2>/dev/null && return 0
  local py=${ARL_PYTHON:-${ARL_CACHE:-$HOME/.cache/arl}/venv-torch-2.13.0/bin/python}
  scripts/setup.sh --tracking >&2
  write_params
  "$py" scripts/track.py --to "$TRACKING" --run "$RUN" --name "${NAME:-$(basename "$RUN")}" --follow $$ \
    2>>"$RUN/logs/tracking.log" &
  ARL_TRACKER_PID=$!
  TRACKER_MINE=$ARL_TRACKER_PID
  export ARL_TRACKER_PID
  log "tracking: $TRACKING → $RUN/tracking/ (log: $RUN/logs/tracking.log)"
}

# track_stop: the tracker forwards what is left and closes its runs as
# finished (a script that dies instead leaves them closed as failed).
track_stop() {
  [ -n "${TRACKER_MINE:-}" ] || return 0
  kill -TERM "$TRACKER_MINE" 2>/dev/null || true
  wait "$TRACKER_MINE" 2>/dev/null || log "tracking: the tracker failed (see $RUN/logs/tracking.log)"
  TRACKER_MINE=
}

# lora_on: whether the run trains a LoRA adapter (LORA_RANK > 0).
lora_on() { [ "${LORA_RANK:-0}" -gt 0 ]; }

# lora_flag DIR: `--lora $LORA_NAME` when DIR is an adapter (the policy a
# rollout or an evaluation must ask the server for), nothing otherwise.
lora_flag() {
  if lora_on && [ -f "$1/adapter_config.json" ]; then echo "--lora ${LORA_NAME:-policy}"; fi
}

# start_server DIR PORT VERSION: arl-serve on loopback, waits for /health.
start_server() {
  local dir=$1 port=$2 version=$3
  # exec: SERVER_PID is arl-serve's own.
  (arl_exec arl-serve --model-path "$dir" --port "$port" --weight-version "$version" ${SERVE_ARGS:-}) \
    >>"$RUN/logs/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -n 20 "$RUN/logs/serve.log" >&2; return 1; }
    sleep 0.2
  done
  echo "arl-serve did not come up on port $port" >&2
  return 1
}

# accuracy FILE: the share of scored samples whose verifier score
# (reward_detail.score, before tool costs and shaping) is 1.
accuracy() {
  jq -s '[.[] | if (.reward_detail.score // .reward // 0) >= 1 then 1 else 0 end] | add / length' "$1"
}

# lenient FILE: the share of samples whose last number (commas dropped)
# equals the label, whatever the format: a reading that counts a correct
# answer the grader cannot find (no `Answer:` line, no \boxed{}).
lenient() {
  jq -s '[.[] | ((.response // "" | [scan("-?[0-9][0-9,]*(?:\\.[0-9]+)?")] | last // "" | gsub(",";"")) == (.label|tostring))
          | if . then 1 else 0 end] | add / length' "$1"
}

# answer_format FILE: the share of samples in which the grader found an
# answer (an `Answer:` line or \boxed{}), right or wrong.
answer_format() {
  jq -s '[.[] | if .reward_detail.extracted != null then 1 else 0 end] | add / length' "$1"
}

# train_step STEP POLICY_DIR OUT_DIR STEP_DIR: one arl-train run on
# STEP_DIR/batch.jsonl, continuing POLICY_DIR's AdamW moments after the first
# step (or from the first with KEEP_OPTIMIZER=1); the exact command goes to
# STEP_DIR/train.cmd for scripts/replay.sh.
train_step() {
  local step=$1 policy=$2 out=$3 d=$4 resume="" critic="" lora=""
  [ -d "$policy/trainer_state" ] && { [ "$step" -gt 1 ] || [ "$KEEP_OPTIMIZER" = 1 ]; } && resume=--resume
  # PPO: the critic of step K-1 is trained on the same batch into critic/step-K
  # (written before the policy, so a step with its checkpoint has its critic).
  is_gae && critic="--train-critic --critic $RUN/critic/step-$((step - 1)) --critic-save $RUN/critic/step-$step $CRITIC_ARGS"
  lora_on && lora="--lora-rank $LORA_RANK ${LORA_ARGS:---lora-alpha 32 --lora-targets all-linear}"
  # The log-probs are of the distribution the rollout sampled from: logits / TEMPERATURE.
  # Where it is: arl-train's optimizer steps, a line each in
  # train-metrics.jsonl (which a step that is run again appends to).
  local m=0
  [ -f "$d/train-metrics.jsonl" ] && m=$(wc -l <"$d/train-metrics.jsonl")
  progress_start -n "$(progress_train_steps "$(wc -l <"$d/batch.jsonl")" "$TRAIN_ARGS")" -u "optimizer steps" \
    "step $step${STEPS:+/$STEPS}: training" progress_metrics "$d/train-metrics.jsonl" "-$m"
  echo "$BIN/arl-train -q --model $policy $resume --save $out -i $d/batch.jsonl --temperature $TEMPERATURE $TRAIN_ARGS $critic $lora --seed $((SEED + step))" >"$d/train.cmd"
  arl arl-train -q --model "$policy" $resume --save "$out" -i "$d/batch.jsonl" --temperature "$TEMPERATURE" $TRAIN_ARGS $critic $lora \
      --seed "$((SEED + step))" --metrics "$d/train-metrics.jsonl"
  progress_stop
}

# group_size: `--group-size $N` for the group estimators (every one but the
# per-record gae and reinforce++, which arl-advantage refuses it for).
group_size() {
  case "$ESTIMATOR" in
    gae | reinforce++) ;;
    *) echo "--group-size $N" ;;
  esac
}

# is_gae: whether the loop runs PPO with a learned critic.
is_gae() { [ "$ESTIMATOR" = gae ]; }

# init_critic: links $RUN/critic/step-0 to $CRITIC (default: $MODEL, the
# policy at step 0, which arl-train reads as a critic with a zero value head).
init_critic() {
  is_gae || return 0
  mkdir -p "$RUN/critic"
  [ -e "$RUN/critic/step-0" ] || ln -s "$(realpath "${CRITIC:-$MODEL}")" "$RUN/critic/step-0"
}

# values_of STEP: the batch on stdin with `values` from critic/step-(STEP-1)
# under gae; unchanged otherwise.
values_of() {
  if is_gae; then
    arl arl-train values -q --critic "$RUN/critic/step-$(($1 - 1))" $VALUES_ARGS
  else
    cat
  fi
}

# sync_to STEP: pushes ckpt/step-STEP to $ENDPOINT (or $SYNC_ARGS) as weight
# version STEP (an adapter as $LORA_NAME under LoRA).
sync_to() {
  arl arl-sync --checkpoint "$RUN/ckpt/step-$1" $(lora_flag "$RUN/ckpt/step-$1") ${SYNC_ARGS:---endpoint $ENDPOINT} --weight-version "$1" \
    >>"$RUN/logs/sync.log" 2>&1
}

# serve_or_sync LAST: without $ENDPOINT, starts arl-serve on ckpt/step-LAST
# (port $PORT, default 30123) and sets ENDPOINT; with one, re-syncs LAST to it
# after a restart.
serve_or_sync() {
  local last=$1
  if [ -z "${ENDPOINT:-}" ]; then
    PORT=${PORT:-30123}
    ENDPOINT=http://127.0.0.1:$PORT
    if lora_on && [ "$last" -gt 0 ]; then
      # LoRA: the base, then the adapter of step LAST as $LORA_NAME.
      log "arl-serve: the base with ckpt/step-$last as adapter ${LORA_NAME:-policy} on $ENDPOINT (weight version $last)"
      start_server "$MODEL" "$PORT" 0
      sync_to "$last"
    else
      log "arl-serve: ckpt/step-$last on $ENDPOINT (weight version $last)"
      start_server "$RUN/ckpt/step-$last" "$PORT" "$last"
    fi
  elif [ "$last" -gt 0 ]; then
    sync_to "$last"
  fi
}

# jget FILE FILTER: one value out of a JSON file (null when missing).
jget() { jq -c "$2 // null" "$1"; }

# eval_policy STEP ENDPOINT TOKENIZER: held-out evaluation of what the server
# serves now: greedy (temperature 0, one sample) and sampled (EVAL_K samples at
# $TEMPERATURE) on $EVAL_PROMPTS; appends a {"phase":"eval"} line.
eval_policy() {
  local step=$1 endpoint=$2 tok=$3 d="$RUN/eval/step-$1"
  mkdir -p "$d"
  progress_start "eval step $step: greedy"
  arl arl-rollout -q -i "$EVAL_PROMPTS" --endpoint "$endpoint" --tokenizer "$tok" $(lora_flag "$tok") \
      -n 1 --temperature 0 $ROLLOUT_ARGS \
    | arl arl-reward -q $REWARD_ARGS -o "$d/greedy.jsonl"
  progress_start "eval step $step: ${EVAL_K:-8} samples per prompt"
  arl arl-rollout -q -i "$EVAL_PROMPTS" --endpoint "$endpoint" --tokenizer "$tok" $(lora_flag "$tok") \
      -n "${EVAL_K:-8}" --temperature "$TEMPERATURE" $ROLLOUT_ARGS \
    | arl arl-reward -q $REWARD_ARGS -o "$d/sampled.jsonl"
  progress_stop
  arl arl-inspect stats -q --json ${STATS_BY:-} -i "$d/greedy.jsonl" >"$d/greedy.stats.json"
  arl arl-inspect stats -q --json ${STATS_BY:-} -i "$d/sampled.jsonl" >"$d/sampled.stats.json"
  local g gl gf sl
  g=$(accuracy "$d/greedy.jsonl")
  gl=$(lenient "$d/greedy.jsonl")
  gf=$(answer_format "$d/greedy.jsonl")
  sl=$(lenient "$d/sampled.jsonl")
  jq -nc --argjson step "$step" --argjson g "$g" --argjson gl "$gl" --argjson gf "$gf" --argjson sl "$sl" \
     --slurpfile gs "$d/greedy.stats.json" --slurpfile ss "$d/sampled.stats.json" \
     '{phase: "eval", step: $step, greedy_accuracy: $g, greedy_lenient: $gl, greedy_answer_format: $gf,
       mean_at_k_lenient: $sl,
       greedy_tool_call_rate: ($gs[0].tool_calls.mean // 0),
       sampled_reward: $ss[0].reward.mean,
       mean_at_k: ([$ss[0].by_data_source[] | .mean_at_k] | add / length),
       pass_at_k: ([$ss[0].by_data_source[] | .pass_at_k] | add / length),
       k: ([$ss[0].by_data_source[] | .k] | max),
       by_data_source: ($ss[0].by_data_source | map_values({mean_at_k, pass_at_k, k})),
       greedy_by: ($gs[0] | with_entries(select(.key | startswith("by_metadata"))) | map_values(map_values({reward: .reward.mean, tool_calls: .tool_calls_mean})))}' \
    >>"$RUN/metrics.jsonl"
  tail -n 1 "$RUN/metrics.jsonl" \
    | jq -r '"eval  step \(.step): greedy accuracy \(.greedy_accuracy*1000|round/1000) (last number \(.greedy_lenient*1000|round/1000), answer format \(.greedy_answer_format*1000|round/1000))  mean@\(.k) \(.mean_at_k*1000|round/1000) (last number \(.mean_at_k_lenient*1000|round/1000))  pass@\(.k) \(.pass_at_k*1000|round/1000)"' >&2
}

# rl_step STEP ENDPOINT POLICY_DIR OUT_DIR: one synchronous RL step (GRPO, or
# PPO under ESTIMATOR=gae): rollout of batch STEP-1 of $PROMPTS against the
# endpoint, reward, filter, (values,) advantages, one arl-train run from
# POLICY_DIR into OUT_DIR. Every intermediate file is
# kept under $RUN/steps/step-N/ (inputs for replay: batch.jsonl, the policy,
# the seed). Appends a {"phase":"rl"} line. With STEPS, LOOP_T0 (when the
# loop's first step started) and LOOP_FROM (the step before it), its line
# says "step K/STEPS" and the loop's time so far and left.
rl_step() {
  local step=$1 endpoint=$2 policy=$3 out=$4 d="$RUN/steps/step-$1" t0 t1 t2 of="" run=""
  [ -n "${STEPS:-}" ] && of=/$STEPS
  mkdir -p "$d"
  t0=$(now)
  # Where the rollout is: the samples its trace has ended (--trace writes
  # rollout.trace.jsonl.partial as it goes).
  progress_start -n "$((BATCH * N))" -u samples "step $step$of: rollout" progress_count "$d/rollout.trace.jsonl" sample_end
  arl arl-rollout -q -i "$PROMPTS" --batch-size "$BATCH" --step "$((step - 1))" --seed "$SEED" \
      --endpoint "$endpoint" --tokenizer "$policy" $(lora_flag "$policy") -n "$N" --temperature "$TEMPERATURE" $ROLLOUT_ARGS \
      --trace "$d/rollout.trace.jsonl" \
    | arl arl-reward -q $REWARD_ARGS -o "$d/scored.jsonl"
  t1=$(now)
  progress_start "step $step$of: advantages"
  arl arl-filter -q $FILTER_ARGS --stats-json "$d/filter.json" -i "$d/scored.jsonl" \
    | values_of "$step" \
    | arl arl-advantage -q $ADV_ESTIMATOR $ADV_ARGS $(group_size) -o "$d/batch.jsonl"
  train_step "$step" "$policy" "$out" "$d"
  t2=$(now)
  arl arl-inspect stats -q --json ${STATS_BY:-} -i "$d/scored.jsonl" >"$d/stats.json"
  local acc
  acc=$(accuracy "$d/scored.jsonl")
  jq -nc --argjson step "$step" --argjson acc "$acc" --slurpfile st "$d/stats.json" \
     --slurpfile tm <(tail -n 1 "$d/train-metrics.jsonl") \
     --argjson rs "$(echo "$t1 - $t0" | bc)" --argjson ts "$(echo "$t2 - $t1" | bc)" \
     '{phase: "rl", step: $step, samples: $st[0].records, reward_mean: $st[0].reward.mean, accuracy: $acc,
       tool_call_rate: ($st[0].tool_calls.mean // 0), response_len: $st[0].response_len.mean,
       loss: $tm[0].loss, grad_norm: $tm[0].grad_norm, clip_frac: $tm[0].clipfrac, entropy: $tm[0].entropy, kl_loss: $tm[0].kl_loss,
       value_loss: $tm[0].value_loss, value_explained_var: $tm[0].value_explained_var, value_clipfrac: $tm[0].value_clipfrac,
       by: ($st[0] | with_entries(select(.key | startswith("by_metadata"))) | map_values(map_values({reward: .reward.mean, tool_calls: .tool_calls_mean}))),
       rollout_s: $rs, train_s: $ts, samples_per_s: ($st[0].records / ($rs + $ts))}' \
    >>"$RUN/metrics.jsonl"
  if [ -n "$of" ] && [ -n "${LOOP_T0:-}" ]; then
    progress_eta "$step" "$STEPS" "$LOOP_T0" "${LOOP_FROM:-0}"
    run="  ($REPLY)"
  fi
  tail -n 1 "$RUN/metrics.jsonl" \
    | jq -r --arg of "$of" --arg run "$run" '"step \(.step)\($of): reward \(.reward_mean*1000|round/1000)  accuracy \(.accuracy*1000|round/1000)  tool calls \(.tool_call_rate*100|round/100)  loss \(.loss*10000|round/10000)\(if .value_loss == null then "" else "  value loss \(.value_loss*10000|round/10000) expl. var \(.value_explained_var // "n/a" | if type == "number" then .*1000|round/1000 else . end)" end)  rollout \(.rollout_s|round)s train \(.train_s|round)s\($run)"' >&2
}
