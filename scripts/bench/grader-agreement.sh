#!/usr/bin/env bash
# Agreement of `arl-reward --rm math` with math-verify (PyPI, Hugging Face)
# on real model outputs: SmolLM2-135M-Instruct (scripts/fetch-models.sh)
# served by arl-serve answers N arithmetic prompts (arl-tasks arith,
# difficulties 1-3) K times at temperature 0.8, asked for a boxed answer;
# both graders grade every response against its label. Prints the agreement
# and each category of disagreement with a count and an example
# (py/grader_agreement.py).
#   N=200 K=2 scripts/bench/grader-agreement.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
N=${N:-200}; K=${K:-2}; SEED=${SEED:-7}; PORT=${PORT:-30177}
MODEL=${MODEL:-$HOME/.cache/arl/models/SmolLM2-135M-Instruct}
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
[ -d "$MODEL" ] || { echo "no model at $MODEL: run scripts/fetch-models.sh" >&2; exit 2; }
cargo build --release --quiet -p arl-serve -p arl-rollout -p arl-tasks -p arl-reward
B=target/release
W=$(mktemp -d "${TMPDIR:-/tmp}/arl-grader.XXXXXX")
. scripts/lib/progress.sh
cleanup() { [ -n "${SERVER:-}" ] && kill "$SERVER" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"; progress_exit; }
trap cleanup EXIT
for d in 1 2 3; do
  $B/arl-tasks arith -q -n $((N / 3 + 1)) --difficulty $d --seed $((SEED + d)) -o "$W/p$d.jsonl"
done
cat "$W"/p?.jsonl | head -n "$N" \
  | jq -c '.prompt += " Think step by step, then put the final answer in \\boxed{}."' >"$W/prompts.jsonl"
$B/arl-serve --model-path "$MODEL" --port "$PORT" 2>"$W/serve.log" &
SERVER=$!
for _ in $(seq 600); do grep -q "listening on" "$W/serve.log" && break; sleep 0.2; done
grep -q "listening on" "$W/serve.log" || { cat "$W/serve.log" >&2; exit 1; }
progress_phase "grader-agreement: sampling $N prompts × $K, graded by arl"
$B/arl-rollout -q -i "$W/prompts.jsonl" --endpoint "http://127.0.0.1:$PORT" --tokenizer "$MODEL" \
    -n "$K" --temperature 0.8 --seed "$SEED" --max-response-len 256 \
  | $B/arl-reward -q --rm math -o "$W/scored.jsonl"
jq -c '{response: .response, label: (.label | tostring)}' "$W/scored.jsonl" >"$W/corpus.jsonl"
progress_phase "grader-agreement: grading with math-verify"
"$PY" scripts/bench/py/math_baselines.py math_verify "$W/corpus.jsonl" "$W/mv.txt" 2>/dev/null
progress_stop
"$PY" scripts/bench/py/grader_agreement.py "$W/scored.jsonl" "$W/mv.txt"
[ -n "${KEEP:-}" ] && cp "$W/scored.jsonl" "$W/mv.txt" "$KEEP"/ || true
