"""Vectorised baseline for scripts/bench/advantage.sh: best-effort pyarrow +
numpy on the flat list buffers (no per-sample Python). GRPO: group codes by
dictionary-encoding prompt_id, bincount means and Bessel stds, `np.repeat`
over the token offsets. GAE: δ on the flat arrays, then the reverse scan over
a (time × sequences) padded matrix, one numpy step per token position.
Prints `compute_s <seconds>` on stderr.
Usage: advantage_numpy.py {grpo|gae} GAMMA LAMBDA IN.parquet OUT.parquet"""
import sys, time
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

est, gamma, lambd, src, dst = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
t = pq.read_table(src)
mask_col = t.column("loss_mask").combine_chunks()
offs = mask_col.offsets.to_numpy().astype(np.int64)
offs = offs - offs[0]
mask = mask_col.values.to_numpy().astype(np.float32)
reward = t.column("reward").to_numpy().astype(np.float64)
vals = t.column("values").combine_chunks().values.to_numpy() if est == "gae" else None
lens = np.diff(offs)
n = len(lens)

t0 = time.perf_counter()
if est == "grpo":
    codes = pc.dictionary_encode(t.column("prompt_id")).combine_chunks().indices.to_numpy()
    cnt = np.bincount(codes).astype(np.float64)
    s = np.bincount(codes, reward)
    mean = s / cnt
    ss = np.bincount(codes, (reward - mean[codes]) ** 2)
    std = np.sqrt(np.where(cnt > 1, ss / np.maximum(cnt - 1, 1), 0.0))
    a = (reward - mean[codes]) / (std[codes] + 1e-6)
    a[(cnt[codes] < 2) | (std[codes] == 0)] = 0.0
    adv = np.repeat(a.astype(np.float32), lens) * mask
    ret = adv
else:
    last = offs[1:] - 1
    r = np.zeros(len(vals), np.float32)
    r[last[lens > 0]] += reward[lens > 0].astype(np.float32)
    nextv = np.empty_like(vals)
    nextv[:-1] = vals[1:]
    nextv[last[lens > 0]] = 0.0
    delta = r + np.float32(gamma) * nextv - vals
    L = int(lens.max()) if n else 0
    # (time × sequence) padded matrix, left-aligned; padding stays 0 so it carries nothing.
    pos = np.arange(len(vals)) - np.repeat(offs[:-1], lens)
    seq = np.repeat(np.arange(n), lens)
    D = np.zeros((L + 1, n), np.float32)
    D[pos, seq] = delta
    w = np.float32(gamma * lambd)
    for k in range(L - 1, -1, -1):
        D[k] += w * D[k + 1]
    adv_raw = D[pos, seq]
    adv = adv_raw * mask
    ret = (adv_raw + vals) * mask
print(f"compute_s {time.perf_counter() - t0:.6f}", file=sys.stderr)

ty = t.schema.field("advantages").type
def col(x):
    return pa.ListArray.from_arrays(pa.array(offs.astype(np.int32)), pa.array(x.astype(np.float32)), type=ty)
t = t.set_column(t.schema.get_field_index("advantages"), t.schema.field("advantages"), col(adv))
t = t.set_column(t.schema.get_field_index("returns"), t.schema.field("returns"), col(ret))
pq.write_table(t, dst, compression="zstd")
