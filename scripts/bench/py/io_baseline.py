"""Baselines for scripts/bench/io.sh: the same conversions with pyarrow and polars.
Usage: io_baseline.py {pyarrow|polars} {j2p|p2j} IN OUT"""
import json, sys

lib, way, src, dst = sys.argv[1:5]
if lib == "pyarrow":
    import pyarrow.json as pj, pyarrow.parquet as pq
    if way == "j2p":
        t = pj.read_json(src, read_options=pj.ReadOptions(block_size=64 << 20))
        pq.write_table(t, dst, compression="zstd")
    else:
        t = pq.read_table(src)
        with open(dst, "w") as f:
            for batch in t.to_batches(4096):
                for row in batch.to_pylist():
                    f.write(json.dumps(row) + "\n")
elif lib == "polars":
    import polars as pl
    if way == "j2p":
        pl.read_ndjson(src).write_parquet(dst, compression="zstd")
    else:
        pl.read_parquet(src).write_ndjson(dst)
else:
    raise SystemExit(f"unknown library {lib}")
