#!/usr/bin/env bash
# ZeRO in arl-train: one SFT step of NPROC ranks (`--nproc`) on a random model
# of the Qwen2.5-0.5B shape (vocabulary 151,936, width 896, LAYERS of its 24
# layers) at --zero-stage 0, 1 and 2, next to one process. Prints, per run,
# the optimizer state one rank holds (the trainer's own count of its AdamW
# moments, `optimizer_state_bytes`), every rank's peak RSS, the step's
# all-reduce / reduce-scatter and all-gather seconds, and the ratios of the
# optimizer state and of the peak RSS to the unsharded run's; and checks that
# every run ends on the same weights as one process.
#
#   scripts/bench/train-zero.sh                      # 2 ranks, 4 layers, 4 x 256 tokens
#   NPROC=2 LAYERS=8 scripts/bench/train-zero.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
NPROC=${NPROC:-2}; LAYERS=${LAYERS:-4}; N=${N:-4}; LEN=${LEN:-256}; THREADS=${THREADS:-1}
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
cargo build --release --quiet -p arl-train
ARL=target/release/arl-train
. scripts/lib/progress.sh
W=$(mktemp -d); trap 'rm -rf "$W"; progress_exit' EXIT
. scripts/bench/lib/qwen05-model.sh
"$PY" - "$N" "$LEN" > "$W/recs.jsonl" <<'PYEOF'
import json, random, sys
n, m = map(int, sys.argv[1:3])
r = random.Random(0)
for i in range(n):
    toks = [r.randrange(151936) for _ in range(32 + m)]
    print(json.dumps({"tokens": toks, "prompt_len": 32, "loss_mask": [1] * m}))
PYEOF
run() {  # name, arl-train flags…
  local name=$1; shift
  progress_phase "train-zero: $name${*:+ ($*)}"
  "$ARL" --model "$W/model" -i "$W/recs.jsonl" --loss sft --lr 1e-4 --threads "$THREADS" -q \
    --save "$W/$name" --save-dtype float32 --metrics "$W/$name.jsonl" "$@"
}
run one
run z0 --nproc "$NPROC"
run z1 --nproc "$NPROC" --zero-stage 1
run z2 --nproc "$NPROC" --zero-stage 2
progress_stop
"$PY" - "$W" "$NPROC" "$LAYERS" "$N" "$LEN" <<'PYEOF'
import json, sys
import numpy as np
from safetensors.numpy import load_file
w, nproc, layers, n, ln = sys.argv[1], *map(int, sys.argv[2:])
ms = {k: json.loads(open(f"{w}/{k}.jsonl").readlines()[-1]) for k in ["one", "z0", "z1", "z2"]}
ref = load_file(f"{w}/one/model.safetensors")
print(f"\nQwen2.5-0.5B shape, {layers} layers; one SFT step on {n} x {ln} tokens; {nproc} ranks")
print(f"{'run':<18}{'optimizer MB/rank':>18}{'x one':>7}{'peak RSS MB/rank':>24}{'x z0':>7}{'reduce s':>10}{'gather s':>10}{'max |dw|':>10}")
z0 = max(ms["z0"].get("rank_peak_rss_bytes", [ms["z0"]["peak_rss_bytes"]]))
one = ms["one"]["optimizer_state_bytes"]
for k, label in [("one", "1 process"), ("z0", "stage 0 (DDP)"), ("z1", "stage 1"), ("z2", "stage 2")]:
    m = ms[k]
    rss = m.get("rank_peak_rss_bytes", [m["peak_rss_bytes"]])
    got = load_file(f"{w}/{k}/model.safetensors")
    d = max(float(np.abs(got[t] - ref[t]).max()) for t in ref)
    print(f"{label:<18}{m['optimizer_state_bytes'] / 2**20:>18.1f}{m['optimizer_state_bytes'] / one:>7.3f}"
          f"{' / '.join(f'{r / 2**20:.0f}' for r in rss):>24}{max(rss) / z0:>7.3f}"
          f"{m.get('allreduce_s', 0):>10.3f}{m.get('allgather_s', 0):>10.3f}{d:>10.1e}")
PYEOF
