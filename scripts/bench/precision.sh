#!/usr/bin/env bash
# What bf16 buys on this CPU, float32 and bf16 side by side in one run — the
# measurements issue 44 starts from (arl serves and trains in float32 on the
# CPU today; `--dtype bfloat16` / `--precision bf16` are there to ask for):
#
#  * libtorch's matrix multiply at the model's decode, prefill and train
#    shapes, float32 vs bf16, in TFLOP/s;
#  * the memory bandwidth THREADS threads stream, and each precision's floor
#    for one decode step (the weights' bytes ÷ that bandwidth);
#  * greedy decoding at CONCS concurrent requests: arl-serve five ways
#    (--dtype float32 --decode-matmul blas, --dtype float32, --dtype auto,
#    --dtype auto with ARL_NATIVE_DECODE=0, --dtype bfloat16; DP replicas), transformers' `generate` in float32 and
#    bf16, and llama.cpp's server on the SmolLM2 package's Q4_1 GGUF (built
#    here with native CPU flags the first time, minutes: scripts/bench/lib/
#    llama-cpp.sh; LLAMA=0 skips it) — tokens/s and ms per decode step,
#    beside the floors;
#  * the log-prob gap of --dtype auto against float32 on the same tokens.
#
#   scripts/bench/precision.sh                         # SmolLM2-135M (make models), 1 8 64 requests
#   MODEL=testdata/tiny-model CONCS="1 8" NEW=16 scripts/bench/precision.sh   # a quick look
#
# Prints the CPU model and its bf16 instructions (AVX-512 BF16, AMX) first:
# record them with the figures (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
flags=$(grep -o -w 'avx512_bf16\|amx_bf16\|amx_tile\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "CPU: $CPU_MODEL; instructions: ${flags:-none of avx512f, avx512_bf16, amx_bf16, amx_tile}"
smol=$ARL_CACHE/models/SmolLM2-135M-Instruct
MODEL=${MODEL:-$([ -d "$smol" ] && echo "$smol" || echo testdata/tiny-model)}
THREADS=${THREADS:-$(nproc)}; CONCS=${CONCS:-1 8 64}; NEW=${NEW:-64}; PROMPT=${PROMPT:-16}; DP=${DP:-1}
cargo build --release --quiet -p arl-serve
gguf=$ARL_CACHE/models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
if [ "${LLAMA:-1}" != 0 ] && [ "$MODEL" = "$smol" ] && [ -f "$gguf" ]; then
  . scripts/bench/lib/llama-cpp.sh
  if LLAMA_SERVER=$(llama_server); then
    export LLAMA_SERVER LLAMA_GGUF=$gguf
  else
    echo "llama.cpp: could not build it; the table goes without it" >&2
  fi
fi
"$ARL_PYTHON" scripts/bench/py/precision_bench.py target/release "$MODEL" "$THREADS" "$CONCS" "$NEW" "$PROMPT" "$DP"
