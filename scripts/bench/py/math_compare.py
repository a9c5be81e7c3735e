"""Agreement report for scripts/bench/reward.sh: arl-reward's `math` verdicts
against the two Python baselines on the same responses, with every
disagreement counted by corpus category and by who matched the intended
verdict (`metadata.truth`, set by the generator).

usage: math_compare.py CORPUS.jsonl ARL_OUT.jsonl SLIME.txt MATHVERIFY.txt
"""
import collections
import json
import sys

# Why the graders part ways, per category (observed on this corpus; see the
# examples printed next to each count).
WHY = {
    "hedge_or": "`a or b`: arl refuses hedges; math-verify accepts when a candidate equals the label (slime-style turns `or` into a list and rejects)",
    "hedge_list": "`a, b` for a single-number label: arl refuses; math-verify accepts if any element matches",
    "hedge_range": "`\\pm a`, ranges: arl refuses; math-verify accepts `\\pm a` as containing a",
    "hedge_multi_boxed": "two different boxed answers: arl refuses; baselines grade the last box only",
    "units": "units (`\\text{ meters}`, `\\mathrm{kg}`, `square units`): the slime-style normaliser strips only `\\text{ …}` and a unit list",
    "thousands": "`1,234,567`: read as a list by a grader that splits on commas",
    "x_equals": "`n = 5`: math-verify keeps the equation, slime strips short left-hand sides",
    "degrees": "`90 degrees` vs `90^\\circ`: unit word handling differs",
    "percent": "`50%`: percent handling differs (math-verify may read 50% as 0.5)",
    "sqrt": "LaTeX on an `Answer:` line outside `$…$` (`Answer: 7\\sqrt6`): math-verify does not parse it as LaTeX; arl does",
    "sqrt_near": "a rounded decimal of an irrational: math-verify compares with a float tolerance",
    "frac_near": "a rounded decimal of a fraction: accepted by float-tolerant comparison",
    "decimal_frac": "`0.25` vs `\\frac{1}{4}`: needs evaluation",
    "trailing_zero": "`12.00`: trailing zeros",
    "frac": "LaTeX on an `Answer:` line outside `$…$` (`Answer: \\dfrac{7}{15}`): math-verify does not parse it as LaTeX; arl does",
    "int_near": "a wrong number",
    "int": "a plain integer",
    "no_answer": "no boxed answer and no `Answer:` line: math-verify falls back to the last number in the text",
}


def main():
    corpus, arl, slime, mv = sys.argv[1:5]
    rows = [json.loads(l) for l in open(corpus)]
    arl_v = [1 if json.loads(l)["reward"] >= 0.5 else 0 for l in open(arl)]
    base = {"slime-style": [int(x) for x in open(slime).read().split()], "math-verify": [int(x) for x in open(mv).read().split()]}
    n = min(len(rows), *(len(v) for v in base.values()))
    rows, arl_v = rows[:n], arl_v[:n]
    truth = [r["metadata"]["truth"] for r in rows]
    cats = [r["metadata"]["category"] for r in rows]
    print(f"\nverdicts on the {n} responses every grader saw")
    print(f"{'grader':<13} {'accuracy vs intended':>21} {'agreement with arl':>19}")
    acc = lambda v: sum(int(a == b) for a, b in zip(v, truth)) / n
    print(f"{'arl math':<13} {acc(arl_v):>20.2%} {'':>19}")
    for name, v in base.items():
        agree = sum(int(a == b) for a, b in zip(v, arl_v[:len(v)])) / n
        print(f"{name:<13} {acc(v):>20.2%} {agree:>18.2%}")
    for name, v in base.items():
        by = collections.defaultdict(lambda: [0, 0, 0, None])
        for i in range(n):
            if v[i] != arl_v[i]:
                b = by[cats[i]]
                b[0] += 1
                if arl_v[i] == truth[i]:
                    b[1] += 1
                else:
                    b[2] += 1
                if b[3] is None:
                    b[3] = (rows[i]["response"].split("\n")[-1][-70:], rows[i]["label"], arl_v[i], v[i])
        total = sum(b[0] for b in by.values())
        print(f"\ndisagreements arl vs {name}: {total} of {n} ({total / n:.2%}), by category")
        print(f"  {'category':<18} {'count':>6} {'arl right':>10} {'base right':>11}  example (answer tail | label | arl | base) — why")
        for cat, b in sorted(by.items(), key=lambda kv: -kv[1][0]):
            ex = b[3]
            print(f"  {cat:<18} {b[0]:>6} {b[1]:>10} {b[2]:>11}  {ex[0]!r} | {ex[1]} | {ex[2]} | {ex[3]} — {WHY.get(cat, '')}")


if __name__ == "__main__":
    main()
