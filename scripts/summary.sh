#!/usr/bin/env bash
# One-screen summary of a run directory written by scripts/run.sh:
#   scripts/summary.sh RUN [SECONDS]
set -euo pipefail
run=$1; secs=${2:-}
m=$run/metrics.jsonl
[ -f "$m" ] || { echo "summary.sh: no $m" >&2; exit 1; }
echo "== $run"
jq -r 'select(.phase=="sft") | "SFT          \(.steps) steps, loss \(.loss_first*1000|round/1000) → \(.loss_last*1000|round/1000) (\(.seconds|round) s)"' "$m"
jq -rs '[.[] | select(.phase=="sft_check")] as $c | if ($c|length) > 0 then "SFT checks   right when calling the tool: " + ([$c[] | "\(.copy_accuracy*100|round/100) (step \(.step))"] | join(", ")) else empty end' "$m"
echo "reward per RL step (sampled, training prompts):"
jq -r 'select(.phase=="rl") | "  step \(.step|tostring|.[0:3])  reward \(.reward_mean*1000|round/1000)  accuracy \(.accuracy*1000|round/1000)  tool calls/sample \(.tool_call_rate*100|round/100)"' "$m"
echo "held-out evaluation:"
jq -r 'select(.phase=="eval") | "  step \(.step|tostring|.[0:3])  greedy accuracy \(.greedy_accuracy*1000|round/1000)" + (if .greedy_lenient != null then " (last number \(.greedy_lenient*1000|round/1000), answer format \(.greedy_answer_format*1000|round/1000))" else "" end) + "  mean@\(.k) \(.mean_at_k*1000|round/1000)  pass@\(.k) \(.pass_at_k*1000|round/1000)  greedy tool calls \(.greedy_tool_call_rate*100|round/100)" + (if (.greedy_by // {}) == {} then "" else "\n" + ([.greedy_by | to_entries[] | .key as $f | .value | to_entries[] | "      \($f|ltrimstr("by_")) = \(.key): greedy reward \(.value.reward*1000|round/1000), tool calls \((.value.tool_calls // 0)*100|round/100)"] | join("\n")) end)' "$m"
jq -rs '
  ([.[] | select(.phase=="eval")]) as $e
  | if ($e|length) >= 2 then
      "result       greedy held-out accuracy \($e[0].greedy_accuracy*1000|round/1000) at step 0 → \($e[-1].greedy_accuracy*1000|round/1000) after \($e[-1].step) RL steps" + (if $e[0].greedy_lenient != null then "; last number \($e[0].greedy_lenient*1000|round/1000) → \($e[-1].greedy_lenient*1000|round/1000)" else "" end)
    else empty end' "$m"
jq -rs '[.[] | select(.phase=="rl" and .value_explained_var != null)] as $r
  | if ($r|length) > 0 then "critic       explained variance of the values per step: \([$r[] | .value_explained_var*100|round/100] | map(tostring) | join(" "))" else empty end' "$m"
# The slowest step's rollout: where its time went (arl-inspect trace on the
# step's trace; the timeline lands next to it).
slow=$(jq -rs '[.[] | select(.phase=="rl" and .rollout_s != null)] | if length == 0 then empty else max_by(.rollout_s) | "\(.step) \(.rollout_s)" end' "$m")
if [ -n "$slow" ] && [ -f "$run/steps/step-${slow%% *}/rollout.trace.jsonl" ]; then
  d=$run/steps/step-${slow%% *}
  printf 'slowest rollout  step %s (%.1f s), timeline %s:\n' "${slow%% *}" "${slow##* }" "$d/timeline.html"
  "${BIN:-target/release}/arl-inspect" trace "$d/rollout.trace.jsonl" -o "$d/timeline.html" 2>/dev/null \
    | sed -n '/^critical path/,/^ *total/p; /^long tail/p; /^request slots/p' | sed 's/^/  /' || true
fi
[ -n "$secs" ] && printf 'time         %.0f s in all\n' "$secs"
echo "files        $run/metrics.jsonl  $run/reward.svg  $run/ckpt/  $run/steps/"
