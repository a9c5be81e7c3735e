#!/usr/bin/env bash
# Throughput of trajectory-record conversion, JSONL → Parquet and Parquet → JSONL:
# arl-inspect convert next to pyarrow (pyarrow.json in; pyarrow.parquet + Python
# json out) and polars (read_ndjson/write_parquet, read_parquet/write_ndjson),
# measured in the same run on the same files. Prints records/s, MB/s (of the
# JSONL size) and the ratios arl/baseline (> 1 means arl is faster).
#
#   N=20000 RESP=512 scripts/bench/io.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
N=${N:-20000}; RESP=${RESP:-512}; REPS=${REPS:-3}
. scripts/env.sh
PY=$ARL_PYTHON
cargo build --release --quiet -p arl-inspect
ARL=target/release/arl-inspect
. scripts/lib/progress.sh
W=$(mktemp -d); trap 'rm -rf "$W"; progress_exit' EXIT
progress_phase "io: generating $N records with $RESP response tokens"
"$PY" scripts/bench/py/gen_trajectories.py "$N" "$RESP" "$W/in.jsonl"
"$ARL" convert -q -i "$W/in.jsonl" -o "$W/in.parquet"
MB=$(du -m "$W/in.jsonl" | cut -f1)

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

declare -A T
progress_phase "io: arl-inspect convert, best of $REPS each way"
T[arl,j2p]=$(best "$ARL" convert -q -i "$W/in.jsonl" -o "$W/a.parquet")
T[arl,p2j]=$(best "$ARL" convert -q -i "$W/in.parquet" -o "$W/a.jsonl")
for lib in pyarrow polars; do
  progress_phase "io: $lib, best of $REPS each way"
  T[$lib,j2p]=$(best "$PY" scripts/bench/py/io_baseline.py $lib j2p "$W/in.jsonl" "$W/$lib.parquet")
  T[$lib,p2j]=$(best "$PY" scripts/bench/py/io_baseline.py $lib p2j "$W/in.parquet" "$W/$lib.jsonl")
done
progress_stop

printf '\n%d records, %d response tokens each, JSONL %d MB, best of %d\n' "$N" "$RESP" "$MB" "$REPS"
printf '%-10s %-14s %10s %12s %10s %14s\n' tool direction seconds records/s MB/s "arl speed-up"
for way in j2p p2j; do
  name=$([ $way = j2p ] && echo "JSONL→Parquet" || echo "Parquet→JSONL")
  for lib in arl pyarrow polars; do
    t=${T[$lib,$way]}
    rps=$(echo "$N / $t" | bc -l); mbs=$(echo "$MB / $t" | bc -l)
    ratio=$(echo "$t / ${T[arl,$way]}" | bc -l)
    printf '%-10s %-14s %10.3f %12.0f %10.1f %13.2fx\n' "$lib" "$name" "$t" "$rps" "$mbs" "$ratio"
  done
done
