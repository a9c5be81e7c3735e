#!/usr/bin/env python3
"""Fails when a Rust source has grown past the sizes the code keeps to
(docs/layout.md, "Sizes"): a file over MAX_FILE lines, or a function over
MAX_FN lines (its `fn` line to its closing brace) without a comment
right above it saying why it is long: a plain `//` comment above it (above
its attributes too), or a line of its doc comment with the word "long". Tests count like any other code; build outputs do not.
Run by `make lint`.

usage: scripts/check-sizes.py [DIR...]   (default: crates fuzz/fuzz_targets)
"""
import glob
import os
import re
import sys

MAX_FILE = 800
MAX_FN = 150

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:default\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
                r"(?:extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def code_only(text):
    """`text` with comments, strings and char literals blanked (newlines
    kept), so that the braces left are the code's."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:i + 260])) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and (m := re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])):
            out.append(" " * m.end())
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def explained(lines, k):
    """Whether the comments and attributes right above line `k` (a `fn`)
    say why it is long: a plain `//` comment, or a doc line saying "long"."""
    k -= 1
    while k >= 0:
        s = lines[k].strip()
        if s.startswith("//") and not s.startswith("///") and not s.startswith("//!"):
            return True
        if s.startswith("///") and re.search(r"\blong\b", s, re.I):
            return True
        if s.startswith("///") or s.startswith("#["):
            k -= 1
            continue
        return False
    return False


def check(path):
    text = open(path, encoding="utf-8").read()
    lines = text.split("\n")
    bad = []
    if len(lines) - (lines[-1] == "") > MAX_FILE:
        bad.append(f"{path}: {len(lines) - 1} lines (over {MAX_FILE}): split it along a seam")
    code = code_only(text).split("\n")
    for k, line in enumerate(code):
        m = FN.match(line)
        if not m:
            continue
        depth, opened, end = 0, False, None
        for j in range(k, len(code)):
            for ch in code[j]:
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not opened and depth == 0:
                    end = j  # a declaration without a body
                    break
            if end is not None or (opened and depth == 0):
                end = j
                break
        if end is None or not opened:
            continue
        length = end - k + 1
        if length > MAX_FN and not explained(lines, k):
            bad.append(f"{path}:{k + 1}: fn {m.group(1)} is {length} lines (over {MAX_FN}): "
                       "split it, or say why it is long in a comment above it")
    return bad


def main():
    roots = sys.argv[1:] or ["crates", "fuzz/fuzz_targets"]
    bad = []
    for root in roots:
        for f in sorted(glob.glob(os.path.join(root, "**", "*.rs"), recursive=True)):
            if "/target/" in f:
                continue
            bad += check(f)
    for b in bad:
        print(b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
