#!/usr/bin/env bash
# arl-serve's prefix cache on GRPO's workload: 16 prompts of about 400
# tokens (TOOLS=3 tool schemas and instructions, as agent prompts carry;
# 406 tokens in SmolLM2's template, TOOLS=8 makes 971), 8 samples
# each, 64 new tokens, sampled at temperature 1 by arl-rollout against one
# arl-serve of MODEL — with the cache (the default) and without
# (`--disable-radix-cache`), ROUNDS times each, alternating, in the same
# run. Prints the median wall time of each, the ratio, the cached share of
# prompt tokens, and whether the two gave the same tokens (greedy run).
# Then one training step (PPO, float32, all records of TRAIN_PROMPTS
# groups in one micro-batch) on those rollouts, with the shared prompt
# forward (the default) and without (`--no-shared-prefix`), TRAIN_ROUNDS
# times each (ROUNDS unless given: a train step costs seconds, a rollout
# without the cache minutes), alternating: the median `step_time_s` and
# the largest peak resident memory of each, the ratio, and the largest
# difference of the two steps' losses and gradient norms. ROUNDS=0 skips
# the rollout comparison (one rollout with the cache is still sampled to
# train on). The default TRAIN_PROMPTS=2 (16 records of ~460 tokens) fits
# 24 GiB; 4 does not without the shared forward.
# Targets (issue 47): rollout ≥ 3× faster with the cache, the train step
# ≥ 2× with the shared prompt forward.
#
#   MODEL=~/.cache/arl/models/SmolLM2-135M-Instruct ROUNDS=3 TRAIN_ROUNDS=3 TRAIN_PROMPTS=2 scripts/bench/prefix-cache.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
MODEL=${MODEL:-$ARL_CACHE/models/SmolLM2-135M-Instruct}
ROUNDS=${ROUNDS:-3}; PROMPTS=${PROMPTS:-16}; N=${N:-8}; NEW=${NEW:-64}; TRAIN_PROMPTS=${TRAIN_PROMPTS:-2}; TOOLS=${TOOLS:-3}
TRAIN_ROUNDS=${TRAIN_ROUNDS:-$ROUNDS}
cargo build --release --quiet -p arl-serve -p arl-rollout -p arl-advantage -p arl-train
B=target/release
W=$(mktemp -d "${TMPDIR:-/tmp}/arl-prefix.XXXXXX")
SERVER=
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
# PROMPTS prompts: a shared block of TOOLS tool schemas and rules, then a
# question of its own.
"$ARL_PYTHON" - "$W/prompts.jsonl" "$PROMPTS" "$TOOLS" <<'PY'
import json, sys
tools = []
for i in range(int(sys.argv[3])):
    tools.append({"type": "function", "function": {"name": f"tool_{i}", "description": f"Looks up record kind {i} by id and returns its fields as JSON; fails when the id is unknown.",
                  "parameters": {"type": "object", "properties": {"id": {"type": "integer", "description": "The record's id."}, "fields": {"type": "array", "items": {"type": "string"}, "description": "Which fields to return."}}, "required": ["id"]}}})
system = ("You are an agent that answers questions about the shop's records. Use the tools; never guess a value. "
          "Answer in one sentence after the last tool call. Tools:\n" + "\n".join(json.dumps(t) for t in tools))
with open(sys.argv[1], "w") as f:
    for k in range(int(sys.argv[2])):
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": f"Question {k}: what is the price of record {100 + 7 * k} of kind {k % 8}?"}]
        f.write(json.dumps({"prompt_id": f"p{k}", "prompt": json.dumps(msgs)}) + "\n")
PY
serve() {
  "$B/arl-serve" --model-path "$MODEL" --port 0 --random-seed 1 "$@" 2>"$W/serve.log" &
  SERVER=$!
  for _ in $(seq 600); do grep -q "listening on" "$W/serve.log" && break; sleep 0.1; done
  URL=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$W/serve.log" | head -1)
  [ -n "$URL" ] || { cat "$W/serve.log" >&2; exit 1; }
}
stop() { kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=; }
roll() { # $1: output; rest: sampling flags
  local out=$1; shift
  "$B/arl-rollout" -q -i "$W/prompts.jsonl" -o "$out" --endpoint "$URL" --tokenizer "$MODEL" \
    --max-new-tokens "$NEW" --concurrency 128 --seed 0 "$@"
}
declare -A times
if [ "$ROUNDS" = 0 ]; then # only the rollouts to train on
  serve; roll "$W/cache.1.jsonl" --temperature 1.0 -n "$N"; stop
fi
for r in $(seq "$ROUNDS"); do
  for mode in cache nocache; do
    if [ "$mode" = cache ]; then serve; else serve --disable-radix-cache; fi
    t0=$(date +%s.%N)
    roll "$W/$mode.$r.jsonl" --temperature 1.0 -n "$N"
    t1=$(date +%s.%N)
    times[$mode]+="$(echo "$t1 - $t0" | bc) "
    if [ "$r" = 1 ]; then
      roll "$W/$mode.greedy.jsonl" --temperature 0 -n 2
      curl -s "$URL/metrics" >"$W/$mode.metrics"
    fi
    stop
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
if [ "$ROUNDS" -gt 0 ]; then
c=$(echo "${times[cache]}" | median); n=$(echo "${times[nocache]}" | median)
rate=$(sed -n 's/^sglang:cache_hit_rate{[^}]*} //p' "$W/cache.metrics")
same=$("$ARL_PYTHON" - "$W/cache.greedy.jsonl" "$W/nocache.greedy.jsonl" <<'PY'
import json, sys
key = lambda r: (r["prompt_id"], r["sample_index"])
a, b = ({key(r): r["tokens"] for r in map(json.loads, open(p))} for p in sys.argv[1:])
print("identical" if a == b else f"DIFFERENT ({sum(a[k] != b.get(k) for k in a)} of {len(a)})")
PY
)
plen=$("$ARL_PYTHON" -c "import json,sys; r=[json.loads(l)['prompt_len'] for l in open(sys.argv[1])]; print(round(sum(r)/len(r)))" "$W/cache.1.jsonl")
echo "prefix cache: $PROMPTS prompts of $plen tokens (mean; $TOOLS tool schemas) x $N samples, $NEW new tokens, $ROUNDS rounds"
echo "  with the cache    ${c}s (runs: ${times[cache]})"
echo "  without           ${n}s (runs: ${times[nocache]})"
echo "  speed-up          $(echo "scale=2; $n / $c" | bc)x; cache hit rate $rate of prompt tokens; greedy outputs $same"
fi

# The train step on the first TRAIN_PROMPTS groups of the sampled rollouts,
# rewards drawn per record (seeded) so that every group has an advantage.
"$ARL_PYTHON" - "$W/cache.1.jsonl" "$TRAIN_PROMPTS" "$W/scored.jsonl" <<'PY'
import json, random, sys
keep = {f"p{k}" for k in range(int(sys.argv[2]))}
rng = random.Random(7)
with open(sys.argv[3], "w") as f:
    for r in map(json.loads, open(sys.argv[1])):
        if r["prompt_id"] in keep:
            r["reward"] = float(rng.random() < 0.5)
            f.write(json.dumps(r) + "\n")
PY
"$B/arl-advantage" --estimator grpo -i "$W/scored.jsonl" -o "$W/train.jsonl"
records=$(wc -l <"$W/train.jsonl")
train() { # $1: metrics file; rest: flags
  local m=$1; shift
  /usr/bin/time -f %M -o "$m.rss" "$B/arl-train" --model "$MODEL" -i "$W/train.jsonl" --global-batch-size "$records" \
    --max-tokens-per-micro-batch 65536 --precision fp32 --metrics "$m" -q "$@"
}
declare -A rss
declare -A steps
for r in $(seq "$TRAIN_ROUNDS"); do
  train "$W/shared.$r.m.jsonl"
  train "$W/plain.$r.m.jsonl" --no-shared-prefix
  for mode in shared plain; do
    steps[$mode]+="$("$ARL_PYTHON" -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['step_time_s'])" "$W/$mode.$r.m.jsonl") "
    rss[$mode]+="$(tail -1 "$W/$mode.$r.m.jsonl.rss") "
  done
done
s=$(echo "${steps[shared]}" | median); p=$(echo "${steps[plain]}" | median)
diff=$("$ARL_PYTHON" - "$W" "$TRAIN_ROUNDS" <<'PY'
import json, sys
w, rounds = sys.argv[1], int(sys.argv[2])
one = lambda p: json.loads(open(p).readline())
d = [max(abs(one(f"{w}/shared.{r}.m.jsonl")[k] - one(f"{w}/plain.{r}.m.jsonl")[k]) for r in range(1, rounds + 1)) for k in ("loss", "grad_norm")]
m = one(f"{w}/shared.1.m.jsonl")
print(f"max |d loss| {d[0]:.2e}, max |d grad_norm| {d[1]:.2e} (loss {m['loss']:.6f}, grad_norm {m['grad_norm']:.6f}, {m['tokens']} tokens)")
PY
)
echo "train step: $records records ($TRAIN_PROMPTS prompts x $N samples), one micro-batch, fp32, $TRAIN_ROUNDS rounds"
peak() { tr ' ' '\n' | grep . | sort -g | tail -1 | awk '{printf "%.1f GiB", $1 / 1048576}'; }
echo "  shared prompt forward  ${s}s (steps: ${steps[shared]}); peak RSS $(echo "${rss[shared]}" | peak)"
echo "  every row whole        ${p}s (steps: ${steps[plain]}); peak RSS $(echo "${rss[plain]}" | peak)"
echo "  speed-up               $(echo "scale=2; $p / $s" | bc)x; $diff"
