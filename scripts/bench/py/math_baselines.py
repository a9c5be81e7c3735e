"""Python baselines for scripts/bench/reward.sh: grade a corpus with
  * `slime`: a slime-style regex + sympy grader, re-written here after the
    pattern of slime's rm_hub math utilities (last `\\boxed{}`, Hendrycks
    `strip_string` normalisation and string equality, then a PRM800K-style
    sympy check: LaTeX turned into a sympy expression, `simplify(a - b) == 0`,
    with element-wise comparison of comma lists). It is a stand-in written for
    this benchmark, not slime's own file.
  * `math_verify`: Hugging Face's math-verify from PyPI (`parse` + `verify`).
Writes one verdict (0/1) per line and prints the grading time (s) to stderr
as `SECONDS <t>`; reading the file and importing are not timed.

usage: math_baselines.py slime|math_verify CORPUS.jsonl OUT.txt
"""
import json
import re
import sys
import time


# --------------------------------------------------------------- slime-style
def last_boxed_only_string(s):
    idx = s.rfind("\\boxed")
    if idx < 0:
        idx = s.rfind("\\fbox")
        if idx < 0:
            return None
    i, depth, right = idx, 0, None
    while i < len(s):
        if s[i] == "{":
            depth += 1
        elif s[i] == "}":
            depth -= 1
            if depth == 0:
                right = i
                break
        i += 1
    return None if right is None else s[idx:right + 1]


def remove_boxed(s):
    if s.startswith("\\boxed "):
        return s[len("\\boxed "):]
    left = "\\boxed{"
    if s.startswith(left) and s.endswith("}"):
        return s[len(left):-1]
    return None


def extract_answer(resp):
    b = last_boxed_only_string(resp)
    if b is not None:
        return remove_boxed(b)
    m = re.findall(r"(?i)answer:\s*(.*)", resp)
    return m[-1].strip() if m else None


def _fix_fracs(string):
    substrs = string.split("\\frac")
    new_str = substrs[0]
    if len(substrs) > 1:
        for substr in substrs[1:]:
            new_str += "\\frac"
            if substr and substr[0] == "{":
                new_str += substr
            else:
                if len(substr) < 2:
                    return string
                a, b = substr[0], substr[1]
                if b != "{":
                    new_str += "{" + a + "}{" + b + "}" + substr[2:]
                else:
                    new_str += "{" + a + "}" + b + substr[2:]
    return new_str


def _fix_a_slash_b(string):
    if len(string.split("/")) != 2:
        return string
    a, b = string.split("/")
    try:
        a, b = int(a), int(b)
        assert string == f"{a}/{b}"
        return "\\frac{" + str(a) + "}{" + str(b) + "}"
    except (ValueError, AssertionError):
        return string


def _remove_right_units(string):
    if "\\text{ " in string:
        return string.split("\\text{ ")[0]
    return string


def _fix_sqrt(string):
    if "\\sqrt" not in string:
        return string
    splits = string.split("\\sqrt")
    new_string = splits[0]
    for split in splits[1:]:
        if split and split[0] != "{":
            new_string += "\\sqrt{" + split[0] + "}" + split[1:]
        else:
            new_string += "\\sqrt" + split
    return new_string


def strip_string(string):
    string = string.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    string = string.replace("tfrac", "frac").replace("dfrac", "frac")
    string = string.replace("\\left", "").replace("\\right", "")
    string = string.replace("^{\\circ}", "").replace("^\\circ", "")
    string = string.replace("\\$", "")
    string = _remove_right_units(string)
    string = string.replace("\\%", "").replace("\%", "")
    string = string.replace(" .", " 0.").replace("{.", "{0.")
    if len(string) == 0:
        return string
    if string[0] == ".":
        string = "0" + string
    if len(string.split("=")) == 2 and len(string.split("=")[0]) <= 2:
        string = string.split("=")[1]
    string = _fix_sqrt(string)
    string = string.replace(" ", "")
    string = _fix_fracs(string)
    if string == "0.5":
        string = "\\frac{1}{2}"
    string = _fix_a_slash_b(string)
    return string


UNITS = ["degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month", "year",
         "foot", "feet", "inch", "yard", "square", "units", "unit", "kg", "dollars", "percent"]


def _normalize(expr):
    """PRM800K-style normalisation before the sympy check."""
    if expr is None:
        return None
    m = re.search(r"^\\text\{(?P<text>.+?)\}$", expr)
    if m is not None:
        expr = m.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for unit in UNITS:
        expr = re.sub(f"{unit}(es)?(s)? *(\\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if len(expr) > 0 and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(",\\\\! *", "", expr)
    if re.fullmatch(r"-?[\d,]*\.?\d+", expr.replace(" ", "")):
        expr = expr.replace(",", "")
    expr = re.sub(r"\\text\{(.*?)\}", r"\1", expr)
    expr = re.sub(r"\\mathrm\{(.*?)\}", r"\1", expr)
    expr = expr.replace("\\left", "").replace("\\right", "").replace("\\,", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    expr = expr.replace(" ", "").lower()
    if re.fullmatch(r"-?\d+\.0+", expr):
        expr = expr.split(".")[0]
    if len(expr) > 2 and "=" in expr and len(expr.split("=")[0]) <= 2:
        expr = expr.split("=")[1]
    return expr


def _latex_to_sympy_text(e):
    e = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", e)
    e = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", e)
    e = re.sub(r"\\sqrt(\d)", r"sqrt(\1)", e)
    e = e.replace("\\pi", "pi").replace("\\cdot", "*").replace("\\times", "*").replace("^", "**").replace("{", "(").replace("}", ")")
    return e


_SYMPY = None


def _sympy_parse(e):
    global _SYMPY
    if _SYMPY is None:
        import sympy
        from sympy.parsing import sympy_parser
        _SYMPY = (sympy, sympy_parser)
    sympy, sp = _SYMPY
    return sp.parse_expr(_latex_to_sympy_text(e), transformations=sp.standard_transformations + (sp.implicit_multiplication_application,))


def _is_equal_sympy(a, b):
    try:
        sympy = _SYMPY[0] if _SYMPY else __import__("sympy")
        d = _sympy_parse(a) - _sympy_parse(b)
        return sympy.simplify(d) == 0
    except Exception:
        return False


def _split_tuple(e):
    e = e.strip()
    if len(e) > 2 and e[0] in "([" and e[-1] in ")]" and "," in e:
        return [x.strip() for x in e[1:-1].split(",")]
    return [x.strip() for x in e.split(",")] if "," in e else [e]


def grade_sympy(given, gt):
    g, t = _normalize(given), _normalize(gt)
    if g is None or g == "":
        return False
    if g == t:
        return True
    ge, te = _split_tuple(g), _split_tuple(t)
    if len(ge) != len(te):
        return False
    for x, y in zip(ge, te):
        if x == y:
            continue
        try:
            if abs(float(x) - float(y)) < 1e-6 * max(1.0, abs(float(y))):
                continue
        except ValueError:
            pass
        if not _is_equal_sympy(x, y):
            return False
    return True


def grade_slime(resp, label):
    given = extract_answer(resp)
    if given is None:
        return False
    if strip_string(given) == strip_string(label):
        return True
    return grade_sympy(given, label)


# --------------------------------------------------------------- math-verify
def grade_math_verify_factory():
    from math_verify import parse, verify

    def g(resp, label):
        gold = parse("$" + label + "$")
        ans = parse(resp)
        return bool(verify(gold, ans))
    return g


def main():
    which, corpus, out = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = [json.loads(l) for l in open(corpus)]
    grade = grade_slime if which == "slime" else grade_math_verify_factory()
    if which == "slime":
        _sympy_parse("1")  # import sympy before the clock starts
    t0 = time.perf_counter()
    verdicts = []
    for r in rows:
        try:
            verdicts.append(1 if grade(r["response"], r["label"]) else 0)
        except Exception:
            verdicts.append(0)
    t = time.perf_counter() - t0
    with open(out, "w") as f:
        f.write("\n".join(map(str, verdicts)) + "\n")
    print(f"SECONDS {t:.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
