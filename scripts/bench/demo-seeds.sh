#!/usr/bin/env bash
# The main job over several seeds: `make demo` (experiments/demo.env) once per
# SEED in SEEDS, each into runs/demo-seed-S/, then one line per seed — held-out
# greedy accuracy after SFT (step 0) and after RL (the last evaluation), the
# best one during RL, mean@k after SFT (whether the copying of the tool's
# result that RL builds on formed), and the time after the build.
#
#   scripts/bench/demo-seeds.sh                 seeds 1..5 (~10-14 min each here)
#   SEEDS="2 3" scripts/bench/demo-seeds.sh      a few
#   SEEDS=2 STEPS=8 scripts/bench/demo-seeds.sh  shorter runs (any variable of
#                                                demo.env can be overridden)
#   EXP=experiments/other.env …                  another experiment
#   REPORT=1 scripts/bench/demo-seeds.sh         only the table, from the runs
#                                                already there
#
# The demo's targets (issue "The main job learns for every seed"): greedy
# accuracy ≤ 0.1 after SFT and ≥ 0.9 after RL, each run ≤ 15 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
SEEDS=${SEEDS:-1 2 3 4 5}
EXP=${EXP:-experiments/demo.env}
BIN=${BIN:-target/release}
[ -x "$BIN/arl-train" ] || { echo "demo-seeds: build first (make build)" >&2; exit 2; }
. scripts/lib/progress.sh
trap 'progress_exit' EXIT
name=$(basename "$EXP" .env)
if [ "${REPORT:-0}" != 1 ]; then
  i=0
  for s in $SEEDS; do
    i=$((i + 1))
    run=runs/$name-seed-$s
    echo "== seed $s → $run" >&2
    t0=$(date +%s.%N)
    mkdir -p runs
    # While it runs: its time, and the last line of its log (run.sh's own
    # progress lines, every PROGRESS_EVERY seconds there).
    progress_start "seed $s ($i of $(wc -w <<<"$SEEDS"))" progress_last_line "runs/.$name-seed-$s.log"
    if ! SEED=$s RUN=$run scripts/run.sh "$EXP" >"runs/.$name-seed-$s.log" 2>&1; then
      progress_stop
      echo "   seed $s: run.sh failed (runs/.$name-seed-$s.log)" >&2
    fi
    progress_stop
    mkdir -p "$run"
    echo "$(date +%s.%N) - $t0" | bc >"$run/wall_seconds"
  done
fi
printf '%-5s %-14s %-14s %-12s %-14s %-10s %s\n' seed "greedy SFT" "greedy RL" "best RL" "mean@k SFT" seconds verdict
for s in $SEEDS; do
  run=runs/$name-seed-$s
  m=$run/metrics.jsonl
  [ -f "$m" ] || { printf '%-5s (no run)\n' "$s"; continue; }
  secs=$(cat "$run/wall_seconds" 2>/dev/null || echo nan)
  jq -rs --arg s "$s" --arg secs "$secs" '
    [.[] | select(.phase=="eval")] as $e
    | if ($e|length) == 0 then "\($s)     (no evaluation)" else
      ($e[0].greedy_accuracy) as $g0 | ($e[-1].greedy_accuracy) as $g1
      | ([$e[1:][] | .greedy_accuracy] | max // $g0) as $best
      | ($secs | tonumber? // null) as $t
      | [$s, ($g0*1000|round/1000|tostring), ($g1*1000|round/1000|tostring) + " (step \($e[-1].step))",
         ($best*1000|round/1000|tostring), ($e[0].mean_at_k*1000|round/1000|tostring),
         (if $t == null then "?" else ($t|round|tostring) end),
         (if $g0 <= 0.1 and $g1 >= 0.9 and ($t == null or $t <= 900) then "ok" else "MISSED" end)]
      | "\(.[0])\(" " * (6 - (.[0]|length)))\(.[1])\(" " * (15 - (.[1]|length)))\(.[2])\(" " * (15 - (.[2]|length)))\(.[3])\(" " * (13 - (.[3]|length)))\(.[4])\(" " * (15 - (.[4]|length)))\(.[5])\(" " * (11 - (.[5]|length)))\(.[6])"
      end' "$m"
done
