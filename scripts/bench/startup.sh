#!/usr/bin/env bash
# Startup cost of the small tools: CPU time (user + system) and peak RSS of
# `arl-X --version` and of `arl-X` on an empty input, per tool, as the mean
# CPU and the largest RSS over RUNS runs (CPU from os.wait4's rusage of each child; RSS over the first 5
# runs, through GNU time).
# The baseline in the same run is `/bin/true` (a process that does nothing):
# the ratio says how many empty processes one tool's start costs.
#
#   scripts/bench/startup.sh [BIN]        BIN: where the binaries are (target/release)
#
# Environment: RUNS (default 55), TOOLS (default: the data tools).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
bin=${1:-${BIN:-target/release}}
runs=${RUNS:-55}
tools=${TOOLS:-"arl-filter arl-advantage arl-reward arl-inspect arl-tasks arl-rollout arl-sync arl-env"}
python3 - "$bin" "$runs" $tools <<'PY'
import os, subprocess, sys, tempfile
tmp = tempfile.mktemp(prefix='arl-startup-')
bin_dir, runs, tools = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def measure(argv, stdin_empty):
    # CPU from this process's wait4 (microseconds); peak RSS through GNU time,
    # a small parent: a child forked from Python would report Python's pages
    # as its own peak until its exec.
    cpu, rss = [], 0
    for i in range(runs):
        wrap = ["/usr/bin/time", "-f", "%M", "-o", tmp] if i < 5 else []
        p = subprocess.Popen(wrap + argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{' '.join(argv)} exited {os.waitstatus_to_exitcode(status)}")
        if wrap:
            rss = max(rss, int(open(tmp).read().split()[-1]))
        else:
            cpu.append((ru.ru_utime + ru.ru_stime) * 1000)
    cpu.sort()
    return sum(cpu) / len(cpu), cpu[len(cpu) // 2], rss / 1024

base_cpu, base_med, base_rss = measure(["/bin/true"], True)
print(f"{'command':<34} {'cpu ms (mean)':>13} {'median':>8} {'peak RSS MB':>12} {'cpu / true':>11}")
print(f"{'/bin/true':<34} {base_cpu:13.2f} {base_med:8.2f} {base_rss:12.1f} {1.0:11.1f}")
for t in tools:
    exe = os.path.join(bin_dir, t)
    if not os.path.exists(exe):
        print(f"{t}: not built in {bin_dir}", file=sys.stderr)
        continue
    cases = [([exe, "--version"], f"{t} --version")]
    if t in ("arl-filter", "arl-advantage", "arl-reward", "arl-inspect"):
        argv = [exe] + {"arl-inspect": ["stats"], "arl-reward": ["--rm", "exact"]}.get(t, [])
        cases.append((argv, f"{t} < /dev/null"))
    for argv, name in cases:
        c, m, r = measure(argv, True)
        print(f"{name:<34} {c:13.2f} {m:8.2f} {r:12.1f} {c / max(base_cpu, 1e-3):11.1f}")
PY
