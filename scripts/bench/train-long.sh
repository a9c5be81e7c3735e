#!/usr/bin/env bash
# Long responses: peak memory of one arl-train RL step on a single sample of
# L tokens, with gradient checkpointing, packed micro-batches and the chunked
# LM head (the defaults), for each L in LENS, on a random model of a real shape:
#
#   SHAPE=smollm2   SmolLM2-135M: 30 layers, width 576, 9/3 heads, MLP 1,536, vocabulary 49,152
#   SHAPE=qwen05    Qwen2.5-0.5B: 24 layers, width 896, 14/2 heads, MLP 4,864, vocabulary 151,936
#
# Prints, per length, the step's seconds and the process's peak RSS (GNU
# time), and the RSS added per 1,000 tokens between consecutive lengths: it
# stays about constant when memory grows linearly in the length (attention
# through SDPA's flash kernel, one block's activations alive at a time,
# the LM head in chunks), and would double from row to row if it grew
# quadratically. A sample longer than the micro-batch budget goes alone.
#
#   SHAPE=smollm2 LENS="2048 4096 8192 16384" scripts/bench/train-long.sh   # minutes per long step on a CPU
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
SHAPE=${SHAPE:-smollm2}; LENS=${LENS:-2048 4096 8192 16384}; THREADS=${THREADS:-$(nproc)}; EXTRA=${EXTRA:-}
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
if [ -z "${GOMP_SPINCOUNT:-}" ] && [ -z "${OMP_WAIT_POLICY:-}" ]; then export GOMP_SPINCOUNT=1000; fi
cargo build --release --quiet -p arl-train
ARL=target/release/arl-train
. scripts/lib/progress.sh
W=$(mktemp -d); trap 'rm -rf "$W"; progress_exit' EXIT
case "$SHAPE" in
  smollm2) CFG='"model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "rope_theta": 100000.0, "rms_norm_eps": 1e-5' ;;
  qwen05) CFG='"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6' ;;
  *) echo "SHAPE is smollm2 or qwen05" >&2; exit 2 ;;
esac
echo "{$CFG, \"max_position_embeddings\": 32768, \"tie_word_embeddings\": true}" > "$W/cfg.json"
"$ARL" make-tokenizer --out "$W/tok" >/dev/null
"$ARL" init --config "$W/cfg.json" --tokenizer "$W/tok" --out "$W/model" >/dev/null
V=$("$PY" -c "import json; print(json.load(open('$W/cfg.json'))['vocab_size'])")
printf '%s shape, one sample per step, gradient checkpointing, %s threads\n' "$SHAPE" "$THREADS"
printf '%8s %10s %14s %20s\n' tokens step_s 'peak RSS MB' 'MB per 1k tokens'
PREV_L=; PREV_R=
i=0
for L in $LENS; do
  i=$((i + 1))
  progress_phase "train-long: one RL step on $L tokens ($i of $(wc -w <<<"$LENS"))"
  "$PY" - "$L" "$V" > "$W/rec.jsonl" <<'PYEOF'
import json, random, sys
n, v = int(sys.argv[1]), int(sys.argv[2])
r = random.Random(n)
p = 32
toks = [r.randrange(v) for _ in range(n)]
m = n - p
print(json.dumps({"prompt_id": "long", "tokens": toks, "prompt_len": p, "loss_mask": [1] * m,
                  "advantages": [1.0] * m, "rollout_log_probs": [-10.0] * m}))
PYEOF
  /usr/bin/time -f '%M' -o "$W/rss" "$ARL" --model "$W/model" -i "$W/rec.jsonl" --gradient-checkpointing \
    --max-tokens-per-micro-batch 1024 --threads "$THREADS" --lr 1e-6 --metrics "$W/m.jsonl" -q $EXTRA >/dev/null
  R=$(( $(cat "$W/rss") / 1024 ))
  S=$("$PY" -c "import json; print(round(json.loads(open('$W/m.jsonl').readlines()[-1])['step_time_s'], 1))")
  PER=-
  if [ -n "$PREV_L" ]; then PER=$("$PY" -c "print(round(($R - $PREV_R) / (($L - $PREV_L) / 1000), 1))"); fi
  progress_stop
  printf '%8d %10s %14d %20s\n' "$L" "$S" "$R" "$PER"
  PREV_L=$L; PREV_R=$R
done
