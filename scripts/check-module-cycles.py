#!/usr/bin/env python3
"""Fails when the top-level modules of a crate depend on each other in a
cycle (docs/DESIGN.md §13: the module and crate graphs have no cycles; cargo
already refuses crate cycles). A module's dependencies are the `crate::m` and,
in a crate's top-level files, `super::m` paths of its source outside comments
and its `#[cfg(test)]` module. Run by `make lint`.

usage: scripts/check-module-cycles.py [CRATES_DIR]   (default: crates)
"""
import glob
import os
import re
import sys


def graph(src_dir):
    deps = {}
    for f in glob.glob(os.path.join(src_dir, "**", "*.rs"), recursive=True):
        parts = os.path.relpath(f, src_dir)[:-3].split(os.sep)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        if not parts:
            continue  # the crate root declares every module
        text = open(f, encoding="utf-8").read()
        cut = text.find("#[cfg(test)]")
        if cut >= 0:
            text = text[:cut]
        code = "\n".join(line for line in text.split("\n") if not line.strip().startswith("//"))
        used = set(re.findall(r"\bcrate::(\w+)", code))
        if len(parts) == 1:
            used |= set(re.findall(r"\bsuper::(\w+)", code))
        deps.setdefault(parts[0], set()).update(m for m in used if m != parts[0])
    return {m: {d for d in ds if d in deps} for m, ds in deps.items()}


def cycles(g):
    found, seen, stack = [], set(), []

    def visit(u):
        seen.add(u)
        stack.append(u)
        for v in sorted(g[u]):
            if v in stack:
                found.append(stack[stack.index(v):] + [v])
            elif v not in seen:
                visit(v)
        stack.pop()

    for m in sorted(g):
        if m not in seen:
            visit(m)
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "crates"
    bad = 0
    for src in sorted(glob.glob(os.path.join(root, "*", "src"))):
        for c in cycles(graph(src)):
            print(f"module cycle in {os.path.dirname(src)}: {' -> '.join(c)}", file=sys.stderr)
            bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
