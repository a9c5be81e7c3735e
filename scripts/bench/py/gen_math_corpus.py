"""Generates the math-grading benchmark corpus: N responses with labels, each
tagged with a category and the intended verdict (`truth`), in the variety of
crates/arl-reward/tests/reward_math.rs: boxed and `Answer:` forms, fractions, units, degrees,
percents, thousands separators, expressions, near misses, hedges.

usage: gen_math_corpus.py N OUT.jsonl [SEED]
"""
import json
import random
import sys
from fractions import Fraction

FILLER = [
    "Let's think step by step.", "First, we simplify the expression.", "We substitute the values.",
    "Notice that the terms cancel.", "Multiplying both sides gives the result.", "Checking the arithmetic again.",
    "So we have the following equation.", "This is a standard identity.", "Therefore we conclude.",
]


def filler(r):
    return " ".join(r.choice(FILLER) for _ in range(r.randint(2, 12)))


def tex_frac(f, cmd="\\frac"):
    s = "-" if f < 0 else ""
    return f"{s}{cmd}{{{abs(f.numerator)}}}{{{f.denominator}}}"


def near_int(r, v):
    return r.choice([v + 1, v - 1, v * 10, v + 10, int(str(abs(v))[::-1]) * (1 if v >= 0 else -1) if abs(v) > 9 and str(abs(v))[::-1] != str(abs(v)) else v + 2])


def make(r):
    cat = r.choice(CATS)
    v = r.randint(-999, 9999)
    f = Fraction(r.randint(1, 40), r.randint(2, 40))
    while f.denominator == 1:
        f = Fraction(r.randint(1, 40), r.randint(2, 40))
    wrap = r.choice(["boxed", "boxed_dollar", "answer"])
    label = str(v)
    truth = 1
    ans = str(v)
    if cat == "int":
        pass
    elif cat == "int_near":
        ans, truth = str(near_int(r, v)), 0
    elif cat == "frac":
        label = tex_frac(f)
        ans = r.choice([tex_frac(f, "\\dfrac"), f"{f.numerator}/{f.denominator}", f"\\frac{{{f.numerator * 3}}}{{{f.denominator * 3}}}", f"\\left(\\frac{{{f.numerator}}}{{{f.denominator}}}\\right)"])
    elif cat == "frac_near":
        label = tex_frac(f)
        d = f.denominator
        while d % 2 == 0:
            d //= 2
        while d % 5 == 0:
            d //= 5
        # A rounded decimal is a near miss only when the fraction does not terminate.
        rounded = f"{float(f):.3f}" if d != 1 else f"{float(f) + 0.01:.3f}"
        ans, truth = r.choice([rounded, tex_frac(Fraction(f.denominator, f.numerator)) if f.numerator != f.denominator else "0", f"\\frac{{{f.numerator + 1}}}{{{f.denominator}}}"]), 0
    elif cat == "decimal_frac":
        f = Fraction(r.choice([1, 3, 5, 7, 9]), r.choice([2, 4, 5, 8, 10, 20, 25]))
        label = tex_frac(f) if f.denominator != 1 else str(f.numerator)
        ans = str(float(f))
    elif cat == "units":
        v = abs(v) + 1
        label = str(v)
        ans = r.choice([f"{v} cm", f"{v}\\text{{ cm}}", f"{v} \\text{{meters}}", f"{v} square units", f"{v}\\,\\mathrm{{kg}}"])
    elif cat == "degrees":
        v = r.randint(1, 359)
        label = str(v)
        ans = r.choice([f"{v}^\\circ", f"{v}^{{\\circ}}", f"{v} degrees"])
    elif cat == "percent":
        v = r.randint(1, 100)
        label = str(v)
        ans = r.choice([f"{v}\\%", f"{v}%"])
    elif cat == "thousands":
        v = r.randint(1000, 9_999_999)
        label = str(v)
        ans = f"{v:,}"
    elif cat == "trailing_zero":
        ans = r.choice([f"{v}.0", f"{v}.00"])
    elif cat == "x_equals":
        ans = f"{r.choice(['x', 'n', 'y'])} = {v}"
    elif cat == "sqrt":
        a, b = r.randint(2, 9), r.choice([2, 3, 5, 6, 7])
        label = f"{a}\\sqrt{{{b}}}"
        ans = r.choice([f"\\sqrt{{{a * a * b}}}", f"{a} \\sqrt{{{b}}}", f"{a}\\sqrt{b}"])
    elif cat == "sqrt_near":
        a, b = r.randint(2, 9), r.choice([2, 3, 5, 6, 7])
        label = f"{a}\\sqrt{{{b}}}"
        ans, truth = r.choice([f"{a * b ** 0.5:.2f}", f"{a}\\sqrt{{{b + 1}}}", f"{a + 1}\\sqrt{{{b}}}"]), 0
    elif cat == "hedge_or":
        w = near_int(r, v)
        ans, truth = r.choice([f"{w} \\text{{ or }} {v}", f"{v} or {w}"]), 0
    elif cat == "hedge_list":
        w = near_int(r, v)
        ans, truth = f"{w}, {v}", 0
    elif cat == "hedge_range":
        ans, truth = r.choice([f"{v - 1} \\le x \\le {v + 1}", f"{v - 2} to {v + 2}", f"\\pm {abs(v)}" if v != 0 else "\\pm 1"]), 0
    elif cat == "hedge_multi_boxed":
        w = near_int(r, v)
        text = f"{filler(r)} It is either $\\boxed{{{w}}}$ or $\\boxed{{{v}}}$."
        return {"category": cat, "truth": 0, "label": label, "response": text}
    elif cat == "no_answer":
        return {"category": cat, "truth": 0, "label": label, "response": filler(r) + f" The value is close to {v}."}
    if wrap == "boxed":
        resp = f"{filler(r)}\n\\boxed{{{ans}}}"
    elif wrap == "boxed_dollar":
        resp = f"{filler(r)} So the final answer is $\\boxed{{{ans}}}$."
    else:
        resp = f"{filler(r)}\nAnswer: {ans}"
    return {"category": cat, "truth": truth, "label": label, "response": resp}


CATS = ["int", "int", "int_near", "int_near", "frac", "frac_near", "decimal_frac", "units", "degrees", "percent", "thousands",
        "trailing_zero", "x_equals", "sqrt", "sqrt_near", "hedge_or", "hedge_list", "hedge_range", "hedge_multi_boxed", "no_answer"]


def main():
    n, out = int(sys.argv[1]), sys.argv[2]
    r = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    with open(out, "w") as fo:
        for i in range(n):
            rec = make(r)
            fo.write(json.dumps({"prompt_id": f"bench-{i}", "response": rec["response"], "label": rec["label"],
                                 "metadata": {"category": rec["category"], "truth": rec["truth"]}}) + "\n")


if __name__ == "__main__":
    main()
