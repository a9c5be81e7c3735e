#!/usr/bin/env python3
"""transformers' log-probs of each record's response tokens: the reference
for `arl-train logprobs` on a real checkpoint.

usage: hf_logprobs.py MODEL_DIR < records.jsonl > log_probs.jsonl
Each input line needs `tokens` and `prompt_len`; each output line is the list
of log-probs of tokens[prompt_len:] (float32 forward, no sampling temperature).
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
    ids = torch.tensor([r["tokens"]])
    p = r["prompt_len"]
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    lp = torch.log_softmax(logits[p - 1 : -1], dim=-1).gather(1, ids[0, p:].unsqueeze(1)).squeeze(1)
    print(json.dumps(lp.tolist()))
