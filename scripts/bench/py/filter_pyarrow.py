"""Vectorised baseline for scripts/bench/columnar.sh: `arl-filter
--drop-zero-std` written as a capable pyarrow + numpy user would: read the
table, group rewards by dictionary-encoding prompt_id, population std per
group with np.bincount, keep the rows of groups whose std > EPS with
`Table.filter`, write with the input's compression (zstd).
Prints `kept <rows>` and `compute_s <seconds>` on stderr.
Usage: filter_pyarrow.py IN.parquet OUT.parquet [EPS]"""
import sys, time
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

src, dst = sys.argv[1], sys.argv[2]
eps = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-6
t = pq.read_table(src)
t0 = time.perf_counter()
codes = pc.dictionary_encode(t.column("prompt_id")).combine_chunks().indices.to_numpy()
reward = t.column("reward").to_numpy().astype(np.float64)
cnt = np.bincount(codes).astype(np.float64)
mean = np.bincount(codes, reward) / cnt
var = np.bincount(codes, (reward - mean[codes]) ** 2) / cnt
keep = np.sqrt(var)[codes] > eps
out = t.filter(pa.array(keep))
print(f"compute_s {time.perf_counter() - t0:.6f}", file=sys.stderr)
print(f"kept {out.num_rows}", file=sys.stderr)
pq.write_table(out, dst, compression="zstd")
