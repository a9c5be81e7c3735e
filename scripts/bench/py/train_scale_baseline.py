#!/usr/bin/env python3
"""The PyTorch side of scripts/bench/train-scale.sh: one RL step written the
way users write it — transformers model (SDPA), micro-batches padded to their
longest sample (grouped by length under the same token budget as
`arl-train --no-packing`), full logits [B, T, V] in float32, log-probs by
gather − logsumexp, the entropy for the metrics (no gradient), PPO's clipped
surrogate (token mean over the whole batch), AdamW, gradient clipping.

    train_scale_baseline.py MODEL_DIR RECORDS.jsonl BUDGET THREADS [DEVICE [DTYPE]]

DEVICE cpu (default) or cuda, DTYPE float32 (default) or bfloat16 (the
weights and activations; the logits are taken in float32 as above).

Prints JSON: tokens, seconds of the step, tokens/s, peak RSS (bytes; the
process's own high-water mark, from getrusage), and the loss.
"""
import json
import resource
import sys
import time

import torch
from transformers import AutoModelForCausalLM

model_dir, path, budget, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
dtype = getattr(torch, sys.argv[6] if len(sys.argv) > 6 else "float32")
torch.set_num_threads(threads)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").to(device).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, foreach=True)
recs = [json.loads(l) for l in open(path)]

# Micro-batches as arl-train --no-packing makes them: by length, while
# (samples + 1) × longest stays within the budget.
order = sorted(range(len(recs)), key=lambda i: len(recs[i]["tokens"]))
groups, cur, longest = [], [], 0
for i in order:
    n = len(recs[i]["tokens"])
    if cur and (len(cur) + 1) * max(longest, n) > budget:
        groups.append(cur)
        cur, longest = [], 0
    cur.append(i)
    longest = max(longest, n)
if cur:
    groups.append(cur)


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
    return tuple(t.to(device) for t in (ids, attn, mask, adv, old))


denom = sum(sum(r["loss_mask"]) for r in recs)
t0 = time.perf_counter()
opt.zero_grad(set_to_none=True)
total = 0.0
for g in groups:
    ids, attn, mask, adv, old = tensors([recs[i] for i in g])
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp = logits.gather(-1, ids[:, 1:, None])[..., 0] - logits.logsumexp(-1)
    with torch.no_grad():
        p = logits.softmax(-1)
        entropy = logits.logsumexp(-1) - (p * logits).sum(-1)
        del p
    ratio = (logp - old).clamp(-20, 20).exp()
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    loss = (pg * mask).sum() / denom
    loss.backward()
    total += float(loss.detach())
    del logits, logp, entropy, ratio, pg, loss
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
opt.step()
if device != "cpu":
    torch.cuda.synchronize()
dt = time.perf_counter() - t0
tokens = sum(len(r["tokens"]) for r in recs)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out = {"tokens": tokens, "step_s": dt, "tokens_per_s": tokens / dt, "peak_rss": rss, "loss": total,
       "micro_batches": len(groups)}
if device != "cpu":
    out["max_memory_allocated"] = torch.cuda.max_memory_allocated()
print(json.dumps(out))
