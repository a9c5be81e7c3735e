#!/usr/bin/env bash
# `arl-reward --rm bfcl` against BFCL's own checker (run from the unpacked
# bfcl-eval package by py/bfcl_reference.py, never copied): the ground truth
# of every single-turn Python category (py/bfcl_mutations.py's `gold` is one
# concrete value per allowed list; `arl-tasks import --with-solutions` gives
# the same), PER_CLASS mutations of it in each of 20 classes (int/float,
# string variants, missing optional, extra parameter, wrong value, swapped
# parallel calls, an extra call, dotted names, malformed calls, irrelevance
# …), and a model's real outputs from a `make eval BENCH=bfcl` run (EVAL,
# its bfcl-*.scored.jsonl, when there). Prints the agreement per class and
# lists every disagreement; exits 1 below 99.5% overall or 98% in a class.
#   scripts/bench/bfcl-agreement.sh
#   EVAL=runs/eval/smollm2-135m-instruct PER_CLASS=200 SEED=1 scripts/bench/bfcl-agreement.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
EVAL=${EVAL:-runs/eval/smollm2-135m-instruct}
PER_CLASS=${PER_CLASS:-200}
SEED=${SEED:-0}
cargo build --release --quiet -p arl-tasks -p arl-reward
B=target/release
W=$(mktemp -d "${TMPDIR:-/tmp}/arl-bfclagree.XXXXXX")
trap 'rm -rf "$W"' EXIT
cats="simple_python multiple parallel parallel_multiple live_simple live_multiple live_parallel live_parallel_multiple irrelevance live_irrelevance live_relevance"
for c in $cats; do $B/arl-tasks import "bfcl:$c" -q; done >"$W/prompts.jsonl"
# (Records are edited with Python, never jq: jq writes 133.0 as 133, which
# changes what BFCL's checker decides.)
edit() { "$ARL_PYTHON" -c "import json,sys
for l in sys.stdin:
    r = json.loads(l); $1
    print(json.dumps(r))"; }
for c in $cats; do [ "$c" = live_relevance ] || $B/arl-tasks import "bfcl:$c" -q --with-solutions; done |
  edit 'r["metadata"]["mutation"] = "import --with-solutions"' >"$W/gold.jsonl"
"$ARL_PYTHON" scripts/bench/py/bfcl_mutations.py -i "$W/prompts.jsonl" --per-class "$PER_CLASS" --seed "$SEED" -o "$W/mut.jsonl" 2>/dev/null
inputs=("$W/gold.jsonl" "$W/mut.jsonl")
real=$(ls "$EVAL"/bfcl-*.scored.jsonl 2>/dev/null || true)
if [ -n "$real" ]; then
  # shellcheck disable=SC2086
  cat $real | edit 'r.pop("reward", None); r.pop("reward_detail", None)' >"$W/real.jsonl"
  inputs+=("$W/real.jsonl")
  echo "bfcl-agreement: real outputs from $EVAL ($(wc -l <"$W/real.jsonl") records)" >&2
else
  echo "bfcl-agreement: no $EVAL/bfcl-*.scored.jsonl (make eval BENCH=bfcl); ground truth and mutations only" >&2
fi
cat "${inputs[@]}" | $B/arl-reward -q --rm bfcl -o "$W/scored.jsonl"
"$ARL_PYTHON" scripts/bench/py/bfcl_reference.py -i "$W/scored.jsonl" --min-overall 0.995 --min-class 0.98
