# Sourced by scripts/bench/train.sh and train-dp.sh: a random Qwen2 model
# (LAYERS × HIDDEN, character vocabulary) in $W/model and STEPS × BATCH
# records of LEN tokens in $W/recs.jsonl, made with $ARL and $PY.
cat > "$W/cfg.json" <<JSON
{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 256, "hidden_size": $HIDDEN,
 "intermediate_size": $((HIDDEN * 3)), "num_hidden_layers": $LAYERS, "num_attention_heads": $((HIDDEN / 64)),
 "num_key_value_heads": $((HIDDEN / 128 > 0 ? HIDDEN / 128 : 1)), "max_position_embeddings": 8192,
 "tie_word_embeddings": true, "rope_theta": 10000.0}
JSON
"$ARL" make-tokenizer --out "$W/tok"
"$ARL" init --config "$W/cfg.json" --tokenizer "$W/tok" --out "$W/model"
"$PY" - "$STEPS" "$BATCH" "$LEN" > "$W/recs.jsonl" <<'PYEOF'
import json, random, sys
steps, batch, n = map(int, sys.argv[1:4])
random.seed(0)
for i in range(steps * batch):
    p = 32
    toks = [random.randrange(32, 127) for _ in range(n)]
    print(json.dumps({"prompt_id": f"b{i}", "tokens": toks, "prompt_len": p, "loss_mask": [1] * (n - p),
                      "advantages": [random.gauss(0, 1)] * (n - p),
                      "rollout_log_probs": [-5.5 + random.gauss(0, 0.1) for _ in range(n - p)]}))
PYEOF
