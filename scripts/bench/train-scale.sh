#!/usr/bin/env bash
# arl-train at real shapes: one RL (PPO) step on a random model of the
# Qwen2.5-0.5B shape (vocabulary 151,936, width 896, 14 query / 2 KV heads,
# MLP 4,864; LAYERS of its 24 layers) with a seeded batch of N responses whose
# lengths are log-uniform over MIN..MAX tokens (or all FIXED long), three ways:
#
#   arl-train            packed micro-batches, chunked LM head (the defaults)
#   arl-train padded     the same with --no-packing (padded micro-batches)
#   pytorch              transformers + a plain loop as users write it: padded
#                        micro-batches, full float32 logits (py/train_scale_baseline.py)
#
# Same records, same token budget per micro-batch (BUDGET), same threads. One
# step each (no warm-up: a step at these sizes is seconds to minutes on a CPU).
# Prints the step's tokens/s and each process's peak RSS (GNU time's maximum
# resident set: model, optimizer state and activations), and the ratios.
#
#   scripts/bench/train-scale.sh                          # N=8, lengths 32..8192 (long on a CPU)
#   N=8 MAX=2048 BUDGET=4096 scripts/bench/train-scale.sh # figures in docs/benchmarks.md
#   FIXED=1024 N=8 scripts/bench/train-scale.sh           # one length: packing gains nothing
#   DEVICE=cuda PRECISION=bf16 LAYERS=24 scripts/bench/train-scale.sh   # on a GPU (not run here: no GPU)
#
# On a GPU (DEVICE=cuda) the memory figure is the device's: the peak of
# `nvidia-smi`'s memory.used while each side runs (both sides' caching
# allocators and CUDA contexts included), sampled every 0.1 s; PyTorch's
# own max_memory_allocated is printed too.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The machine (CPU model, cores, memory, commit) beside every figure.
. scripts/bench/lib/cpu.sh; bench_machine
. scripts/env.sh
N=${N:-8}; MIN=${MIN:-32}; MAX=${MAX:-8192}; FIXED=${FIXED:-}; LAYERS=${LAYERS:-4}
BUDGET=${BUDGET:-8192}; THREADS=${THREADS:-$(nproc)}; SEED=${SEED:-0}
DEVICE=${DEVICE:-cpu}; PRECISION=${PRECISION:-fp32}
case "$PRECISION" in fp32) PY_DTYPE=float32 ;; bf16) PY_DTYPE=bfloat16 ;; *) echo "PRECISION is fp32 or bf16" >&2; exit 2 ;; esac
PY=${ARL_PYTHON:-$HOME/.cache/arl/venv-torch-2.13.0/bin/python}
if [ -z "${GOMP_SPINCOUNT:-}" ] && [ -z "${OMP_WAIT_POLICY:-}" ]; then export GOMP_SPINCOUNT=1000; fi
cargo build --release --quiet -p arl-train
ARL=target/release/arl-train
. scripts/lib/progress.sh
W=$(mktemp -d); trap 'rm -rf "$W"; progress_exit' EXIT
. scripts/bench/lib/qwen05-model.sh
"$PY" - "$N" "$MIN" "$MAX" "$SEED" "$FIXED" > "$W/recs.jsonl" <<'PYEOF'
import json, math, random, sys
n, lo, hi, seed = map(int, sys.argv[1:5])
fixed = int(sys.argv[5]) if sys.argv[5] else None
r = random.Random(seed)
for i in range(n):
    p = 32
    m = fixed or int(math.exp(r.uniform(math.log(lo), math.log(hi))))
    toks = [r.randrange(151936) for _ in range(p + m)]
    print(json.dumps({"prompt_id": f"g{i // 4}", "tokens": toks, "prompt_len": p, "loss_mask": [1] * m,
                      "advantages": [r.gauss(0, 1)] * m,
                      "rollout_log_probs": [-11.9 + r.gauss(0, 0.1) for _ in range(m)]}))
PYEOF
LENS=$("$PY" -c "import json; print(' '.join(str(len(json.loads(l)['tokens'])) for l in open('$W/recs.jsonl')))")
# peak RSS (KB) of a command, from GNU time; its stdout goes to $W/out. On a
# GPU, the peak of the device's memory.used (KB) instead.
peak() {
  local rc=0 sampler=
  if [ "$DEVICE" != cpu ]; then
    echo 0 > "$W/gpu"
    (m=0; while :; do u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1)
       [ "$u" -gt "$m" ] && m=$u && echo "$((m * 1024))" > "$W/gpu"; sleep 0.1; done) &
    sampler=$!
  fi
  /usr/bin/time -f '%M' -o "$W/rss" "$@" >"$W/out" || rc=$?
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; cat "$W/gpu"; rm -f "$W/gpu"
  else tail -1 "$W/rss"; fi
  return $rc
}
arl() {
  local rss tps
  rss=$(peak "$ARL" --model "$W/model" -i "$W/recs.jsonl" --max-tokens-per-micro-batch "$BUDGET" --threads "$THREADS" \
    --device "$DEVICE" --precision "$PRECISION" --lr 1e-6 --metrics "$W/m.jsonl" -q "$@")
  tps=$("$PY" -c "import json; m=json.loads(open('$W/m.jsonl').readlines()[-1]); print(m['tokens']/m['step_time_s'], m['loss'])")
  rm -f "$W/m.jsonl"
  echo "$tps $rss"
}
progress_phase "train-scale: arl-train, one step on $N responses"
read -r A_TPS A_LOSS A_RSS <<<"$(arl)"
progress_phase "train-scale: arl-train padded (--no-packing)"
read -r P_TPS P_LOSS P_RSS <<<"$(arl --no-packing)"
# The PyTorch loop may run out of memory where arl-train does not: then its
# figures are its peak RSS when it died, and no rate.
progress_phase "train-scale: the PyTorch loop"
T_OK=1
T_RSS=$(peak "$PY" scripts/bench/py/train_scale_baseline.py "$W/model" "$W/recs.jsonl" "$BUDGET" "$THREADS" "$DEVICE" "$PY_DTYPE") || T_OK=0
progress_stop
if [ "$T_OK" = 1 ]; then
  read -r T_TPS T_LOSS <<<"$("$PY" -c "import json; d=json.loads(open('$W/out').read()); print(d['tokens_per_s'], d['loss'])")"
else
  T_RSS=$(tail -1 "$W/rss"); T_TPS=nan; T_LOSS=nan
  echo "the PyTorch loop failed ($(head -1 "$W/rss")) at a peak RSS of $((T_RSS / 1024)) MB" >&2
fi

printf '\nQwen2.5-0.5B shape, %d layers, vocabulary 151,936; %d responses (%s tokens with the 32-token prompts), budget %d tokens, %d threads\n' \
  "$LAYERS" "$N" "$LENS" "$BUDGET" "$THREADS"
MEM='peak RSS MB'; [ "$DEVICE" = cpu ] || MEM='peak GPU MB'
printf '%-20s %12s %14s %12s\n' side tokens/s "$MEM" loss
printf '%-20s %12.1f %14.0f %12.6f\n' arl-train "$A_TPS" "$((A_RSS / 1024))" "$A_LOSS"
printf '%-20s %12.1f %14.0f %12.6f\n' 'arl-train padded' "$P_TPS" "$((P_RSS / 1024))" "$P_LOSS"
printf '%-20s %12s %14.0f %12s\n' pytorch "$T_TPS" "$((${T_RSS:-0} / 1024))" "$T_LOSS"
"$PY" -c "
nan=float('nan'); a,p,t=$A_TPS,$P_TPS,$T_TPS; ar,pr,tr=$A_RSS,$P_RSS,${T_RSS:-0} or nan
print(f'arl-train / pytorch: {a/t:.2f}x tokens/s, {ar/tr:.2f}x peak RSS')
print(f'arl-train / its padded path: {a/p:.2f}x tokens/s, {ar/pr:.2f}x peak RSS')"
if [ "$DEVICE" != cpu ]; then
  # MFU: 6 x parameters x tokens/s (the matrix multiplies of forward and
  # backward; attention's own FLOPs left out) over PEAK_TFLOPS (H100/H200
  # dense bf16: 989).
  PARAMS=$(( $(stat -c %s "$W/model/model.safetensors") / 4 ))
  "$PY" -c "
p, peak = $PARAMS, ${PEAK_TFLOPS:-989} * 1e12
for side, t in [('arl-train', $A_TPS), ('arl-train padded', $P_TPS), ('pytorch', $T_TPS)]:
    print(f'{side}: MFU {6 * p * t / peak:.1%} ({p / 1e6:.0f}M parameters)')"
  "$PY" -c "import json; print('pytorch max_memory_allocated MB:', json.loads(open('$W/out').read()).get('max_memory_allocated', 0) // 2**20)" || true
fi
