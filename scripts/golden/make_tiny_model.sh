#!/usr/bin/env bash
# Regenerates testdata/tiny-model: arl's character-level ChatML tokenizer
# (`arl-train make-tokenizer`) and a seeded random Qwen2 (`arl-train init`).
set -euo pipefail
cd "$(dirname "$0")/../.."
# The environment `make` sets (tch finds libtorch in the cached venv).
. scripts/env.sh
cargo build --release --quiet -p arl-train
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
target/release/arl-train make-tokenizer --out "$T/tok"
target/release/arl-train init --config scripts/golden/tiny.json --tokenizer "$T/tok" --out testdata/tiny-model --seed 0
cp scripts/golden/tiny-model-README.md testdata/tiny-model/README.md
