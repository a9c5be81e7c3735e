#!/usr/bin/env bash
# Parquet by columns (arl-filter, arl-reward, arl-inspect stats) on N
# trajectories of RESP response tokens, next to vectorised pyarrow + numpy
# baselines measured in the same run on the same file, and next to arl's own
# record path (ARL_NO_PASS_THROUGH=1: every column decoded into records and
# encoded again). The input is written by arl (as arl-rollout writes it), so
# the columns a tool does not read can be copied undecoded. arl-advantage has
# its own script (advantage.sh).
#
#   filter   arl-filter --drop-zero-std  vs py/filter_pyarrow.py (read, bincount
#            group std, Table.filter, write zstd); both outputs compared
#   reward   arl-reward --rm math: read, score and write seconds (--timings);
#            the time outside grading against the grading time, and against
#            copying the input file and syncing the copy (the I/O floor)
#   stats    arl-inspect stats  vs py/stats_pyarrow.py (pyarrow reading the
#            same columns); wall seconds and peak RSS of both
#
# Prints seconds, peak RSS and ratios (baseline / arl, > 1: arl is faster).
#   N=100000 RESP=512 REPEAT=1 scripts/bench/columnar.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
N=${N:-100000}; RESP=${RESP:-512}; REPEAT=${REPEAT:-1}
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
cargo build --release --quiet -p arl-filter -p arl-reward -p arl-inspect
B=target/release
. scripts/lib/progress.sh
W=$(mktemp -d "${TMPDIR:-/tmp}/arl-bench-col.XXXXXX"); trap 'rm -rf "$W"; progress_exit' EXIT
$B/arl-inspect convert -q -i testdata/sample-trajectories.jsonl -o "$W/template.parquet"
progress_phase "columnar: generating $N trajectories × $RESP response tokens with math responses"
"$PY" scripts/bench/py/advantage_gen.py "$N" "$RESP" "$W/template.parquet" "$W/gen.parquet" math
$B/arl-inspect convert -q -i "$W/gen.parquet" -o "$W/in.parquet"; rm "$W/gen.parquet"
progress_stop
echo "input: $(du -m "$W/in.parquet" | cut -f1) MB" >&2

# "seconds peak_kb" of a command; its stderr goes to $W/err
measure() { /usr/bin/time -f "%e %M" -o "$W/time" "$@" 2>"$W/err" >/dev/null; cat "$W/time"; }
best() { sort -n | head -1; }   # the fastest of REPEAT runs (least disturbed by noise)

declare -A S K
run() { # key cmd...
  local key=$1; shift; local out=""
  for _ in $(seq "$REPEAT"); do out+="$(measure "$@")"$'\n'; done
  local b; b=$(printf '%s' "$out" | best)
  S[$key]=${b% *}; K[$key]=${b#* }
}
progress_phase "columnar: filter (arl, its record path, pyarrow; best of $REPEAT)"
run filter_arl $B/arl-filter -q --drop-zero-std -i "$W/in.parquet" -o "$W/f.parquet"
run filter_rec env ARL_NO_PASS_THROUGH=1 $B/arl-filter -q --drop-zero-std -i "$W/in.parquet" -o "$W/f2.parquet"
run filter_py "$PY" scripts/bench/py/filter_pyarrow.py "$W/in.parquet" "$W/f3.parquet"
KEPT=$(awk '/^kept/{print $2}' "$W/err")
# The same rows and values as pyarrow's (arl's copies most pages of the
# per-token columns as they are and encodes only those that lost a row).
"$PY" - "$W/f.parquet" "$W/f3.parquet" <<'PY'
import sys, pyarrow.parquet as pq
a, b = pq.read_table(sys.argv[1]), pq.read_table(sys.argv[2])
bad = [n for n in b.column_names if not a.column(n).equals(b.column(n))]
if a.num_rows != b.num_rows or bad:
    sys.exit(f"arl-filter's output differs from pyarrow's: {a.num_rows} vs {b.num_rows} rows, columns {bad}")
PY
rm -f "$W/f2.parquet" "$W/f3.parquet"
progress_phase "columnar: reward (arl, its record path, cp + sync; best of $REPEAT)"
run reward_arl $B/arl-reward -q --timings --rm math -i "$W/in.parquet" -o "$W/r.parquet"
SPLIT_PT=$(sed 's/^arl-reward: timings: //' "$W/err")
run reward_rec env ARL_NO_PASS_THROUGH=1 $B/arl-reward -q --timings --rm math -i "$W/in.parquet" -o "$W/r2.parquet"
SPLIT_REC=$(sed 's/^arl-reward: timings: //' "$W/err")
# The floor of any tool that writes a file of this size: copying the input
# and syncing it to disk (arl-reward's output is the input plus two columns).
run copy sh -c 'cp "$1" "$2" && sync "$2"' sh "$W/in.parquet" "$W/copy.parquet"
rm -f "$W/copy.parquet" "$W/r2.parquet"
progress_phase "columnar: stats (arl, pyarrow; best of $REPEAT)"
run stats_arl $B/arl-inspect stats -i "$W/in.parquet"
run stats_py "$PY" scripts/bench/py/stats_pyarrow.py "$W/in.parquet"
progress_stop

printf '\n%d trajectories × %d response tokens, %s MB of zstd Parquet written by arl; %d cores; best of %d\n' \
  "$N" "$RESP" "$(du -m "$W/in.parquet" | cut -f1)" "$(nproc)" "$REPEAT"
printf '%-8s %-34s %9s %10s %10s\n' work tool seconds "peak MB" "arl ×"
row() { printf '%-8s %-34s %9.2f %10.0f %9.2fx\n' "$1" "$2" "${S[$3]}" "$(echo "${K[$3]} / 1024" | bc -l)" "$(echo "${S[$3]} / ${S[$4]}" | bc -l)"; }
row filter "arl-filter --drop-zero-std" filter_arl filter_arl
row filter "arl, record path" filter_rec filter_arl
row filter "pyarrow + numpy" filter_py filter_arl
row reward "arl-reward --rm math" reward_arl reward_arl
row reward "arl, record path" reward_rec reward_arl
row reward "cp + sync of the input (floor)" copy reward_arl
row stats "arl-inspect stats" stats_arl stats_arl
row stats "pyarrow, same columns" stats_py stats_arl
echo
echo "filter kept $KEPT rows (pyarrow)"
echo "arl-reward split: $SPLIT_PT"
echo "arl-reward split, record path: $SPLIT_REC"
score=$(echo "$SPLIT_PT" | sed -E 's/.*score ([0-9.]+) s.*/\1/')
rd=$(echo "$SPLIT_PT" | sed -E 's/read ([0-9.]+) s.*/\1/')
wr=$(echo "$SPLIT_PT" | sed -E 's/.*write ([0-9.]+) s.*/\1/')
printf 'arl-reward: time outside grading / grading time = %.2f\n' "$(echo "($rd + $wr) / $score" | bc -l)"
printf 'arl-reward: time outside grading / copying the input and syncing it (%.2f s) = %.2f\n' \
  "${S[copy]}" "$(echo "($rd + $wr) / ${S[copy]}" | bc -l)"
