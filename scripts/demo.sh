#!/usr/bin/env bash
# The main job (`make demo`), in its current, short form: one step of the
# agent-RL loop end to end on this machine, with every stage a separate binary
# and every intermediate file kept under runs/demo/:
#
#   arl-serve (the tiny test model in testdata/tiny-model, on loopback)
#   arl-tasks arith → arl-rollout (calculator tool) → arl-reward → arl-filter
#   → arl-advantage (GRPO) → arl-train (one PPO step) → arl-sync → arl-inspect
#
# The tiny model is randomly initialised, so its rewards are ~0: this shows the
# plumbing (token-in/token-out rollouts, masks, rewards, a checkpoint written
# and served at a new weight version), not learning. The train-from-scratch
# demo of DESIGN.md §10 (SFT warm start, then GRPO with a rising reward curve)
# is the next step of this script.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
OUT=${OUT:-runs/demo}
PORT=${PORT:-30123}
MODEL=testdata/tiny-model
URL=http://127.0.0.1:$PORT
rm -rf "$OUT"; mkdir -p "$OUT"

echo "== arl-serve: $MODEL on $URL (weight version 0)"
"$BIN/arl-serve" --model-path "$MODEL" --port "$PORT" --weight-version 0 >"$OUT/serve.log" 2>&1 &
SERVE=$!
trap 'kill $SERVE 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -sf "$URL/health" >/dev/null 2>&1 && break
  kill -0 $SERVE 2>/dev/null || { cat "$OUT/serve.log"; exit 1; }
  sleep 0.2
done

echo "== arl-tasks → arl-rollout → arl-reward → arl-filter → arl-advantage"
"$BIN/arl-tasks" arith -n 8 --seed 1 --difficulty 2 >"$OUT/prompts.jsonl"
"$BIN/arl-rollout" -q -i "$OUT/prompts.jsonl" --endpoint "$URL" --tokenizer "$MODEL" \
    -n 4 --tools calculator --max-turns 3 --max-response-len 96 --temperature 1.0 \
  | "$BIN/arl-reward" -q --rm auto \
  | tee "$OUT/scored.jsonl" \
  | "$BIN/arl-filter" --drop-status aborted,failed \
  | "$BIN/arl-advantage" --estimator grpo --group-size 4 >"$OUT/batch.jsonl"

echo "== arl-train: one GRPO/PPO step → $OUT/step-1"
"$BIN/arl-train" -q --model "$MODEL" --save "$OUT/step-1" -i "$OUT/batch.jsonl" \
    --metrics "$OUT/metrics.jsonl" --seed 1
tail -n 1 "$OUT/metrics.jsonl"

echo "== arl-sync: serve step 1"
"$BIN/arl-sync" --checkpoint "$OUT/step-1" --endpoint "$URL" --weight-version 1

echo "== arl-inspect stats (the scored rollouts)"
"$BIN/arl-inspect" stats -i "$OUT/scored.jsonl"
echo
echo "== arl-inspect show (one trajectory, decoded, trained tokens marked)"
"$BIN/arl-inspect" show -i "$OUT/scored.jsonl" --tokenizer "$MODEL" --color never | head -n 40
