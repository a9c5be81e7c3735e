#!/usr/bin/env bash
# arl's math grader against math-verify (PyPI, Hugging Face's) on MATH-500:
# the model's real outputs from a `make eval` run (EVAL, its
# math500.scored.jsonl) plus equivalent-form rewrites of every reference
# answer (py/math500_rewrites.py: boxed as is, \dfrac, fraction ⇄ decimal,
# `x = …`, a unit, \left( \right), spacing, a set), each graded by both.
# Prints the agreement by origin and lists every disagreement.
#   EVAL=runs/eval/smollm2-135m-instruct scripts/bench/math500-agreement.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
EVAL=${EVAL:-runs/eval/smollm2-135m-instruct}
[ -s "$EVAL/math500.scored.jsonl" ] || { echo "no $EVAL/math500.scored.jsonl: run make eval BENCH=math500 first" >&2; exit 2; }
cargo build --release --quiet -p arl-tasks -p arl-reward
B=target/release
W=$(mktemp -d "${TMPDIR:-/tmp}/arl-m5agree.XXXXXX")
trap 'rm -rf "$W"' EXIT
$B/arl-tasks import math500 -q -o "$W/math500.jsonl"
"$ARL_PYTHON" scripts/bench/py/math500_rewrites.py "$W/math500.jsonl" "$W/rewrites.jsonl"
{
  jq -c '{prompt_id: .prompt_id, form: "model output", label: .label, data_source: .data_source, response: .response}' "$EVAL/math500.scored.jsonl"
  cat "$W/rewrites.jsonl"
} >"$W/corpus.jsonl"
$B/arl-reward -q --rm math -i "$W/corpus.jsonl" -o "$W/arl.jsonl"
"$ARL_PYTHON" scripts/bench/py/math_baselines.py math_verify "$W/corpus.jsonl" "$W/mv.txt" 2>/dev/null
"$ARL_PYTHON" - "$W/arl.jsonl" "$W/mv.txt" <<'PY'
import collections, json, sys
arl = [json.loads(l) for l in open(sys.argv[1])]
mv = [int(l) for l in open(sys.argv[2]) if l.strip()]
assert len(arl) == len(mv)
by = collections.defaultdict(lambda: [0, 0, 0, 0])  # n, agree, arl right, mv right
dis = []
for r, m in zip(arl, mv):
    a = 1 if (r["reward_detail"].get("score") or 0) >= 1 else 0
    origin = "model output" if r["form"] == "model output" else "rewrite"
    for key in (origin, f"{origin}: {r['form']}" if origin == "rewrite" else None):
        if key:
            s = by[key]; s[0] += 1; s[1] += a == m; s[2] += a; s[3] += m
    if a != m:
        dis.append((r, a, m))
n = len(arl); agree = n - len(dis)
print(f"items {n}, agreement {agree}/{n} = {agree / n:.4f}")
for k in sorted(by, key=lambda k: (not k.startswith("model"), k)):
    s = by[k]
    print(f"  {k:<24} {s[0]:5d}  agree {s[1]:5d} ({s[1] / s[0]:.3f})  arl right {s[2]:5d}  math-verify right {s[3]:5d}")
print("disagreements:")
for r, a, m in dis:
    d = r["reward_detail"]
    resp = r["response"].replace("\n", "\\n")
    resp = resp if len(resp) < 140 else "…" + resp[-140:]
    print(f"  {r['prompt_id']} [{r['form']}] arl {a} ({d.get('match')}{': ' + d['hedge'] if d.get('hedge') else ''}, "
          f"read {d.get('extracted')!r}), math-verify {m}; label {r['label']!r}; response {resp!r}")
PY
