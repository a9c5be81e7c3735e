#!/usr/bin/env python3
"""Golden files for arl's decoder: tiny random Qwen2, Qwen3 and Llama 3
checkpoints made by Hugging Face `transformers`, with the logits transformers
computes for a fixed padded batch.

    $ARL_PYTHON scripts/golden/make_tiny.py testdata/golden

writes, per family, DIR/<family>/{config.json, model.safetensors} and
DIR/<family>/expected.safetensors (input_ids [B,T] int64, attention_mask [B,T]
int64, logits [B,T,V] float32). Coverage: Qwen2 (q/k/v bias, GQA, tied
embeddings), Qwen3 (q/k RMSNorm, explicit head_dim ≠ hidden/heads, untied),
Llama 3 (llama3 rope scaling, GQA, untied). The Llama config is rewritten with
the classic `rope_theta`/`rope_scaling` keys, so both config dialects are
exercised (transformers 5 itself writes `rope_parameters`).

    $ARL_PYTHON scripts/golden/make_tiny.py --check-logprobs MODEL_DIR RECORDS.jsonl

loads an arl-written checkpoint with transformers and prints the largest
|Δ| between its response-token log-probs and the records' `ref_log_probs`
(written by `arl-train logprobs`).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

V = 96


def configs():
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6)
    return {
        "qwen2": Qwen2Config(**common, tie_word_embeddings=True, rope_theta=10000.0),
        "qwen3": Qwen3Config(**common, head_dim=16, tie_word_embeddings=False, rope_theta=1000000.0,
                             attention_bias=False),
        "llama": LlamaConfig(**common, tie_word_embeddings=False, rope_theta=500000.0, attention_bias=False,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    }


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (2, 12), generator=g)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0  # right padding
    ids[1, 8:] = 0
    return ids, mask


def make(out):
    torch.manual_seed(0)
    ids, mask = batch()
    for name, cfg in configs().items():
        cfg._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        # Random norms and biases too, so a missed weight cannot go unnoticed.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                elif n.endswith("bias"):
                    p.copy_(0.1 * torch.randn_like(p))
        d = os.path.join(out, name)
        model.save_pretrained(d, safe_serialization=True)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
        save_file({"input_ids": ids.contiguous(), "attention_mask": mask.contiguous(), "logits": logits.contiguous()},
                  os.path.join(d, "expected.safetensors"))
        if name == "llama":
            p = os.path.join(d, "config.json")
            c = json.load(open(p))
            rp = c.pop("rope_parameters")
            c["rope_theta"] = rp.pop("rope_theta")
            c["rope_scaling"] = rp
            json.dump(c, open(p, "w"), indent=2)
        print(name, tuple(logits.shape), file=sys.stderr)


def check_logprobs(model_dir, records):
    adapter = os.path.join(model_dir, "adapter_config.json")
    if os.path.exists(adapter):
        # A LoRA adapter (arl-train --lora-rank): PEFT's own loader on its base.
        from peft import PeftModel
        base = json.load(open(adapter))["base_model_name_or_path"]
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        model = PeftModel.from_pretrained(model, model_dir).eval()
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    worst = 0.0
    for line in open(records):
        r = json.loads(line)
        ids = torch.tensor([r["tokens"]])
        p = r["prompt_len"]
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=ids).logits.float()[0], -1)
        got = lp[p - 1:-1].gather(-1, ids[0, p:, None])[:, 0]
        worst = max(worst, (got - torch.tensor(r["ref_log_probs"])).abs().max().item())
    print(json.dumps({"max_abs_diff": worst}))


if __name__ == "__main__":
    if sys.argv[1] == "--check-logprobs":
        check_logprobs(sys.argv[2], sys.argv[3])
    else:
        make(sys.argv[1])
