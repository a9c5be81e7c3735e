#!/usr/bin/env bash
# `make eval`: a model on the standard benchmarks, scored by arl's verifiers,
# one table at the end (arl-inspect eval: accuracy with Wilson intervals, or
# unbiased pass@k with bootstrap intervals, per benchmark and per level and
# subject). The pipe it runs, per benchmark, is
#
#   arl-tasks import B | arl-rollout --endpoint URL … | arl-reward --rm auto
#
# against arl-serve started here on MODEL, or any SGLang-compatible server
# (ENDPOINT=URL, with TOKENIZER=DIR for its chat template).
#
#   make eval MODEL=~/.cache/arl/models/SmolLM2-135M-Instruct BENCH=gsm8k,math500
#   make eval ENDPOINT=http://127.0.0.1:30000 TOKENIZER=DIR BENCH=humaneval N=10 TEMPERATURE=0.8
#
# Variables (defaults in brackets):
#   MODEL            model directory to serve with arl-serve
#   ENDPOINT         an already running server instead of MODEL
#   TOKENIZER        tokenizer and chat template [MODEL]
#   BENCH            comma-separated [gsm8k,math500,aime24,aime25-i,humaneval,mbpp];
#                    also math-train (the 4,500 MATH problems outside MATH-500),
#                    bfcl:CATEGORY (a BFCL v4 category, scored by --rm bfcl;
#                    the table slices them by metadata.category) and bfcl
#                    (all eleven single-turn Python categories)
#   N                samples per problem [1]; with N > 1 the table gives pass@1 and pass@N
#   TEMPERATURE      [0 (greedy) with N=1, else 0.6]; TOP_P [1.0]
#   MAX_NEW_TOKENS   per response [1024]
#   LIMIT            only the first LIMIT problems of each benchmark [all]
#   SAMPLE           a random SAMPLE of each benchmark's problems, the same for
#                    the same SEED, kept in file order [all]; for an estimate of a
#                    large category where LIMIT would take its first few sources
#   CONCURRENCY      requests in flight, and arl-serve's --max-running-requests [64]
#   TEST_TIMEOUT     seconds per code test [10]
#   SEED             sampling seed [0]
#   SERVE_ARGS       more arl-serve flags
#   OUT              [runs/eval/<model directory name>]
#   RESUME=1         keep each benchmark already scored, continue an unfinished rollout
#
# OUT gets, per benchmark, B.prompts.jsonl, B.rollouts.jsonl, B.scored.jsonl
# (`bfcl:CATEGORY` as bfcl-CATEGORY.*);
# and commands.txt (every command as run, with max_new_tokens and the
# sampling settings), times.txt (seconds per benchmark), results.txt and
# results.json (the table).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/bench/lib/cpu.sh
BENCH=${BENCH:-gsm8k,math500,aime24,aime25-i,humaneval,mbpp}
N=${N:-1}
if [ "$N" = 1 ]; then TEMPERATURE=${TEMPERATURE:-0}; else TEMPERATURE=${TEMPERATURE:-0.6}; fi
TOP_P=${TOP_P:-1.0}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-1024}
CONCURRENCY=${CONCURRENCY:-64}
TEST_TIMEOUT=${TEST_TIMEOUT:-10}
SEED=${SEED:-0}
if [ -z "${ENDPOINT:-}" ] && [ -z "${MODEL:-}" ]; then
  echo "eval: give MODEL=DIR (served here by arl-serve) or ENDPOINT=URL (with TOKENIZER=DIR)" >&2
  exit 2
fi
TOKENIZER=${TOKENIZER:-${MODEL:-}}
[ -n "$TOKENIZER" ] || { echo "eval: ENDPOINT needs TOKENIZER=DIR (its chat template)" >&2; exit 2; }
name=$(basename "${MODEL:-$ENDPOINT}" | tr -c 'A-Za-z0-9._\n-' '_')
OUT=${OUT:-runs/eval/$name}
mkdir -p "$OUT"
B=target/release
[ "${RESUME:-0}" = 1 ] || rm -f "$OUT"/*.jsonl "$OUT"/commands.txt "$OUT"/times.txt "$OUT"/results.*
# Every command goes to commands.txt as it runs.
log() { printf '%s\n' "$*" >>"$OUT/commands.txt"; }
{
  echo "# make eval, $(date -u +%Y-%m-%dT%H:%MZ), arl $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $CPU_MODEL, $(nproc) cores"
  echo "# N=$N TEMPERATURE=$TEMPERATURE TOP_P=$TOP_P MAX_NEW_TOKENS=$MAX_NEW_TOKENS LIMIT=${LIMIT:-all} SAMPLE=${SAMPLE:-all} SEED=$SEED"
} >>"$OUT/commands.txt"

SERVER=
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT
if [ -z "${ENDPOINT:-}" ]; then
  # shellcheck disable=SC2086
  set -- $B/arl-serve --model-path "$MODEL" --port 0 --max-running-requests "$CONCURRENCY" ${SERVE_ARGS:-}
  log "$*"
  "$@" 2>"$OUT/serve.log" &
  SERVER=$!
  for _ in $(seq 1200); do grep -q "listening on" "$OUT/serve.log" && break; kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done
  grep -q "listening on" "$OUT/serve.log" || { cat "$OUT/serve.log" >&2; exit 1; }
  ENDPOINT=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$OUT/serve.log" | head -1)
fi
echo "eval: $ENDPOINT; writing $OUT" >&2

BFCL_ALL=simple_python,multiple,parallel,parallel_multiple,live_simple,live_multiple,live_parallel,live_parallel_multiple,irrelevance,live_irrelevance,live_relevance
benches=()
for b in ${BENCH//,/ }; do
  if [ "$b" = bfcl ]; then
    for c in ${BFCL_ALL//,/ }; do benches+=("bfcl:$c"); done
  else
    benches+=("$b")
  fi
done
# The file stem of a benchmark (`bfcl:simple_python` → bfcl-simple_python).
stem() { printf '%s' "${1/:/-}"; }

for b in "${benches[@]}"; do
  f=$OUT/$(stem "$b")
  scored=$f.scored.jsonl
  if [ "${RESUME:-0}" = 1 ] && [ -s "$scored" ]; then
    echo "eval: $b already scored (RESUME=1)" >&2
    continue
  fi
  t0=$SECONDS
  lim=(); [ -n "${LIMIT:-}" ] && lim=(-n "$LIMIT")
  set -- $B/arl-tasks import "$b" "${lim[@]}" -q -o "$f.prompts.jsonl"
  log "$*"; "$@"
  if [ -n "${SAMPLE:-}" ]; then
    # Line numbers drawn by shuf from a byte stream fixed by SEED, put back in order.
    log "sample $SAMPLE of $f.prompts.jsonl (shuf, seed $SEED)"
    nl -ba -w1 -s$'\t' "$f.prompts.jsonl" \
      | shuf -n "$SAMPLE" --random-source=<(yes "arl-eval-$SEED") \
      | sort -n | cut -f2- >"$f.prompts.jsonl.tmp"
    mv "$f.prompts.jsonl.tmp" "$f.prompts.jsonl"
  fi
  resume=()
  # An interrupted rollout leaves its records in $f.rollouts.jsonl.partial.
  if [ "${RESUME:-0}" = 1 ] && { [ -s "$f.rollouts.jsonl" ] || [ -s "$f.rollouts.jsonl.partial" ]; }; then resume=(--resume); fi
  set -- $B/arl-rollout -i "$f.prompts.jsonl" -o "$f.rollouts.jsonl" "${resume[@]}" \
    --endpoint "$ENDPOINT" --tokenizer "$TOKENIZER" -n "$N" --temperature "$TEMPERATURE" --top-p "$TOP_P" \
    --max-new-tokens "$MAX_NEW_TOKENS" --concurrency "$CONCURRENCY" --seed "$SEED"
  log "$*"; "$@"
  set -- $B/arl-reward --rm auto --test-timeout "$TEST_TIMEOUT" -i "$f.rollouts.jsonl" -o "$scored"
  log "$*"; "$@"
  echo "$b $((SECONDS - t0))" >>"$OUT/times.txt"
done

set -- $B/arl-inspect eval --by metadata.level --by metadata.type --by metadata.category
for b in "${benches[@]}"; do set -- "$@" -i "$OUT/$(stem "$b").scored.jsonl"; done
log "$*"
"$@" --json >"$OUT/results.json.tmp" && mv "$OUT/results.json.tmp" "$OUT/results.json"
"$@" | tee "$OUT/results.txt.tmp"
mv "$OUT/results.txt.tmp" "$OUT/results.txt"
echo "eval: seconds per benchmark: $(tr '\n' ' ' <"$OUT/times.txt"); every command in $OUT/commands.txt" >&2
