"""Responses for agreement testing of `arl-reward --rm bfcl` against BFCL.

Reads arl prompt records made by `arl-tasks import bfcl:CATEGORY` (JSON Lines;
`label` = {category, functions (BFCL's function docs), ground_truth (BFCL's
possible answer; absent for irrelevance, live_irrelevance, live_relevance),
underscore_to_dot}) and writes, per mutation class, copies of records with a
`response` in the qwen25 tool-call format

    <tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>   (calls joined by \\n)
    ... then <|im_end|>

with `metadata.mutation` = the class and `prompt_id` suffixed `~CLASS~K`.
The verdict on each comes from BFCL itself (scripts/bench/py/bfcl_reference.py,
which runs BFCL's code from the unpacked bfcl-eval package; nothing of BFCL is
copied here); the expectations below only describe what each class is for.

The "gold" call of a ground-truth entry: the name (with `.` written `_` when
underscore_to_dot), and for each parameter the first allowed value that is
not "" (a parameter whose only allowed value is "" is left out, and so is
one that is missing from the function's schema where "" is allowed, since
BFCL rejects any argument not in the schema; a schema-required string
parameter whose only allowed value is "" is given as "", which BFCL's
string comparison accepts). A `dict`
parameter's allowed value is itself a map key -> allowed values, and a list
of dicts a list of such maps: these are made concrete the same way, one level
deep, as BFCL's dict_checker / list_dict_checker read them.

Classes (expected BFCL verdict in brackets: accept / reject / mixed):
  gold              the gold calls [accept]
  int_float         an integer written as a float (5 -> 5.0) for an integer
                    param or inside an integer array [reject]; an integral
                    float written as an int, or an int gold written as a float,
                    for a float param [accept: BFCL converts int -> float at
                    the top level]; inside a float array [reject unless the
                    allowed list is itself ints]; a number inside a dict value
                    [accept: compared with ==] -> mixed
  bool_int          0/1 for a bool param, true/false for an int/float param
                    [reject]; 0/1 for a bool inside a dict value [accept:
                    Python's 1 == True] -> mixed
  string_case       a string's letter case changed [accept]
  string_punct      one of BFCL's removed characters ` ,./-_*^` added or
                    removed, or ' and " swapped [accept]
  string_wrong      a word replaced by a different word [reject]
  missing_optional  a param whose allowed list holds "" left out [accept]
  missing_required  a param whose allowed list lacks "" left out [reject]
  extra_param       a parameter not in the schema, or (about 1 in 3, where
                    there is one) a schema parameter absent from the ground
                    truth [reject]
  wrong_value       number + 1, bool negated, another enum value or another
                    word, one list element changed [reject]
  list_order        an array/tuple argument's elements reordered [reject,
                    unless another allowed list matches]
  dict_value        in a dict param or a list of dicts: one value changed
                    [reject], an extra key [reject], a key removed [reject, or
                    accept when its allowed list holds ""] -> mixed
  tuple_list        an array/tuple argument given as its first element, or
                    as a nested list [reject]
  parallel_swap     the calls of a multi-call answer in reverse order,
                    parallel categories only [accept]
  extra_call        the gold plus a copy of its first call [reject]
  missing_call      one call of a multi-call answer dropped [reject]
  dotted_name       functions whose name holds `.`: the `_` form with
                    underscore_to_dot false [reject]; the `.` form with the
                    record copied to underscore_to_dot true (its `tools`
                    renamed too) [reject]; the `_` form with
                    underscore_to_dot true [accept] (the three in turn)
  malformed         a call's JSON broken, no <tool_call> tags, tags without
                    the newlines BFCL's regex needs, prose, `arguments` as a
                    JSON string, `parameters` for `arguments`, Python-style
                    quotes [reject in the ground-truth categories and
                    live_relevance; accept in irrelevance/live_irrelevance,
                    where a broken call is no call]
  irrelevance_call  irrelevance categories: a call to an offered function
                    with plausible arguments from its schema [reject for
                    irrelevance/live_irrelevance, accept for live_relevance]
  irrelevance_none  irrelevance categories: prose, an empty response, empty
                    or non-call JSON in tags [accept for irrelevance/
                    live_irrelevance, reject for live_relevance]

Usage:
  bfcl_mutations.py -i PROMPTS.jsonl [-i ...] -o OUT.jsonl
      [--per-class N] [--seed S] [--classes a,b,...]
--per-class: the most records per class (default 60; 0 = every record where
the class applies), taken round-robin across categories so that every
category where a class applies contributes. --seed: the output is a function
of the input and the seed (each class draws from random.Random(f"{seed}:{class}"),
so --classes does not change the records a class gets); the same input gives
byte-identical output. --classes: a subset, in the order above.
Stdlib only.
"""
import argparse
import copy
import json
import random
import sys

CLASSES = [
    "gold", "int_float", "bool_int", "string_case", "string_punct", "string_wrong",
    "missing_optional", "missing_required", "extra_param", "wrong_value",
    "list_order", "dict_value", "tuple_list", "parallel_swap", "extra_call",
    "missing_call", "dotted_name", "malformed", "irrelevance_call", "irrelevance_none",
]
GT_CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple",
                 "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"]
RELEVANCE_CATEGORIES = ["irrelevance", "live_irrelevance", "live_relevance"]

BFCL_REMOVED = " ,./-_*^"
WORDS = ["banana", "Zurich", "purple", "quantum", "Lisbon", "seventeen", "teapot",
         "Neptune", "marble", "orchid"]
EXTRA_PARAM_NAMES = ["verbose", "extra_option", "debug_mode", "timeout_seconds", "comment"]
END = "<|im_end|>"


# ---------------------------------------------------------------- helpers

def is_int(v):
    return type(v) is int


def is_num(v):
    return type(v) in (int, float)


def dumps(x):
    return json.dumps(x, ensure_ascii=False)


def render(calls, end=END):
    """qwen25 tool calls: [(name, args)] -> response text."""
    return "\n".join(
        "<tool_call>\n" + dumps({"name": n, "arguments": a}) + "\n</tool_call>"
        for n, a in calls) + end


def out_name(name, u2d):
    return name.replace(".", "_") if u2d else name


def first_allowed(allowed):
    for v in allowed:
        if v != "":
            return True, v
    return False, None


def concrete_dict(d):
    """A ground-truth dict (key -> allowed values) made concrete."""
    out = {}
    for k, allowed in d.items():
        if isinstance(allowed, list):
            ok, v = first_allowed(allowed)
            if ok:
                out[k] = copy.deepcopy(v)
        else:
            out[k] = copy.deepcopy(allowed)
    return out


class Entry:
    """One prompt record with its schema and gold calls worked out."""

    def __init__(self, rec):
        self.rec = rec
        self.label = rec.get("label") or {}
        meta = rec.get("metadata") or {}
        self.category = self.label.get("category") or meta.get("category")
        self.functions = self.label.get("functions") or []
        self.fdoc = {f.get("name"): f for f in self.functions}
        self.u2d = bool(self.label.get("underscore_to_dot"))
        self.gt = self.label.get("ground_truth")
        self.calls = []  # [(bfcl name, args, allowed map)]
        if self.gt is not None:
            for item in self.gt:
                (name, allowed_map), = item.items()
                args = {}
                props = self.props(name)
                required = self.required(name)
                for p, allowed in allowed_map.items():
                    ok, v = first_allowed(allowed)
                    if not ok:
                        if "" in allowed and p in required and \
                                (props.get(p) or {}).get("type") in ("string", "any"):
                            args[p] = ""  # required, only "" allowed: BFCL's string_checker takes ""
                        continue
                    if p not in props and "" in allowed:
                        continue  # not in the schema, may be omitted: BFCL would reject it
                    t, it = self.ptype(name, p)
                    if t == "dict" and isinstance(v, dict):
                        v = concrete_dict(v)
                    elif t in ("array", "tuple") and it == "dict" and isinstance(v, list):
                        v = [concrete_dict(x) if isinstance(x, dict) else copy.deepcopy(x) for x in v]
                    else:
                        v = copy.deepcopy(v)
                    args[p] = v
                self.calls.append((name, args, allowed_map))

    def props(self, fname):
        f = self.fdoc.get(fname) or {}
        return (f.get("parameters") or {}).get("properties") or {}

    def required(self, fname):
        f = self.fdoc.get(fname) or {}
        return (f.get("parameters") or {}).get("required") or []

    def ptype(self, fname, p):
        d = self.props(fname).get(p) or {}
        items = d.get("items") or {}
        return d.get("type"), items.get("type")

    def gold(self, u2d=None):
        u2d = self.u2d if u2d is None else u2d
        return [(out_name(n, u2d), copy.deepcopy(a)) for n, a, _ in self.calls]

    def slots(self):
        """(call index, param, type, item type, gold value) for every gold argument."""
        for ci, (n, a, _) in enumerate(self.calls):
            for p, v in a.items():
                t, it = self.ptype(n, p)
                yield ci, p, t, it, v


def with_arg(calls, ci, p, v):
    calls[ci][1][p] = v
    return calls


def string_targets(e):
    """Places holding a gold string BFCL compares as a string: (ci, param, path)
    where path is None (the value), an int (list element) or a str (dict key)."""
    out = []
    for ci, p, t, it, v in e.slots():
        if t in ("string", "any") and isinstance(v, str):
            out.append((ci, p, None, v))
        elif t in ("array", "tuple") and isinstance(v, list):
            out += [(ci, p, j, x) for j, x in enumerate(v) if isinstance(x, str)]
        elif t == "dict" and isinstance(v, dict):
            out += [(ci, p, k, x) for k, x in v.items() if isinstance(x, str)]
    return out


def set_at(calls, ci, p, path, new):
    if path is None:
        calls[ci][1][p] = new
    else:
        calls[ci][1][p][path] = new
    return calls


def word_swap(s, rng):
    words = s.split(" ")
    choices = [w for w in WORDS if w.lower() not in s.lower()]
    new = rng.choice(choices)
    if len(words) > 1:
        j = rng.randrange(len(words))
        words[j] = new
        return " ".join(words)
    return new


def plausible(schema, rng, depth=0):
    """A value fitting a BFCL parameter schema."""
    schema = schema or {}
    t = schema.get("type")
    if "enum" in schema and schema["enum"]:
        return rng.choice(schema["enum"])
    d = schema.get("default")
    if d is not None and (
            (t == "string" and isinstance(d, str) and d) or
            (t == "integer" and is_int(d)) or (t == "float" and is_num(d)) or
            (t == "boolean" and isinstance(d, bool))):
        return d
    if t == "integer":
        return rng.randint(1, 20)
    if t == "float":
        return round(rng.uniform(1, 100), 2)
    if t == "boolean":
        return rng.random() < 0.5
    if t in ("array", "tuple"):
        if depth > 2:
            return []
        return [plausible(schema.get("items"), rng, depth + 1)]
    if t == "dict":
        if depth > 2:
            return {}
        props = schema.get("properties") or {}
        req = schema.get("required") or list(props)[:1]
        return {k: plausible(props[k], rng, depth + 1) for k in req if k in props}
    return rng.choice(["New York", "example", "today", "John Doe", "status"])


def plausible_call(e, rng):
    if not e.functions:
        return None
    f = rng.choice(e.functions)
    params = f.get("parameters") or {}
    props = params.get("properties") or {}
    req = [p for p in (params.get("required") or []) if p in props]
    args = {}
    for p in props:
        if p in req or rng.random() < 0.25:
            args[p] = plausible(props[p], rng)
    return out_name(f["name"], e.u2d), args


# ---------------------------------------------------------------- mutations
# Each takes (entry, rng, k) and returns None (not applicable) or a dict with
# "response" and optionally "label" / "tools" replacements.

def m_gold(e, rng, k):
    if not e.calls:
        return None
    return {"response": render(e.gold())}


def m_int_float(e, rng, k):
    cands = []
    for ci, p, t, it, v in e.slots():
        if t == "integer" and is_int(v):
            cands.append((ci, p, float(v)))
        elif t == "float" and type(v) is float and v.is_integer() and abs(v) < 1e15:
            cands.append((ci, p, int(v)))
        elif t == "float" and is_int(v):
            cands.append((ci, p, float(v)))
        elif t in ("array", "tuple") and it == "integer" and isinstance(v, list) and any(is_int(x) for x in v):
            cands.append((ci, p, [float(x) if is_int(x) else x for x in v]))
        elif t in ("array", "tuple") and it == "float" and isinstance(v, list) and \
                any(type(x) is float and x.is_integer() for x in v):
            cands.append((ci, p, [int(x) if type(x) is float and x.is_integer() else x for x in v]))
        elif t == "dict" and isinstance(v, dict):
            for key, x in v.items():
                if is_int(x):
                    cands.append((ci, p, dict(v, **{key: float(x)})))
                elif type(x) is float and x.is_integer():
                    cands.append((ci, p, dict(v, **{key: int(x)})))
    if not cands:
        return None
    ci, p, new = rng.choice(cands)
    return {"response": render(with_arg(e.gold(), ci, p, new))}


def m_bool_int(e, rng, k):
    cands = []
    for ci, p, t, it, v in e.slots():
        if t == "boolean" and isinstance(v, bool):
            cands.append((ci, p, int(v)))
        elif t in ("integer", "float") and is_num(v):
            cands.append((ci, p, bool(v)))
        elif t in ("array", "tuple") and it == "boolean" and isinstance(v, list) and v:
            cands.append((ci, p, [int(x) if isinstance(x, bool) else x for x in v]))
        elif t == "dict" and isinstance(v, dict):
            for key, x in v.items():
                if isinstance(x, bool):
                    cands.append((ci, p, dict(v, **{key: int(x)})))
    if not cands:
        return None
    ci, p, new = rng.choice(cands)
    return {"response": render(with_arg(e.gold(), ci, p, new))}


def m_string_case(e, rng, k):
    cands = [c for c in string_targets(e) if c[3].lower() != c[3].upper()]
    if not cands:
        return None
    ci, p, path, s = rng.choice(cands)
    opts = [f(s) for f in (str.upper, str.lower, str.swapcase, str.title)]
    opts = [o for o in opts if o != s]
    if not opts:
        return None
    return {"response": render(set_at(e.gold(), ci, p, path, rng.choice(opts)))}


def m_string_punct(e, rng, k):
    cands = string_targets(e)
    if not cands:
        return None
    ci, p, path, s = rng.choice(cands)
    ops = ["insert"]
    if any(ch in BFCL_REMOVED for ch in s):
        ops.append("remove")
    if "'" in s or '"' in s:
        ops += ["quotes", "quotes"]
    op = rng.choice(ops)
    if op == "insert":
        j = rng.randrange(len(s) + 1)
        new = s[:j] + rng.choice(BFCL_REMOVED) + s[j:]
    elif op == "remove":
        idx = [j for j, ch in enumerate(s) if ch in BFCL_REMOVED]
        j = rng.choice(idx)
        new = s[:j] + s[j + 1:]
    else:
        new = s.translate(str.maketrans({"'": '"', '"': "'"}))
    return {"response": render(set_at(e.gold(), ci, p, path, new))}


def m_string_wrong(e, rng, k):
    cands = [c for c in string_targets(e) if c[3].strip()]
    if not cands:
        return None
    ci, p, path, s = rng.choice(cands)
    return {"response": render(set_at(e.gold(), ci, p, path, word_swap(s, rng)))}


def without_one(e, rng, optional):
    """The gold with one argument left out: one whose allowed values hold
    "" (optional), or one whose do not."""
    cands = [(ci, p) for ci, (n, a, am) in enumerate(e.calls) for p in a if ("" in am[p]) == optional]
    if not cands:
        return None
    ci, p = rng.choice(cands)
    calls = e.gold()
    del calls[ci][1][p]
    return {"response": render(calls)}


def m_missing_optional(e, rng, k):
    return without_one(e, rng, True)


def m_missing_required(e, rng, k):
    return without_one(e, rng, False)


def m_extra_param(e, rng, k):
    if not e.calls:
        return None
    ci = rng.randrange(len(e.calls))
    n, a, am = e.calls[ci]
    props = e.props(n)
    in_schema = [p for p in props if p not in am]
    calls = e.gold()
    if in_schema and rng.random() < 0.34:
        p = rng.choice(in_schema)
        calls[ci][1][p] = plausible(props[p], rng)
    else:
        names = [x for x in EXTRA_PARAM_NAMES if x not in props]
        calls[ci][1][rng.choice(names)] = rng.choice([True, 3, "yes"])
    return {"response": render(calls)}


def other_value(v, schema, allowed, rng):
    """A value differing from v (None if none is found)."""
    if isinstance(v, bool):
        return not v
    if is_int(v):
        return v + 1
    if type(v) is float:
        return v + 1.0
    if isinstance(v, str):
        enum = [x for x in (schema or {}).get("enum") or [] if isinstance(x, str)]
        taken = {str(x).lower() for x in allowed if isinstance(x, str)}
        alts = [x for x in enum if x.lower() not in taken]
        if alts:
            return rng.choice(alts)
        return word_swap(v, rng) if v.strip() else rng.choice(WORDS)
    if isinstance(v, list) and v:
        js = [j for j, x in enumerate(v) if isinstance(x, (bool, int, float, str))]
        if not js:
            return None
        j = rng.choice(js)
        nv = other_value(v[j], None, [], rng)
        if nv is None:
            return None
        out = list(v)
        out[j] = nv
        return out
    return None


def m_wrong_value(e, rng, k):
    cands = []
    for ci, p, t, it, v in e.slots():
        if t == "dict" or (t in ("array", "tuple") and it == "dict"):
            continue  # dict_value's business
        if v is None or (isinstance(v, list) and not v):
            continue
        cands.append((ci, p, v))
    rng.shuffle(cands)
    for ci, p, v in cands:
        n = e.calls[ci][0]
        new = other_value(v, e.props(n).get(p), e.calls[ci][2][p], rng)
        if new is not None and new != v:
            return {"response": render(with_arg(e.gold(), ci, p, new))}
    return None


def m_list_order(e, rng, k):
    cands = [(ci, p, v) for ci, p, t, it, v in e.slots()
             if t in ("array", "tuple") and isinstance(v, list) and len(v) >= 2
             and len({dumps(x) for x in v}) >= 2]
    if not cands:
        return None
    ci, p, v = rng.choice(cands)
    new = list(v)
    for _ in range(20):
        rng.shuffle(new)
        if new != v:
            break
    if new == v:
        new = list(reversed(v))
    return {"response": render(with_arg(e.gold(), ci, p, new))}


def dict_variant(d, rng):
    ops = ["extra"]
    changeable = [key for key, x in d.items()
                  if isinstance(x, (bool, int, float, str)) or (isinstance(x, list) and x)]
    if changeable:
        ops += ["change", "change"]
    if d:
        ops.append("remove")
    op = rng.choice(ops)
    d = copy.deepcopy(d)
    if op == "extra":
        d[rng.choice(["note", "extra_key", "priority"])] = rng.choice(["x", 1, True])
    elif op == "remove":
        del d[rng.choice(list(d))]
    else:
        key = rng.choice(changeable)
        nv = other_value(d[key], None, [], rng)
        if nv is None:
            del d[key]
        else:
            d[key] = nv
    return d


def m_dict_value(e, rng, k):
    cands = []
    for ci, p, t, it, v in e.slots():
        if t == "dict" and isinstance(v, dict):
            cands.append((ci, p, None))
        elif t in ("array", "tuple") and it == "dict" and isinstance(v, list):
            cands += [(ci, p, j) for j, x in enumerate(v) if isinstance(x, dict)]
    if not cands:
        return None
    ci, p, j = rng.choice(cands)
    calls = e.gold()
    if j is None:
        calls[ci][1][p] = dict_variant(calls[ci][1][p], rng)
    else:
        calls[ci][1][p][j] = dict_variant(calls[ci][1][p][j], rng)
    return {"response": render(calls)}


def m_tuple_list(e, rng, k):
    cands = [(ci, p, v) for ci, p, t, it, v in e.slots()
             if t in ("array", "tuple") and isinstance(v, list) and v]
    if not cands:
        return None
    ci, p, v = rng.choice(cands)
    new = copy.deepcopy(v[0]) if rng.random() < 0.5 else [copy.deepcopy(v)]
    return {"response": render(with_arg(e.gold(), ci, p, new))}


def m_parallel_swap(e, rng, k):
    if "parallel" not in (e.category or "") or len(e.calls) < 2:
        return None
    calls = e.gold()
    rev = list(reversed(calls))
    if dumps(rev) == dumps(calls):
        return None
    return {"response": render(rev)}


def m_extra_call(e, rng, k):
    if not e.calls:
        return None
    calls = e.gold()
    return {"response": render(calls + [copy.deepcopy(calls[0])])}


def m_missing_call(e, rng, k):
    if len(e.calls) < 2:
        return None
    calls = e.gold()
    del calls[rng.randrange(len(calls))]
    return {"response": render(calls)}


def m_dotted_name(e, rng, k):
    if not any("." in n for n, _, _ in e.calls):
        return None
    variant = k % 3
    if variant == 0:  # dots expected, underscores given
        label = dict(e.label, underscore_to_dot=False)
        return {"response": render(e.gold(u2d=True)), "label": label,
                "tools": rename_tools(e.rec.get("tools"), False)}
    label = dict(e.label, underscore_to_dot=True)
    tools = rename_tools(e.rec.get("tools"), True)
    if variant == 1:  # underscores expected, dots given
        return {"response": render(e.gold(u2d=False)), "label": label, "tools": tools}
    return {"response": render(e.gold(u2d=True)), "label": label, "tools": tools}


def rename_tools(tools, u2d):
    """The record's tools with the names as offered under underscore_to_dot
    (`.` -> `_`), or as they were (names restored from label.functions is
    not possible in general, so u2d=False leaves them as they are)."""
    if tools is None or not u2d:
        return tools
    tools = copy.deepcopy(tools)
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            fn["name"] = fn["name"].replace(".", "_")
    return tools


def m_malformed(e, rng, k):
    if e.calls:
        calls = e.gold()
    else:
        c = plausible_call(e, rng)
        if c is None:
            return None
        calls = [c]
    variant = k % 7
    if variant == 0:  # one call's JSON broken
        j = rng.randrange(len(calls))
        parts = []
        for i, (n, a) in enumerate(calls):
            body = dumps({"name": n, "arguments": a})
            if i == j:
                body = body[:-1]
            parts.append("<tool_call>\n" + body + "\n</tool_call>")
        return {"response": "\n".join(parts) + END}
    if variant == 1:  # no tags
        return {"response": "\n".join(dumps({"name": n, "arguments": a}) for n, a in calls) + END}
    if variant == 2:  # tags without the newlines
        return {"response": "".join("<tool_call>" + dumps({"name": n, "arguments": a}) + "</tool_call>"
                                    for n, a in calls) + END}
    if variant == 3:  # prose
        n, a = calls[0]
        return {"response": f"I will call {n} with " +
                ", ".join(f"{p}={dumps(v)}" for p, v in a.items()) + "." + END}
    if variant == 4:  # arguments as a JSON string
        return {"response": "\n".join(
            "<tool_call>\n" + dumps({"name": n, "arguments": dumps(a)}) + "\n</tool_call>"
            for n, a in calls) + END}
    if variant == 5:  # "parameters" instead of "arguments"
        return {"response": "\n".join(
            "<tool_call>\n" + dumps({"name": n, "parameters": a}) + "\n</tool_call>"
            for n, a in calls) + END}
    # Python-style quotes
    return {"response": "\n".join(
        "<tool_call>\n" + repr({"name": n, "arguments": a}) + "\n</tool_call>"
        for n, a in calls) + END}


def m_irrelevance_call(e, rng, k):
    if e.category not in RELEVANCE_CATEGORIES:
        return None
    c = plausible_call(e, rng)
    if c is None:
        return None
    return {"response": render([c])}


def m_irrelevance_none(e, rng, k):
    if e.category not in RELEVANCE_CATEGORIES:
        return None
    variant = k % 6
    fname = e.functions[0]["name"] if e.functions else "the tool"
    if variant == 0:
        return {"response": "I'm sorry, none of the available functions can help with that request." + END}
    if variant == 1:
        return {"response": f"The function {fname} does not fit this question, so I will answer "
                            f"directly: I don't have enough information." + END}
    if variant == 2:
        return {"response": END}
    if variant == 3:
        return {"response": "<tool_call>\n\n</tool_call>" + END}
    if variant == 4:
        return {"response": "<tool_call>\n{}\n</tool_call>" + END}
    return {"response": "<tool_call>\n[]\n</tool_call>" + END}


MUTATIONS = {c: globals()["m_" + c] for c in CLASSES}


# ---------------------------------------------------------------- records

def generate(records, classes, per_class, seed, max_passes=3):
    """Per class: round-robin over the categories (each a shuffled queue of
    its records), one record from each in turn, a record that the class does
    not apply to skipped, until the cap. Where one pass over the records
    gives fewer than the cap, further passes (at most max_passes in all)
    draw other variants from the same records (an identical response to the
    same prompt is not repeated). per_class <= 0: one pass, no cap."""
    entries = [Entry(r) for r in records]
    cat_order = []
    by_cat = {}
    for i, e in enumerate(entries):
        if e.category not in by_cat:
            by_cat[e.category] = []
            cat_order.append(e.category)
        by_cat[e.category].append(i)
    capped = per_class > 0
    out = []
    counts = {}
    for cls in classes:
        fn = MUTATIONS[cls]
        rng = random.Random(f"{seed}:{cls}")
        k = 0
        per_cat = {}
        seen = set()
        for _ in range(max_passes if capped else 1):
            k_pass = k
            queues = []
            for cat in cat_order:
                idx = list(by_cat[cat])
                rng.shuffle(idx)
                queues.append([cat, idx, 0])
            while queues and not (capped and k >= per_class):
                nxt = []
                for q in queues:
                    if capped and k >= per_class:
                        break
                    cat, idx, pos = q
                    made = None
                    while pos < len(idx) and made is None:
                        e = entries[idx[pos]]
                        pos += 1
                        m = fn(e, rng, k)
                        if m is not None:
                            key = (idx[pos - 1], m["response"], dumps(m.get("label")))
                            if key not in seen:
                                seen.add(key)
                                made = (e, m)
                    q[2] = pos
                    if made is None:
                        continue  # this category is exhausted for the class
                    e, m = made
                    rec = copy.deepcopy(e.rec)
                    for key in ("response", "reward", "reward_detail"):
                        rec.pop(key, None)
                    rec["prompt_id"] = f"{e.rec.get('prompt_id')}~{cls}~{k}"
                    if "label" in m:
                        rec["label"] = m["label"]
                    if "tools" in m and m["tools"] is not None:
                        rec["tools"] = m["tools"]
                    meta = dict(rec.get("metadata") or {})
                    meta["mutation"] = cls
                    rec["metadata"] = meta
                    rec["response"] = m["response"]
                    out.append(rec)
                    per_cat[cat] = per_cat.get(cat, 0) + 1
                    k += 1
                    if pos < len(idx):
                        nxt.append(q)
                queues = nxt
            if (capped and k >= per_class) or k == k_pass:
                break
        counts[cls] = (k, per_cat)
    return out, counts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-i", dest="inputs", action="append", default=[],
                    help="arl prompt records (JSONL); repeatable")
    ap.add_argument("-o", dest="output", required=True)
    ap.add_argument("--per-class", type=int, default=60)
    ap.add_argument("--seed", default="0")
    ap.add_argument("--classes", help="comma list (default: all)")
    args = ap.parse_args(argv)

    records = []
    for path in args.inputs:
        with open(path, encoding="utf-8") as f:
            records += [json.loads(l) for l in f if l.strip()]
    if not records:
        ap.error("no records: give -i PROMPTS.jsonl (arl-tasks import bfcl:CATEGORY)")
    classes = CLASSES
    if args.classes:
        want = args.classes.split(",")
        bad = [c for c in want if c not in CLASSES]
        if bad:
            ap.error(f"unknown classes: {bad}")
        classes = [c for c in CLASSES if c in want]

    out, counts = generate(records, classes, args.per_class, args.seed)
    with open(args.output, "w", encoding="utf-8") as f:
        for r in out:
            f.write(dumps(r) + "\n")
    for cls in classes:
        n, per_cat = counts[cls]
        print(f"{cls:<18} {n:5d}  " + " ".join(f"{c}:{m}" for c, m in per_cat.items()),
              file=sys.stderr)
    print(f"{len(out)} records from {len(records)} prompts -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
