#!/usr/bin/env bash
# The standard benchmarks' references through arl's verifiers, full sets
# (the tests score samples): `arl-tasks import NAME --with-solutions` renders
# each reference as its prompt asks, `arl-reward --rm auto` scores it (gold:
# every one should be 1), and each item's label against the next item's
# reference (shifted: 0, except where the two labels are equal, counted).
# MATH-500's `answer` field, boxed, is graded against the label too, and each
# one that differs is listed (the dataset mangles some of them).
#   scripts/bench/benchmark-golds.sh              # every benchmark
#   BENCHES="math500 mbpp" TEST_TIMEOUT=20 scripts/bench/benchmark-golds.sh
# Needs the benchmarks (scripts/fetch-benchmarks.sh) and the sandbox
# (bubblewrap) for the code ones.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
BENCHES=${BENCHES:-gsm8k math500 math-train aime24 aime25-i humaneval mbpp}
TEST_TIMEOUT=${TEST_TIMEOUT:-20}
cargo build --release --quiet -p arl-tasks -p arl-reward
B=target/release
W=$(mktemp -d "${TMPDIR:-/tmp}/arl-golds.XXXXXX")
trap 'rm -rf "$W"' EXIT
score() { $B/arl-reward -q --rm auto --test-timeout "$TEST_TIMEOUT" --concurrency 4 -i "$1" -o "$2"; }
printf '%-11s %7s %13s %22s %9s\n' benchmark items "gold = 1" "shifted = 0 (equal)" seconds
for b in $BENCHES; do
  t0=$SECONDS
  $B/arl-tasks import "$b" -q --with-solutions -o "$W/$b.jsonl"
  score "$W/$b.jsonl" "$W/$b.gold.jsonl"
  # Item i's label with item i+1's reference; the two labels count as equal
  # when the grader finds them so (`x = 5` and `5`), or as JSON (code).
  jq -s -c 'to_entries as $e | ($e | length) as $n
    | $e[] | .value + {response: $e[(.key + 1) % $n].value.response, other: $e[(.key + 1) % $n].value.label}' \
    "$W/$b.jsonl" >"$W/$b.shift.jsonl"
  jq -c 'if (.label | type) == "string" then .response = "\\boxed{\(.other)}" else .response = "" end' \
    "$W/$b.shift.jsonl" >"$W/$b.labels.jsonl"
  score "$W/$b.labels.jsonl" "$W/$b.labels.scored.jsonl"
  score "$W/$b.shift.jsonl" "$W/$b.shifted.raw.jsonl"
  jq -s -c '.[0] as $l | .[1] | to_entries[]
    | .value + {shifted_equal: ((.value.label == .value.other) or ($l[.key].reward == 1))}' \
    <(jq -s . "$W/$b.labels.scored.jsonl") <(jq -s . "$W/$b.shifted.raw.jsonl") >"$W/$b.shifted.jsonl"
  n=$(wc -l <"$W/$b.jsonl")
  gold=$(jq -s '[.[] | select(.reward == 1)] | length' "$W/$b.gold.jsonl")
  zero=$(jq -s '[.[] | select(.shifted_equal | not) | select(.reward == 0)] | length' "$W/$b.shifted.jsonl")
  equal=$(jq -s '[.[] | select(.shifted_equal)] | length' "$W/$b.shifted.jsonl")
  printf '%-11s %7d %8d/%-4d %15d/%-4d (%d) %9d\n' "$b" "$n" "$gold" "$n" "$zero" "$((n - equal))" "$equal" "$((SECONDS - t0))"
  jq -r 'select(.reward != 1) | "  gold not 1: \(.prompt_id): \(.reward_detail | tostring | .[0:300])"' "$W/$b.gold.jsonl"
  jq -r 'select((.shifted_equal | not) and .reward != 0) | "  shifted scored: \(.prompt_id): \(.reward_detail | tostring | .[0:300])"' "$W/$b.shifted.jsonl"
  if [ "$b" = math500 ]; then
    # The dataset's own `answer` field, boxed, where it differs from the label.
    jq -c 'select(.metadata.answer_field) | .response = "\\boxed{\(.metadata.answer_field)}"' "$W/$b.jsonl" >"$W/af.jsonl"
    score "$W/af.jsonl" "$W/af.scored.jsonl"
    echo "  MATH-500 \`answer\` fields that differ from the solution's last box: $(wc -l <"$W/af.jsonl"), graded right: $(jq -s '[.[] | select(.reward == 1)] | length' "$W/af.scored.jsonl")"
    jq -r 'select(.reward != 1) | "    \(.prompt_id): answer field `\(.metadata.answer_field)` against `\(.label)`"' "$W/af.scored.jsonl"
  fi
done
