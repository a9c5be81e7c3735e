# Sourced by scripts/bench/train-scale.sh and train-zero.sh: a random model of
# the Qwen2.5-0.5B shape (vocabulary 151,936, width 896, 14 query / 2 KV
# heads, MLP 4,864; LAYERS of its 24 layers) in $W/model, made with $ARL.
cat > "$W/cfg.json" <<JSON
{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 151936, "hidden_size": 896,
 "intermediate_size": 4864, "num_hidden_layers": $LAYERS, "num_attention_heads": 14, "num_key_value_heads": 2,
 "max_position_embeddings": 32768, "tie_word_embeddings": true, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
JSON
"$ARL" make-tokenizer --out "$W/tok" >/dev/null
"$ARL" init --config "$W/cfg.json" --tokenizer "$W/tok" --out "$W/model" >/dev/null
