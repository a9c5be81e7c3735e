"""slime-style baseline for scripts/bench/advantage.sh: the shape of slime's
`slime/utils/ppo_utils.py` as its users run it. Per-sample PyTorch tensors;
GRPO normalises each group's rewards (mean, Bessel std, eps 1e-6), then
`get_grpo_returns` broadcasts each sample's scalar with `torch.ones_like`;
GAE puts the reward on the last response token and runs
`get_advantages_and_returns`' reverse Python loop over the tokens of each
sample. Groups by prompt_id. Prints `compute_s <seconds>` on stderr.
Usage: advantage_slime.py {grpo|gae} GAMMA LAMBDA IN.parquet OUT.parquet"""
import sys, time
from collections import defaultdict
import pyarrow as pa
import pyarrow.parquet as pq
import torch

torch.set_num_threads(1)
est, gamma, lambd, src, dst = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
t = pq.read_table(src)
pids = t.column("prompt_id").to_pylist()
rewards = t.column("reward").to_pylist()
masks = [torch.tensor(m, dtype=torch.float32) for m in t.column("loss_mask").to_pylist()]
values = [torch.tensor(v, dtype=torch.float32) for v in t.column("values").to_pylist()] if est == "gae" else None

t0 = time.perf_counter()


def get_advantages_and_returns(values, rewards, gamma, lambd):
    # slime ppo_utils.get_advantages_and_returns, one sample
    lastgaelam = 0
    advantages_reversed = []
    response_length = rewards.size(0)
    for t in reversed(range(response_length)):
        nextvalues = values[t + 1] if t < response_length - 1 else 0.0
        delta = rewards[t] + gamma * nextvalues - values[t]
        lastgaelam = delta + gamma * lambd * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1])
    returns = advantages + values
    return advantages.detach(), returns


if est == "grpo":
    groups = defaultdict(list)
    for i, p in enumerate(pids):
        groups[p].append(i)
    norm = [0.0] * len(rewards)
    for idx in groups.values():
        r = torch.tensor([rewards[i] for i in idx], dtype=torch.float32)
        if len(idx) > 1 and r.std() > 0:
            r = (r - r.mean()) / (r.std() + 1e-6)
        else:
            r = torch.zeros_like(r)
        for i, x in zip(idx, r.tolist()):
            norm[i] = x
    advs = [torch.ones_like(masks[i]) * norm[i] * masks[i] for i in range(len(masks))]
    rets = advs
else:
    advs, rets = [], []
    for i in range(len(masks)):
        tok_r = torch.zeros_like(values[i])
        tok_r[-1] += rewards[i]
        a, r = get_advantages_and_returns(values[i], tok_r, gamma, lambd)
        advs.append(a * masks[i])
        rets.append(r * masks[i])
print(f"compute_s {time.perf_counter() - t0:.6f}", file=sys.stderr)

ty = t.schema.field("advantages").type
t = t.set_column(t.schema.get_field_index("advantages"), t.schema.field("advantages"), pa.array([a.tolist() for a in advs], ty))
t = t.set_column(t.schema.get_field_index("returns"), t.schema.field("returns"), pa.array([r.tolist() for r in rets], ty))
pq.write_table(t, dst, compression="zstd")
