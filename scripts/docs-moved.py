#!/usr/bin/env python3
"""Which numbers and table rows of an old README are nowhere now?

A one-off check for moving text (issue 41 split the 1,300-line README into a
short README and the book under docs/): it takes the README of REV (`git
show REV:README.md`) and lists

  * every number of it (`0.504`, `1,076`, `2026-12-05` as one token) found in
    neither the current README nor any docs/**/*.md, with the old line it
    stood on;
  * every table row of it that is not in the new text verbatim: "reworded"
    when all of its numbers are still somewhere, else with the ones that are
    not.

Usage: scripts/docs-moved.py [REV]    (default: the last commit that changed
README.md before the working tree's). Not a test: its output is read by a
person and explained (in the closing note of the change that moved the text).
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
NUM = re.compile(r"(?<![\w.])\d+(?:[.,:\-]\d+)*(?![\w])")


def numbers(text):
    return set(NUM.findall(text))


def norm(line):
    return " ".join(line.split())


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else subprocess.check_output(
        ["git", "log", "-1", "--format=%H", "HEAD", "--", "README.md"], cwd=ROOT, text=True).strip()
    old = subprocess.check_output(["git", "show", f"{rev}:README.md"], cwd=ROOT, text=True)
    new_files = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    new = "\n".join(p.read_text() for p in new_files)
    have = numbers(new)
    new_lines = {norm(l) for l in new.splitlines()}

    missing = {}
    for n, line in enumerate(old.splitlines(), 1):
        for x in sorted(numbers(line) - have):
            missing.setdefault(x, (n, line.strip()))
    print(f"old README: {rev[:12]}, {len(old.splitlines())} lines, {len(numbers(old))} distinct numbers")
    print(f"new text: README.md and {len(new_files) - 1} pages under docs/, {len(numbers(new))} distinct numbers")
    print(f"\nnumbers found in neither ({len(missing)}):")
    for x, (n, line) in sorted(missing.items(), key=lambda kv: kv[1][0]):
        print(f"  {x:>14}  README:{n}: {line[:110]}")

    rows = [(n, l) for n, l in enumerate(old.splitlines(), 1)
            if l.startswith("|") and not re.fullmatch(r"[|\-: ]+", l.strip())]
    reworded, lost = [], []
    for n, l in rows:
        if norm(l) in new_lines:
            continue
        gone = sorted(numbers(l) - have)
        (lost if gone else reworded).append((n, l, gone))
    print(f"\ntable rows: {len(rows)}; verbatim {len(rows) - len(reworded) - len(lost)}, "
          f"reworded with every number kept {len(reworded)}, with numbers gone {len(lost)}")
    for n, l, gone in lost:
        print(f"  README:{n}: {l[:100]}…  gone: {', '.join(gone)}")


if __name__ == "__main__":
    main()
