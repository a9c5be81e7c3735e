#!/usr/bin/env python3
"""transformers' greedy generation: the reference for arl-serve on a real
checkpoint. Reads JSONL {"input_ids": [...], "max_new_tokens": N}; writes one
JSON list of new token ids per line (stopping at the generation config's EOS
ids, which are included as transformers returns them).

usage: hf_generate.py MODEL_DIR < prompts.jsonl > outputs.jsonl
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM

torch.set_num_threads(2)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
model.eval()
for line in sys.stdin:
    if not line.strip():
        continue
    r = json.loads(line)
    ids = torch.tensor([r["input_ids"]])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=r["max_new_tokens"],
                             do_sample=False, temperature=None, top_p=None, top_k=None)
    print(json.dumps(out[0, ids.shape[1]:].tolist()))
