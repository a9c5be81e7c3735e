#!/usr/bin/env bash
# What a real tokenizer costs a binary before its first request: CPU time
# (user + system) and peak RSS of loading a model directory's tokenizer.json,
# tokenizer_config.json and chat template, then rendering, encoding and
# decoding one chat prompt (crates/arl-chat/examples/tokenizer_load.rs), as
# arl-rollout and arl-serve do at start. Two ways in the same run:
#   arl    Tokenizer::load: arl's reading of a BPE tokenizer.json into the
#          tokenizers crate's model, the decode table built from the vocabulary
#          it has just read;
#   crate  the baseline, the tokenizers crate's own `from_file` (what arl did
#          before), the decode table built on the first decode by looking up
#          every id.
# Mean and median CPU over RUNS runs (os.wait4's rusage of each child), peak
# RSS over the first 3 (GNU time), and the ratio crate / arl.
#
#   scripts/bench/tokenizer-load.sh [DIR]   DIR: default Qwen3's tokenizer
#                                           (scripts/fetch-models.sh)
# Environment: RUNS (default 15).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
dir=${1:-$ARL_CACHE/models/qwen3-tokenizer}
runs=${RUNS:-15}
[ -f "$dir/tokenizer.json" ] || { echo "no $dir/tokenizer.json: run scripts/fetch-models.sh" >&2; exit 1; }
cargo build --release --quiet -p arl-chat --example tokenizer_load
bin=${CARGO_TARGET_DIR:-target}/release/examples/tokenizer_load
python3 - "$bin" "$dir" "$runs" <<'PY'
import os, subprocess, sys, tempfile
bin_, d, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
tmp = tempfile.mktemp(prefix='arl-tokload-')

def run(mode, wrap):
    p = subprocess.Popen(wrap + [bin_, mode, d], stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"tokenizer_load {mode} exited {os.waitstatus_to_exitcode(status)}")
    return ru.ru_utime + ru.ru_stime

modes = ("crate", "arl")
rss = {}
for m in modes:
    for _ in range(3):
        run(m, ["/usr/bin/time", "-f", "%M", "-o", tmp])
        rss[m] = max(rss.get(m, 0), int(open(tmp).read().split()[-1]) / 1024)
# Alternating, so that both see the same machine load.
cpu = {m: [] for m in modes}
for _ in range(runs):
    for m in modes:
        cpu[m].append(run(m, []))
res = {}
for m in modes:
    c = sorted(cpu[m])
    res[m] = (sum(c) / len(c), c[len(c) // 2], rss[m])
os.unlink(tmp)
print(f"\n{d}/tokenizer.json ({os.path.getsize(os.path.join(d, 'tokenizer.json')) / 1e6:.1f} MB), "
      f"{runs} runs each, {os.cpu_count()} cores")
print(f"{'':28} {'mean CPU s':>10} {'median':>8} {'peak RSS MB':>12}")
for m, label in (("crate", "crate from_file (baseline)"), ("arl", "arl Tokenizer::load")):
    mean, med, rss = res[m]
    print(f"{label:28} {mean:10.3f} {med:8.3f} {rss:12.0f}")
print(f"speed-up (baseline / arl, median CPU): {res['crate'][1] / res['arl'][1]:.2f}x")
PY
