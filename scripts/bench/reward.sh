#!/usr/bin/env bash
# Math grading throughput and agreement: `arl-reward --rm math` next to two
# Python baselines measured in the same run on the same responses:
#   * slime-style: regex extraction + Hendrycks normalisation + sympy equality
#     (scripts/bench/py/math_baselines.py, a stand-in written after slime's
#     rm_hub math utilities),
#   * math-verify (PyPI, Hugging Face).
# The corpus (scripts/bench/py/gen_math_corpus.py) has N responses in the
# variety of crates/arl-reward/tests/reward_math.rs, each tagged with a category and the intended
# verdict. arl grades all N; the baselines, which are 2-3 orders of magnitude
# slower, grade the first BASELINE_N (set BASELINE_N=$N for all of them; that
# takes ~30 min here). Speed is per response on one core (arl with
# RAYON_NUM_THREADS=1, timed as a whole process including JSON I/O; the
# baselines' grading loop only, imports and file reading excluded).
#
#   N=100000 BASELINE_N=5000 scripts/bench/reward.sh
# (ARL_REWARD_BIN=path uses that binary instead of building the release one.)
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
# The environment `make` sets (tch finds libtorch in the cached venv).
. scripts/env.sh
N=${N:-100000}; BASELINE_N=${BASELINE_N:-5000}; SEED=${SEED:-0}; REPS=${REPS:-3}
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
[ -n "${ARL_REWARD_BIN:-}" ] || cargo build --release --quiet -p arl-reward
ARL=${ARL_REWARD_BIN:-target/release/arl-reward}
. scripts/lib/progress.sh
W=$(mktemp -d); trap 'rm -rf "$W"; progress_exit' EXIT
progress_phase "reward: generating $N responses"
"$PY" scripts/bench/py/gen_math_corpus.py "$N" "$W/corpus.jsonl" "$SEED"
head -n "$BASELINE_N" "$W/corpus.jsonl" > "$W/base.jsonl"
BN=$(wc -l < "$W/base.jsonl")

# best-of-REPS wall time of a command, in seconds
best() {
  local best=""
  for _ in $(seq "$REPS"); do
    local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N)
    local t; t=$(echo "$t1 - $t0" | bc -l)
    if [ -z "$best" ] || (( $(echo "$t < $best" | bc -l) )); then best=$t; fi
  done
  echo "$best"
}

progress_phase "reward: grading $N with arl-reward, best of $REPS on 1 and $(nproc) threads"
T_ARL1=$(RAYON_NUM_THREADS=1 best "$ARL" --rm math -q -i "$W/corpus.jsonl" -o "$W/arl.jsonl")
T_ARLN=$(best "$ARL" --rm math -q -i "$W/corpus.jsonl" -o "$W/arl.jsonl")
progress_phase "reward: grading $BN with the slime-style baseline"
T_SLIME=$("$PY" scripts/bench/py/math_baselines.py slime "$W/base.jsonl" "$W/slime.txt" 2>&1 | awk '/^SECONDS/{print $2}')
progress_phase "reward: grading $BN with math-verify"
T_MV=$("$PY" scripts/bench/py/math_baselines.py math_verify "$W/base.jsonl" "$W/mv.txt" 2>&1 | awk '/^SECONDS/{print $2}')
progress_stop

printf '\n%d responses for arl, %d for the baselines (same first %d), one core unless noted\n' "$N" "$BN" "$BN"
printf '%-22s %9s %12s %12s %14s\n' grader responses seconds "µs/response" "arl speed-up"
us() { echo "$1 * 1000000 / $2" | bc -l; }
A1=$(us "$T_ARL1" "$N")
printf '%-22s %9d %12.3f %12.1f %14s\n' "arl (1 thread)" "$N" "$T_ARL1" "$A1" "-"
printf '%-22s %9d %12.3f %12.1f %14s\n' "arl ($(nproc) threads)" "$N" "$T_ARLN" "$(us "$T_ARLN" "$N")" "-"
for row in "slime-style:$T_SLIME" "math-verify:$T_MV"; do
  name=${row%%:*}; t=${row#*:}; u=$(us "$t" "$BN")
  printf '%-22s %9d %12.3f %12.1f %13.0fx\n' "$name" "$BN" "$t" "$u" "$(echo "$u / $A1" | bc -l)"
done
"$PY" scripts/bench/py/math_compare.py "$W/corpus.jsonl" "$W/arl.jsonl" "$W/slime.txt" "$W/mv.txt"
# arl on the whole corpus against the intended verdicts.
"$PY" - "$W/arl.jsonl" <<'PYEOF'
import collections, json, sys
bad = collections.Counter(); n = 0
for l in open(sys.argv[1]):
    r = json.loads(l); n += 1
    if (r["reward"] >= 0.5) != bool(r["metadata"]["truth"]):
        bad[r["metadata"]["category"]] += 1
print(f"\narl on all {n}: {n - sum(bad.values())} verdicts as intended; off by category: {dict(bad) or 'none'}")
PYEOF
