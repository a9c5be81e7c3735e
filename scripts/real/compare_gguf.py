#!/usr/bin/env python3
"""Compares a directory written by `arl-train convert` with transformers' own
loading of the same GGUF (its dequantization through gguf-py, and its undoing
of llama.cpp's query/key row order): every tensor, bit for bit.

usage: compare_gguf.py GGUF HF_DIR   (prints one JSON line; exit 1 on a difference)
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

gguf, hf_dir = sys.argv[1], sys.argv[2]
theirs = AutoModelForCausalLM.from_pretrained(
    os.path.dirname(gguf), gguf_file=os.path.basename(gguf), torch_dtype=torch.float32
).state_dict()
ours = load_file(os.path.join(hf_dir, "model.safetensors"))
report = {"tensors": 0, "bit_identical": 0, "max_abs_diff": 0.0, "missing": [], "extra": [], "shape": []}
for name, t in theirs.items():
    if name == "lm_head.weight" and name not in ours:
        # Tied: transformers' lm_head is the embedding.
        t2 = ours["model.embed_tokens.weight"]
    elif name not in ours:
        report["missing"].append(name)
        continue
    else:
        t2 = ours[name]
    report["tensors"] += 1
    if t.shape != t2.shape:
        report["shape"].append([name, list(t.shape), list(t2.shape)])
        continue
    if torch.equal(t.view(torch.int32), t2.view(torch.int32)):
        report["bit_identical"] += 1
    report["max_abs_diff"] = max(report["max_abs_diff"], (t - t2).abs().max().item())
report["extra"] = sorted(set(ours) - set(theirs))
print(json.dumps(report))
ok = not (report["missing"] or report["extra"] or report["shape"]) and report["bit_identical"] == report["tensors"]
sys.exit(0 if ok else 1)
