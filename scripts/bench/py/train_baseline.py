#!/usr/bin/env python3
"""Plain PyTorch baseline for scripts/bench/train.sh: the same model (loaded
with transformers, SDPA attention), the same records and the same PPO step as
`arl-train` (token-mean clipped surrogate on rollout_log_probs, AdamW, grad
clipping), one micro-batch per step. Prints JSON with tokens/s over the steps
after the first.

    train_baseline.py MODEL_DIR RECORDS.jsonl BATCH DEVICE PRECISION THREADS
"""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM

model_dir, path, batch, device, precision, threads = sys.argv[1:7]
batch = int(batch)
torch.set_num_threads(int(threads))
torch.manual_seed(0)
dtype = torch.bfloat16 if precision == "bf16" else torch.float32
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").to(device).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, foreach=True)
recs = [json.loads(l) for l in open(path)]


def tensors(rs):
    T = max(len(r["tokens"]) for r in rs)
    B = len(rs)
    ids = torch.zeros(B, T, dtype=torch.long)
    attn = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T - 1)
    adv = torch.zeros(B, T - 1)
    old = torch.zeros(B, T - 1)
    for i, r in enumerate(rs):
        n, p = len(r["tokens"]), r["prompt_len"]
        ids[i, :n] = torch.tensor(r["tokens"])
        attn[i, :n] = 1
        mask[i, p - 1:n - 1] = torch.tensor(r["loss_mask"], dtype=torch.float)
        adv[i, p - 1:n - 1] = torch.tensor(r["advantages"])
        old[i, p - 1:n - 1] = torch.tensor(r["rollout_log_probs"])
    return [t.to(device) for t in (ids, attn, mask, adv, old)], int(attn.sum())


times, toks = [], []
for s in range(0, len(recs), batch):
    (ids, attn, mask, adv, old), ntok = tensors(recs[s:s + batch])
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    # --precision amp: float32 weights, the forward under bf16 autocast.
    with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=precision == "amp"):
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp = logits.gather(-1, ids[:, 1:, None])[..., 0] - logits.logsumexp(-1)
    ratio = (logp - old).clamp(-20, 20).exp()
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    loss = (pg * mask).sum() / mask.sum().clamp_min(1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
    toks.append(ntok)
peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
print(json.dumps({"tokens_per_s": sum(toks[1:]) / sum(times[1:]), "steps": len(times), "peak_cuda_bytes": peak}))
