"""Equivalent-form rewrites of MATH-500's reference answers, for
scripts/bench/math500-agreement.sh: every form should be graded right by
both arl's grader and math-verify. Reads `arl-tasks import math500` records,
writes one JSONL line per rewrite: {prompt_id, form, response, label}.

Forms (each only where it applies to the label):
  boxed       the label itself, boxed
  dfrac       \\frac → \\dfrac
  decimal     a fraction p/q whose decimal terminates (≤ 6 places), as the decimal
  fraction    a terminating decimal as p/q
  lhs         `x = LABEL` (a short name on the left)
  text_unit   a number followed by `\\text{ units}`
  left_right  an interval or tuple with \\left( … \\right)
  spaces      the label with its spaces removed or doubled around commas
  set         a comma list as a set `\\{…\\}`
usage: math500_rewrites.py MATH500.jsonl OUT.jsonl"""
import json
import re
import sys
from fractions import Fraction

FRAC = re.compile(r"^(-?)\\[dt]?frac\{?(\d+)\}?\{?(\d+)\}?$")
INT = re.compile(r"^-?\d+$")
DEC = re.compile(r"^-?\d+\.\d+$")
THOUSANDS = re.compile(r"^(\\\$)?\d{1,3}(,(\\!)?\s*\d{3})+$")


def forms(label):
    l = label.strip()
    out = [("boxed", l)]
    if "\\frac" in l:
        out.append(("dfrac", l.replace("\\frac", "\\dfrac")))
    m = FRAC.match(l)
    if m:
        v = Fraction(int(m.group(2)), int(m.group(3)))
        if m.group(1):
            v = -v
        d = v.denominator
        while d % 2 == 0:
            d //= 2
        while d % 5 == 0:
            d //= 5
        if d == 1 and v.denominator != 1:
            s = f"{float(v):.6f}".rstrip("0").rstrip(".")
            if Fraction(s) == v:
                out.append(("decimal", s))
    if DEC.match(l):
        v = Fraction(l)
        out.append(("fraction", f"{'-' if v < 0 else ''}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"))
    if INT.match(l) or DEC.match(l) or m:
        out.append(("lhs", f"x = {l}"))
        out.append(("text_unit", f"{l}\\text{{ units}}"))
    if re.match(r"^[\(\[].*[\)\]]$", l) and "\\left" not in l:
        out.append(("left_right", f"\\left{l[0]}{l[1:-1]}\\right{l[-1]}"))
    # A number with thousands separators (`10,\\!080`, `58,500`) has no
    # spacing or set variant: `58, 500` would be two numbers.
    thousands = THOUSANDS.match(l)
    if not thousands and ", " in l:
        out.append(("spaces", l.replace(", ", ",")))
    elif not thousands and "," in l:
        out.append(("spaces", l.replace(",", ", ")))
    if "," in l and not thousands and not re.match(r"^[\(\[\\]", l) and not re.search(r"=|\\in|\\cup", l):
        out.append(("set", f"\\{{{l}\\}}"))
    return out


def main():
    recs = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
    with open(sys.argv[2], "w") as f:
        for r in recs:
            for form, text in forms(r["label"]):
                f.write(json.dumps({"prompt_id": r["prompt_id"], "form": form, "label": r["label"],
                                    "data_source": "math500",
                                    "response": f"The final answer is $\\boxed{{{text}}}$."}) + "\n")


main()
