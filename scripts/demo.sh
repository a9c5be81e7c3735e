#!/usr/bin/env bash
# The main job (`make demo`). Until the rollout/reward/training stages land,
# it runs the record tools end to end on testdata/: JSONL → Parquet → stats →
# a readable view of one trajectory.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release
OUT=${OUT:-runs/demo}
mkdir -p "$OUT"
$BIN/arl-inspect convert -i testdata/sample-trajectories.jsonl -o "$OUT/trajectories.parquet"
$BIN/arl-inspect stats -i "$OUT/trajectories.parquet"
echo
$BIN/arl-inspect show -i "$OUT/trajectories.parquet" -n 1 --color never
