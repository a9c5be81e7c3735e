"""Baseline for scripts/bench/columnar.sh: what `arl-inspect stats` needs,
read with pyarrow (the same columns), plus the summary a user would compute
with numpy (reward mean/std, response lengths from the list offsets,
trainable tokens). Prints `rows <n>` on stderr.
Usage: stats_pyarrow.py IN.parquet"""
import sys
import numpy as np
import pyarrow.parquet as pq

COLS = ["data_source", "status", "reward", "reward_detail", "tokens", "prompt_len", "loss_mask", "turns",
        "tool_calls", "prompt_id"]
t = pq.read_table(sys.argv[1], columns=COLS)
reward = t.column("reward").to_numpy(zero_copy_only=False)
mask = t.column("loss_mask").combine_chunks()
lens = np.diff(mask.offsets.to_numpy())
trainable = int(mask.values.to_numpy().sum())
print(f"rows {t.num_rows} reward {np.nanmean(reward):.4f} len {lens.mean():.1f} trainable {trainable}",
      file=sys.stderr)
