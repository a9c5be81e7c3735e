"""Writes N trajectory records for scripts/bench/advantage.sh straight to
Parquet with arl's own schema (taken from TEMPLATE, a small file written by
arl): groups of 8 per prompt_id, a ~128-token prompt, RESP response tokens
with ~15% tool tokens (loss_mask 0), rollout/ref log-probs, critic values and
a 0/1 reward. With `math`, also a prompt, a label and a response of
~4 characters a token: step-by-step arithmetic ending in \\boxed{answer},
right for half of the samples (for `arl-reward --rm math`).
Deterministic (seed 0).
Usage: advantage_gen.py N RESP TEMPLATE.parquet OUT.parquet [math]"""
import sys
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

n, resp, template, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
math = len(sys.argv) > 5 and sys.argv[5] == "math"


def reasoning(i, answer, right):
    """A response of about 4*RESP characters: steps, then the boxed answer."""
    steps, k = [], 0
    while sum(map(len, steps)) < 4 * resp - 80:
        a, b = (i * 7 + k * 13) % 997, (i * 3 + k * 29) % 89 + 1
        steps.append(f"Step {k + 1}: we have {a} + {b} = {a + b}, and {a} * {b} = {a * b}. ")
        k += 1
    final = answer if right else answer + 1
    return "".join(steps) + f"So the final answer is $\\boxed{{{final}}}$."
schema = pq.read_schema(template)
rng = np.random.default_rng(0)
ROWS = 4096

def lists(flat, lens, typ):
    offs = np.zeros(len(lens) + 1, dtype=np.int32)
    np.cumsum(lens, out=offs[1:])
    return pa.ListArray.from_arrays(pa.array(offs, pa.int32()), pa.array(flat, typ.value_type), type=typ)

def nulls(m, typ):
    if isinstance(typ, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(typ, pa.nulls(m, typ.storage_type))
    return pa.nulls(m, typ)

writer = pq.ParquetWriter(out, schema, compression="zstd")
for lo in range(0, n, ROWS):
    m = min(ROWS, n - lo)
    idx = np.arange(lo, lo + m)
    plen = 96 + rng.integers(0, 64, m)
    tok_lens = plen + resp
    mask = (rng.random((m, resp)) < 0.85).astype(np.uint8)
    lp = (-rng.random((m, resp)) * 4).astype(np.float32) * mask
    ref = (lp - rng.random((m, resp)).astype(np.float32) * 0.1) * mask
    vals = rng.random((m, resp)).astype(np.float32)
    cols = {}
    for f in schema:
        name, typ = f.name, f.type
        if name == "prompt_id":
            col = pa.array([f"bench:{i // 8}" for i in idx], typ)
        elif name == "sample_index":
            col = pa.array(idx % 8, typ)
        elif name == "tokens":
            col = lists(rng.integers(0, 151_000, int(tok_lens.sum())).astype(np.uint32), tok_lens, typ)
        elif name == "prompt_len":
            col = pa.array(plen, typ)
        elif name == "loss_mask":
            col = lists(mask.ravel(), np.full(m, resp), typ)
        elif name == "rollout_log_probs":
            col = lists(lp.ravel(), np.full(m, resp), typ)
        elif name == "ref_log_probs":
            col = lists(ref.ravel(), np.full(m, resp), typ)
        elif name == "values":
            col = lists(vals.ravel(), np.full(m, resp), typ)
        elif name == "status":
            col = pa.array(["completed"] * m, typ)
        elif name == "reward":
            col = pa.array(rng.integers(0, 2, m).astype(np.float32), typ)
        elif math and name == "prompt":
            col = pa.array([f"Compute {(i * 31) % 1000} plus {(i // 8) % 1000}." for i in idx], typ)
        elif math and name == "label":
            col = pa.ExtensionArray.from_storage(typ, pa.array([f'"{(i // 8) * 31 % 1000}"' for i in idx], typ.storage_type)) \
                if isinstance(typ, pa.BaseExtensionType) else pa.array([f'"{(i // 8) * 31 % 1000}"' for i in idx], typ)
        elif math and name == "response":
            col = pa.array([reasoning(i, (i // 8) * 31 % 1000, i % 2 == 0) for i in idx], typ)
        else:
            col = nulls(m, typ)
        cols[name] = col
    writer.write_table(pa.table(cols, schema=schema))
writer.close()
