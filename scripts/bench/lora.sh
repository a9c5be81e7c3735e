#!/usr/bin/env bash
# LoRA against full fine-tuning on SmolLM2-135M (the real weights when
# `make models` fetched them, else a random model of its shape):
#
#   1. one arl-train RL step on a batch of B × L tokens (default 8 × 512),
#      full fine-tuning vs `--lora-rank R` (all-linear), with the default
#      settings (one micro-batch) and memory-lean ones (gradient
#      checkpointing, 256-position LM-head chunks, micro-batches of 1,024
#      tokens): the process's peak RSS (GNU
#      time), the step's seconds, the optimizer state and the checkpoint's
#      bytes, and the ratios LoRA / full;
#   2. weight sync (with SYNC=1, the default): arl-serve on the model, then
#      `arl-sync --checkpoint` of the full checkpoint vs `arl-sync --lora` of
#      an adapter, best of REPEAT each (the command's wall time, verification
#      included), and the time the server takes to apply each (the POST
#      alone: `/update_weights_from_disk` vs `/load_lora_adapter`), with the
#      ratios full / LoRA. TRAIN=0 skips part 1.
#
#   scripts/bench/lora.sh                       # B=8 L=512 R=16 REPEAT=3
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
B=${B:-8}; L=${L:-512}; R=${R:-16}; REPEAT=${REPEAT:-3}; THREADS=${THREADS:-$(nproc)}; SYNC=${SYNC:-1}
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
if [ -z "${GOMP_SPINCOUNT:-}" ] && [ -z "${OMP_WAIT_POLICY:-}" ]; then export GOMP_SPINCOUNT=1000; fi
cargo build --release --quiet -p arl-train
[ "$SYNC" = 1 ] && cargo build --release --quiet -p arl-serve -p arl-sync
BIN=target/release
W=$(mktemp -d); SERVER=
. scripts/lib/progress.sh
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$W"; progress_exit' EXIT
MODEL=${MODEL:-${ARL_MODELS:-${ARL_CACHE:-$HOME/.cache/arl}/models}/SmolLM2-135M-Instruct}
if [ ! -f "$MODEL/config.json" ]; then
  echo "($MODEL not found: a random model of SmolLM2's shape)"
  echo '{"model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192, "tie_word_embeddings": true}' >"$W/cfg.json"
  "$BIN/arl-train" make-tokenizer --out "$W/tok" >/dev/null
  "$BIN/arl-train" init --config "$W/cfg.json" --tokenizer "$W/tok" --out "$W/model" >/dev/null
  MODEL=$W/model
fi
V=$(jq .vocab_size "$MODEL/config.json")
"$PY" - "$B" "$L" "$V" >"$W/batch.jsonl" <<'PYEOF'
import json, random, sys
b, n, v = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = random.Random(0)
p = 64
for i in range(b):
    m = n - p
    print(json.dumps({"prompt_id": f"p{i // 4}", "tokens": [r.randrange(v) for _ in range(n)], "prompt_len": p,
                      "loss_mask": [1] * m, "advantages": [1.0 if i % 2 else -1.0] * m,
                      "rollout_log_probs": [-8.0] * m}))
PYEOF
step() { # NAME FLAGS…: one RL step, checkpoint in $W/NAME; prints "rss_mb step_s opt_bytes ckpt_bytes"
  local name=$1 mb=$((B * L)); shift
  case " $* " in *" --max-tokens-per-micro-batch "*) mb= ;; esac
  /usr/bin/time -f '%M' -o "$W/$name.rss" "$BIN/arl-train" --model "$MODEL" -i "$W/batch.jsonl" --save "$W/$name" \
    --threads "$THREADS" --lr 1e-5 --global-batch-size "$B" ${mb:+--max-tokens-per-micro-batch $mb} \
    --metrics "$W/$name.jsonl" -q "$@" >/dev/null
  local m; m=$(tail -n 1 "$W/$name.jsonl")
  local ck; ck=$(find "$W/$name" -name '*.safetensors' -not -path '*/trainer_state/*' -printf '%s\n' | awk '{s+=$1} END {print s}')
  echo "$(($(cat "$W/$name.rss") / 1024)) $(jq -r '.step_time_s*10|round/10' <<<"$m") $(jq -r .optimizer_state_bytes <<<"$m") $ck"
}
if [ "${TRAIN:-1}" = 1 ]; then
printf 'SmolLM2-135M shape (%s), one RL step on %s × %s tokens (one micro-batch), %s threads\n' "$MODEL" "$B" "$L" "$THREADS"
printf '%-42s %12s %8s %18s %18s\n' run 'peak RSS MB' step_s 'optimizer bytes' 'checkpoint bytes'
LEAN="--gradient-checkpointing --logprob-chunk-tokens 256 --max-tokens-per-micro-batch 1024"
for CK in "" "$LEAN"; do
  progress_phase "lora: full fine-tuning, one step${CK:+ (memory-lean)}"
  read -r FR FS FO FC <<<"$(step full $CK)"
  progress_phase "lora: LoRA r=$R, one step${CK:+ (memory-lean)}"
  read -r LR_ LS LO LC <<<"$(step lora $CK --lora-rank "$R" --lora-targets all-linear)"
  progress_stop
  [ -n "$CK" ] && echo "memory-lean: $CK"
  printf '%-42s %12s %8s %18s %18s\n' "full fine-tuning" "$FR" "$FS" "$FO" "$FC"
  printf '%-42s %12s %8s %18s %18s\n' "LoRA r=$R all-linear" "$LR_" "$LS" "$LO" "$LC"
  "$PY" -c "print('  LoRA / full: peak RSS %.2fx, step time %.2fx, optimizer state %.4fx, checkpoint %.4fx' % ($LR_/$FR, $LS/$FS, $LO/$FO, $LC/$FC))"
done
fi
[ "$SYNC" = 1 ] || exit 0

# 2. Sync: the full checkpoint (the model itself, as arl-train saves it) vs an
# adapter of rank R (part 1's, or one made here with a memory-lean step).
progress_phase "lora: weight sync, full checkpoint vs adapter, best of $REPEAT"
[ -f "$W/lora/adapter_config.json" ] ||
  step lora --lora-rank "$R" --lora-targets all-linear --gradient-checkpointing --logprob-chunk-tokens 256 \
    --max-tokens-per-micro-batch 1024 >/dev/null
PORT=$((30500 + RANDOM % 1000))
"$BIN/arl-serve" --model-path "$MODEL" --port "$PORT" --weight-version 0 >"$W/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
best() { # FLAGS…: the best wall time of REPEAT syncs, in seconds
  local b=999999 t0 t1 i
  for i in $(seq "$REPEAT"); do
    t0=$(date +%s.%N)
    "$BIN/arl-sync" --endpoint "http://127.0.0.1:$PORT" --weight-version "$((i + 1))" "$@" >>"$W/sync.log" 2>&1
    t1=$(date +%s.%N)
    b=$("$PY" -c "print(min($b, $t1 - $t0))")
  done
  echo "$b"
}
SF=$(best --checkpoint "$MODEL")
SL=$(best --checkpoint "$W/lora" --lora policy)
apply() { # PATH BODY: the best time of REPEAT POSTs (the server's own work, no verification)
  local b=999999 t i
  for i in $(seq "$REPEAT"); do
    t=$(curl -s -o /dev/null -w '%{time_total}' -X POST "http://127.0.0.1:$PORT$1" -H 'content-type: application/json' -d "$2")
    b=$("$PY" -c "print(min($b, $t))")
  done
  echo "$b"
}
AF=$(apply /update_weights_from_disk "{\"model_path\": \"$MODEL\"}")
AL=$(apply /load_lora_adapter "{\"lora_name\": \"policy\", \"lora_path\": \"$W/lora\"}")
progress_stop
"$PY" -c "print('the servers applying it (best of $REPEAT POSTs): full checkpoint %.3f s, adapter %.3f s: %.1fx' % ($AF, $AL, $AF/$AL))"
"$PY" -c "print('arl-sync end to end (best of $REPEAT, verified by a generation): full %.3f s, adapter %.3f s: %.1fx' % ($SF, $SL, $SF/$SL))"
