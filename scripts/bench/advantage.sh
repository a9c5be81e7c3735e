#!/usr/bin/env bash
# End-to-end throughput of arl-advantage (read Parquet, compute, write Parquet)
# for GRPO and GAE, next to two Python baselines measured in the same run on
# the same file: slime-style per-sample PyTorch code (py/advantage_slime.py,
# the shape of slime's ppo_utils.py) and a vectorised pyarrow + numpy version
# (py/advantage_numpy.py). Prints wall seconds, the compute step alone (its
# seconds and response tokens/s; arl's also on one core, RAYON_NUM_THREADS=1),
# arl's read/compute/write split, each speed-up (baseline time / arl time, > 1
# means arl is faster), and the largest difference between arl's and numpy's
# advantages/returns. The input is a file written by arl (see below); the
# Python baselines read and write every column, as they must.
#
# The slime-style GAE loops in Python over every token (~15 ms per 512-token
# sample here), so it runs on the first SLIME_N records and its time is scaled
# by N/SLIME_N (per-sample code is linear in N); the table says so.
#
#   N=100000 RESP=512 SLIME_N=2000 scripts/bench/advantage.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
# The environment `make` sets (tch finds libtorch in the cached venv).
. scripts/env.sh
N=${N:-100000}; RESP=${RESP:-512}; SLIME_N=${SLIME_N:-2000}
GAMMA=${GAMMA:-1.0}; LAMBDA=${LAMBDA:-0.95}
[ "$SLIME_N" -gt "$N" ] && SLIME_N=$N
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
# These tools do not link libtorch.
cargo build --release --quiet -p arl-advantage -p arl-inspect
ARL=target/release/arl-advantage
. scripts/lib/progress.sh
W=$(mktemp -d "${TMPDIR:-/tmp}/arl-bench-adv.XXXXXX"); trap 'rm -rf "$W"; progress_exit' EXIT
target/release/arl-inspect convert -q -i testdata/sample-trajectories.jsonl -o "$W/template.parquet"
progress_phase "advantage: generating $N trajectories × $RESP response tokens (Parquet)"
"$PY" scripts/bench/py/advantage_gen.py "$N" "$RESP" "$W/template.parquet" "$W/gen.parquet"
# Written again by arl, as arl-rollout writes trajectories: arl-advantage then
# decodes only the columns it reads and copies the others undecoded.
target/release/arl-inspect convert -q -i "$W/gen.parquet" -o "$W/in.parquet"; rm "$W/gen.parquet"
"$PY" scripts/bench/py/advantage_gen.py "$SLIME_N" "$RESP" "$W/template.parquet" "$W/small.parquet"
progress_stop
TOKENS=$((N * RESP))

now() { date +%s.%N; }
# wall seconds of a command; its stderr goes to $W/err
wall() { local t0; t0=$(now); "$@" 2>"$W/err" >/dev/null; echo "$(now) - $t0" | bc -l; }
pycompute() { awk '/^compute_s/ {print $2}' "$W/err"; }

declare -A T C SPLIT DIFF
for est in grpo gae; do
  args=(--estimator "$est")
  [ "$est" = grpo ] && args+=(--group-size 8) || args+=(--gamma "$GAMMA" --lambda "$LAMBDA")
  progress_phase "advantage: arl $est"
  T[arl,$est]=$(wall "$ARL" -q --timings "${args[@]}" -i "$W/in.parquet" -o "$W/arl-$est.parquet")
  SPLIT[$est]=$(sed 's/^arl-advantage: timings: //' "$W/err")
  C[arl,$est]=$(sed -E 's/.*compute ([0-9.]+) s.*/\1/' "$W/err")
  RAYON_NUM_THREADS=1 "$ARL" -q --timings "${args[@]}" -i "$W/in.parquet" -o "$W/arl1-$est.parquet" 2>"$W/err"
  C[arl1,$est]=$(sed -E 's/.*compute ([0-9.]+) s.*/\1/' "$W/err")
  progress_phase "advantage: numpy $est"
  T[numpy,$est]=$(wall "$PY" scripts/bench/py/advantage_numpy.py "$est" "$GAMMA" "$LAMBDA" "$W/in.parquet" "$W/np-$est.parquet")
  C[numpy,$est]=$(pycompute)
  progress_phase "advantage: slime-style $est on $SLIME_N records"
  t=$(wall "$PY" scripts/bench/py/advantage_slime.py "$est" "$GAMMA" "$LAMBDA" "$W/small.parquet" "$W/sl-$est.parquet")
  T[slime,$est]=$(echo "$t * $N / $SLIME_N" | bc -l)
  C[slime,$est]=$(echo "$(pycompute) * $N / $SLIME_N" | bc -l)
  DIFF[$est]=$("$PY" scripts/bench/py/advantage_check.py "$W/arl-$est.parquet" "$W/np-$est.parquet" 4000)
done
progress_stop

printf '\n%d trajectories × %d response tokens (%d M tokens), Parquet in and out; gae γ=%s λ=%s; %d cores\n' \
  "$N" "$RESP" $((TOKENS / 1000000)) "$GAMMA" "$LAMBDA" "$(nproc)"
printf '%-5s %-22s %10s %12s %14s %10s\n' est tool "e2e s" "compute s" "compute Mtok/s" "arl e2e ×"
for est in grpo gae; do
  for tool in arl arl1 numpy slime; do
    name=$tool; [ $tool = arl1 ] && name="arl (compute, 1 core)"
    [ $tool = slime ] && name="slime-style (scaled)"
    [ $tool = numpy ] && name="pyarrow+numpy"
    c=${C[$tool,$est]}
    mtok=$(echo "$TOKENS / $c / 1000000" | bc -l)
    if [ $tool = arl1 ]; then
      printf '%-5s %-22s %10s %12.3f %14.1f %10s\n' "$est" "$name" - "$c" "$mtok" -
    else
      t=${T[$tool,$est]}
      printf '%-5s %-22s %10.2f %12.3f %14.1f %9.2fx\n' "$est" "$name" "$t" "$c" "$mtok" "$(echo "$t / ${T[arl,$est]}" | bc -l)"
    fi
  done
done
echo
for est in grpo gae; do
  echo "arl $est split: ${SPLIT[$est]}"
  echo "arl vs numpy, $est: max |Δ| of advantages/returns over 4000 records: ${DIFF[$est]}"
done
