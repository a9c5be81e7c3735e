"""Agreement of arl's math grader with math-verify on the same responses,
for scripts/bench/grader-agreement.sh. Reads arl-reward's scored records and
math-verify's verdicts (one 0/1 per line, same order), prints the agreement
and every category of disagreement: arl's reading (`match`, `hedge`,
`source` in reward_detail) against math-verify's verdict, with a count and
one example each.
Usage: grader_agreement.py SCORED.jsonl MV_VERDICTS.txt"""
import collections
import json
import sys

scored = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mv = [int(l) for l in open(sys.argv[2]) if l.strip()]
assert len(scored) == len(mv), (len(scored), len(mv))
agree = 0
cats = collections.OrderedDict()
for r, m in zip(scored, mv):
    d = r.get("reward_detail") or {}
    a = 1 if (d.get("score", r.get("reward", 0)) or 0) >= 1 else 0
    if a == m:
        agree += 1
        continue
    why = d.get("match", "?")
    if d.get("hedge"):
        why += f": {d['hedge']}"
    key = f"arl {a} ({why}), math-verify {m}"
    c = cats.setdefault(key, [0, r])
    c[0] += 1
n = len(scored)
print(f"responses {n}, agreement {agree}/{n} = {agree / max(n, 1):.3f}")
print(f"arl correct {sum(1 for r in scored if ((r.get('reward_detail') or {}).get('score', 0) or 0) >= 1)}, math-verify correct {sum(mv)}")
for key, (count, ex) in sorted(cats.items(), key=lambda kv: -kv[1][0]):
    resp = ex.get("response", "").replace("\n", "\\n")
    if len(resp) > 160:
        resp = "…" + resp[-160:]
    print(f"  {count:4d}  {key}\n        label {ex.get('label')!r}  response {resp!r}")
