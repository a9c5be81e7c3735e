"""BFCL's own verdict on arl-scored records: the reference for `arl-reward --rm bfcl`.

For every scored arl record (JSON Lines: `label` as written by
`arl-tasks import bfcl:CATEGORY`, plus `response`, `reward`, `reward_detail`)
this runs the Berkeley Function-Calling Leaderboard's evaluation code on the
record's raw `response` and compares its verdict with arl's (reward >= 0.5).

BFCL's code is read from the unpacked `bfcl-eval` package at run time, never
copied here:
  * `bfcl_eval.eval_checker.ast_eval.ast_checker` is imported as is, with one
    stub: `bfcl_eval.constants.model_config` (which imports every vendor SDK)
    is replaced in `sys.modules` by a module whose MODEL_CONFIG_MAPPING holds
    two fake models, "arl/dot" (underscore_to_dot=False) and "arl/underscore"
    (underscore_to_dot=True); they are passed as "arl_dot" / "arl_underscore"
    because BFCL's convert_func_name turns "_" into "/" before the lookup.
    Everything else it pulls (`constants.enums`, `constants.type_mappings`,
    the Java/JavaScript type converters) imports as is.
  * The decoder and the per-entry flow live in modules that import packages
    that are not installed (openai, overrides, filelock, tqdm, dotenv, ...),
    so their function definitions are extracted from the package's source
    with `ast` and exec'd (compiled under the real file name, so tracebacks
    point into the package): `QwenFCHandler.decode_ast` and
    `QwenFCHandler._extract_tool_calls` (model_handler/local_inference/
    qwen_fc.py), `is_function_calling_format_output` and `is_empty_output`
    (utils.py), `_evaluate_single_ast_entry` and
    `_evaluate_single_relevance_entry` (eval_checker/eval_runner.py).
    The `@override` decorator of qwen_fc.py is given as the identity and
    `BaseHandler` (an annotation only) as `object`.
Categories with ground truth go through `_evaluate_single_ast_entry`
(Language.PYTHON, ReturnFormat.PYTHON, prompt_entry={"function":
label.functions}, possible answer = label.ground_truth); irrelevance,
live_irrelevance and live_relevance through
`_evaluate_single_relevance_entry`. An exception raised by BFCL's code counts
as bfcl=False with error_type `reference_exception:<ExcName>`; a category
outside these 11 as bfcl=False with `reference_unsupported_category:<cat>`.
The response first goes through `QwenFCHandler._parse_query_response_prompting`
(extracted the same way, given a stand-in completion object holding the
text), which is what BFCL stores of a completion: the text after the last
`</think>`. Trailing `<|im_end|>` and the like are ignored by BFCL's
`<tool_call>\\n(.*?)\\n</tool_call>` regex.

Usage:
  bfcl_reference.py -i SCORED.jsonl [-i MORE.jsonl ...] [--package DIR]
      [-o VERDICTS.jsonl] [--summary SUMMARY.json]
      [--min-overall F] [--min-class F]
--package: the directory holding `bfcl_eval/` (default $ARL_BENCHMARKS/
bfcl-eval, else $ARL_CACHE/benchmarks/bfcl-eval, else
~/.cache/arl/benchmarks/bfcl-eval). -o: one line per record {prompt_id, class
(metadata.mutation, or "real"), arl, bfcl, bfcl_error_type, agree}.
--summary: per class and per category {n, scored, agree, arl_pass,
bfcl_pass, agree_share}, overall, and every disagreement (prompt_id, class,
response, arl's reward_detail, BFCL's error type and error). Exit 1 when the
overall agreement is below --min-overall or some class (with >= 1 scored
record) is below --min-class (defaults 0: never; a threshold with no scored
record at all fails too).
A record without `reward` is checked too (arl and agree are null, and it is
left out of the agreement shares), so the script also gives BFCL's verdicts
on unscored records.
Stdlib only; run it with the project's python
(~/.cache/arl/venv-torch-2.13.0/bin/python).
"""
import argparse
import ast
import json
import os
import re
import sys
import time
import types
from collections import OrderedDict

AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple",
                  "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")


def default_package():
    if os.environ.get("ARL_BENCHMARKS"):
        return os.path.join(os.environ["ARL_BENCHMARKS"], "bfcl-eval")
    if os.environ.get("ARL_CACHE"):
        return os.path.join(os.environ["ARL_CACHE"], "benchmarks", "bfcl-eval")
    return os.path.expanduser("~/.cache/arl/benchmarks/bfcl-eval")


def _extract(path, names, class_name=None):
    """The definitions `names` from the source file `path` (methods of
    `class_name` when given, wrapped in a bare class of that name), as a
    compiled module code object whose line numbers are the file's own."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    body = tree.body
    if class_name is not None:
        cls = [n for n in body if isinstance(n, ast.ClassDef) and n.name == class_name]
        if len(cls) != 1:
            raise SystemExit(f"bfcl_reference: class {class_name} not found in {path}")
        body = cls[0].body
    found = OrderedDict()
    for n in body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in names:
            found[n.name] = n
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"bfcl_reference: {missing} not found in {path}")
    defs = [found[n] for n in names]
    if class_name is not None:
        # A class with the same name, no bases, only the extracted methods.
        wrapper = ast.ClassDef(name=class_name, bases=[], keywords=[], body=defs,
                               decorator_list=[])
        if "type_params" in ast.ClassDef._fields:
            wrapper.type_params = []
        ast.copy_location(wrapper, cls[0])
        defs = [wrapper]
    mod = ast.Module(body=defs, type_ignores=[])
    ast.fix_missing_locations(mod)
    return compile(mod, path, "exec")


class Bfcl:
    """BFCL's evaluation code, loaded from the unpacked package."""

    def __init__(self, package):
        package = os.path.abspath(package)
        root = os.path.join(package, "bfcl_eval")
        if not os.path.isdir(root):
            raise SystemExit(f"bfcl_reference: no bfcl_eval/ under {package}")
        self.package = package
        if package not in sys.path:
            sys.path.insert(0, package)

        # Stub: bfcl_eval.constants.model_config imports every vendor SDK.
        # ast_checker only reads MODEL_CONFIG_MAPPING[name].underscore_to_dot.
        stub = types.ModuleType("bfcl_eval.constants.model_config")
        stub.__file__ = "<arl stub for bfcl_eval.constants.model_config>"
        stub.MODEL_CONFIG_MAPPING = {
            "arl/dot": types.SimpleNamespace(
                model_name="arl/dot", is_fc_model=True, underscore_to_dot=False),
            "arl/underscore": types.SimpleNamespace(
                model_name="arl/underscore", is_fc_model=True, underscore_to_dot=True),
        }
        sys.modules["bfcl_eval.constants.model_config"] = stub
        import bfcl_eval.constants  # noqa: E402  (the real package)
        bfcl_eval.constants.model_config = stub
        from bfcl_eval.constants.enums import Language, ReturnFormat
        from bfcl_eval.eval_checker.ast_eval import ast_checker as ast_checker_mod

        self.Language = Language
        self.ReturnFormat = ReturnFormat
        self.ast_checker_mod = ast_checker_mod

        ns = {
            "__name__": "arl_bfcl_extracted",
            "json": json,
            "re": re,
            "Any": object,
            "override": lambda f: f,  # overrides.override: identity
            "BaseHandler": object,  # annotation only
            "Language": Language,
            "ReturnFormat": ReturnFormat,
            "ast_checker": ast_checker_mod.ast_checker,
        }
        exec(_extract(os.path.join(root, "utils.py"),
                      ["is_function_calling_format_output", "is_empty_output"]), ns)
        exec(_extract(os.path.join(root, "model_handler", "local_inference", "qwen_fc.py"),
                      ["decode_ast", "_extract_tool_calls", "_parse_query_response_prompting"],
                      class_name="QwenFCHandler"), ns)
        exec(_extract(os.path.join(root, "eval_checker", "eval_runner.py"),
                      ["_evaluate_single_relevance_entry", "_evaluate_single_ast_entry"]), ns)
        self.ns = ns
        self.handler = ns["QwenFCHandler"]()
        self.eval_ast = ns["_evaluate_single_ast_entry"]
        self.eval_relevance = ns["_evaluate_single_relevance_entry"]

    def check(self, record):
        """(valid, error_type, error) for one record."""
        label = record.get("label") or {}
        meta = record.get("metadata") or {}
        category = label.get("category") or meta.get("category")
        response = record.get("response")
        if response is None:
            response = ""
        # What BFCL stores of a completion: its Qwen handler's own parsing
        # (the text after the last `</think>`), given a stand-in completion.
        completion = types.SimpleNamespace(choices=[types.SimpleNamespace(text=response)],
                                           usage=types.SimpleNamespace(prompt_tokens=0, completion_tokens=0))
        response = self.handler._parse_query_response_prompting(completion)["model_responses"]
        index = meta.get("id") or record.get("prompt_id")
        model_name = "arl_underscore" if label.get("underscore_to_dot") else "arl_dot"
        prompt_entry = {"id": index, "function": label.get("functions") or []}
        if category not in AST_CATEGORIES and category not in RELEVANCE_CATEGORIES:
            return False, f"reference_unsupported_category:{category}", None
        try:
            if category in RELEVANCE_CATEGORIES:
                res = self.eval_relevance(self.handler, index, response, prompt_entry,
                                          model_name, category)
            else:
                if "ground_truth" not in label:
                    raise KeyError(f"label.ground_truth (category {category!r})")
                res = self.eval_ast(self.handler, index, response, label["ground_truth"],
                                    prompt_entry, model_name, category,
                                    language=self.Language.PYTHON,
                                    return_format=self.ReturnFormat.PYTHON,
                                    has_tool_call_tag=False)
        except Exception as e:  # BFCL's code raised on this entry
            return False, f"reference_exception:{type(e).__name__}", f"{type(e).__name__}: {e}"
        valid = bool(res.get("valid"))
        return valid, (None if valid else res.get("error_type")), (None if valid else res.get("error"))


def _jsonable(x):
    try:
        json.dumps(x)
        return x
    except (TypeError, ValueError):
        return repr(x)


def _counters():
    return {"n": 0, "scored": 0, "agree": 0, "arl_pass": 0, "bfcl_pass": 0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--package", default=default_package(),
                    help="directory holding bfcl_eval/ (default: %(default)s)")
    ap.add_argument("-i", dest="inputs", action="append", required=True,
                    help="scored arl records (JSONL); repeatable")
    ap.add_argument("-o", dest="output", help="per-record verdicts (JSONL)")
    ap.add_argument("--summary", help="summary JSON")
    ap.add_argument("--min-overall", type=float, default=0.0)
    ap.add_argument("--min-class", type=float, default=0.0)
    args = ap.parse_args(argv)

    t0 = time.time()
    bfcl = Bfcl(args.package)
    t_load = time.time() - t0

    stats = OrderedDict()  # class -> counters
    cat_stats = OrderedDict()  # label.category -> counters (summary only)
    disagreements = []
    out = open(args.output, "w", encoding="utf-8") if args.output else None
    n_total = 0
    for path in args.inputs:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                rec = json.loads(line)
                n_total += 1
                meta = rec.get("metadata") or {}
                cls = meta.get("mutation") or "real"
                valid, etype, err = bfcl.check(rec)
                reward = rec.get("reward")
                arl = None if reward is None else bool(float(reward) >= 0.5)
                agree = None if arl is None else (arl == valid)
                cat = (rec.get("label") or {}).get("category") or meta.get("category")
                for s in (stats.setdefault(cls, _counters()),
                          cat_stats.setdefault(str(cat), _counters())):
                    s["n"] += 1
                    s["bfcl_pass"] += valid
                    if arl is not None:
                        s["scored"] += 1
                        s["arl_pass"] += arl
                        s["agree"] += agree
                if out:
                    out.write(json.dumps({"prompt_id": rec.get("prompt_id"), "class": cls,
                                          "arl": arl, "bfcl": valid,
                                          "bfcl_error_type": etype, "agree": agree},
                                         ensure_ascii=False) + "\n")
                if agree is False:
                    disagreements.append({
                        "prompt_id": rec.get("prompt_id"), "class": cls,
                        "category": (rec.get("label") or {}).get("category"),
                        "response": rec.get("response"),
                        "arl": arl, "arl_reward_detail": rec.get("reward_detail"),
                        "bfcl": valid, "bfcl_error_type": etype,
                        "bfcl_error": _jsonable(err),
                    })
    if out:
        out.close()
    elapsed = time.time() - t0

    def share(a, n):
        return a / n if n else None

    def pct(a, n):
        return f"{100.0 * a / n:6.1f}%" if n else "      -"

    print(f"{'class':<20} {'n':>5} {'agree':>8} {'arl pass':>9} {'bfcl pass':>10}")
    tot = {"n": 0, "scored": 0, "agree": 0, "arl_pass": 0, "bfcl_pass": 0}
    for cls, s in stats.items():
        for k in tot:
            tot[k] += s[k]
        arl_pass = str(s["arl_pass"]) if s["scored"] else "-"
        print(f"{cls:<20} {s['n']:>5} {pct(s['agree'], s['scored']):>8} "
              f"{arl_pass:>9} {s['bfcl_pass']:>10}")
    if disagreements:
        print(f"\ndisagreements ({len(disagreements)}):")
        for d in disagreements:
            resp = (d["response"] or "")[:200].replace("\n", "\\n")
            print(f"  {d['prompt_id']}  [{d['class']}]  arl={d['arl']}  "
                  f"bfcl={d['bfcl']} ({d['bfcl_error_type']})")
            print(f"      response: {resp}")
            print(f"      arl detail: {json.dumps(d['arl_reward_detail'], ensure_ascii=False)[:300]}")
    print()
    arl_pass = str(tot["arl_pass"]) if tot["scored"] else "-"
    print(f"{'overall':<20} {tot['n']:>5} {pct(tot['agree'], tot['scored']):>8} "
          f"{arl_pass:>9} {tot['bfcl_pass']:>10}   "
          f"(disagreements {len(disagreements)}; {elapsed:.2f} s, "
          f"of which loading BFCL {t_load:.2f} s)")

    if args.summary:
        summary = {
            "package": bfcl.package,
            "classes": {c: dict(s, agree_share=share(s["agree"], s["scored"]))
                        for c, s in stats.items()},
            "categories": {c: dict(s, agree_share=share(s["agree"], s["scored"]))
                           for c, s in cat_stats.items()},
            "overall": dict(tot, agree_share=share(tot["agree"], tot["scored"])),
            "disagreements": disagreements,
        }
        with open(args.summary, "w", encoding="utf-8") as f:
            json.dump(summary, f, ensure_ascii=False, indent=1)
            f.write("\n")

    fail = []
    if (args.min_overall > 0 or args.min_class > 0) and not tot["scored"]:
        fail.append("no scored records (no `reward`) to measure agreement on")
    if tot["scored"] and share(tot["agree"], tot["scored"]) < args.min_overall:
        fail.append(f"overall agreement {share(tot['agree'], tot['scored']):.4f} < {args.min_overall}")
    for cls, s in stats.items():
        if s["scored"] >= 1 and share(s["agree"], s["scored"]) < args.min_class:
            fail.append(f"class {cls} agreement {share(s['agree'], s['scored']):.4f} < {args.min_class}")
    if fail:
        for m in fail:
            print(f"FAIL: {m}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
