"""Max |difference| of `advantages` and `returns` between two Parquet files
over the first K rows, matched by (prompt_id, sample_index).
Usage: advantage_check.py A.parquet B.parquet [K]"""
import sys
import numpy as np
import pyarrow.parquet as pq

a, b = sys.argv[1], sys.argv[2]
k = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
cols = ["prompt_id", "sample_index", "advantages", "returns"]
ta = pq.read_table(a, columns=cols).to_pylist()
tb = {(r["prompt_id"], r["sample_index"]): r for r in pq.read_table(b, columns=cols).to_pylist()}
worst = 0.0
for r in ta[:k]:
    o = tb[(r["prompt_id"], r["sample_index"])]
    for f in ("advantages", "returns"):
        worst = max(worst, float(np.max(np.abs(np.array(r[f]) - np.array(o[f])), initial=0.0)))
print(f"{worst:.2e}")
