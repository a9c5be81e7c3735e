#!/usr/bin/env bash
# arl's CUDA path on one GPU, in one call of a few minutes (docs/device.md).
#
#   scripts/device-check.sh [--dry-run] [--out DIR] [--bin DIR] [--only CHECKS]
#
# First a probe that fails fast (exit 3): the GPU, its driver and memory
# (nvidia-smi), PyTorch's version and whether it sees the GPU, and the
# libtorch arl's binaries will load. Then scripts/device/check.py: arl-train's
# log-probs against transformers on the tiny models (float32), bf16 RL steps
# at the Qwen2.5-0.5B shape (step time, tokens/s, peak GPU memory, MFU) and
# arl-serve's generation throughput against transformers' `generate`, each
# beside its PyTorch baseline. If arl's binaries do not load, the PyTorch
# half still runs and reports.
#
# Run from the bundle `make device-bundle` makes (its bin/ is used) or from a
# checkout (target/release). --dry-run: the same checks on the CPU, float32,
# at tiny shapes (part of `make test`, so the script never rots).
#
# Output: one Markdown table on stdout; DIR/device-check.json (every row, the
# machine, the verdict; rewritten after each row, so a run cut short keeps
# what it measured), DIR/device-check.md (the table) and DIR/device-check.log
# (the progress lines). DIR: --out, else $OUT when set (the device tool's
# folder that comes back), else ./device-check-out.
#
# Environment: ARL_PYTHON (else python3) is the Python with torch and
# transformers; DEVICE_CHECK_TIMEOUT (seconds, default 450) bounds the checks
# after the probe. Exit: 0 passed, 1 a check failed, 3 the probe failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dry=0; out=${OUT:-}; bin=""; only="load,logits,greedy,rl,generate"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --out) out=$2; shift ;;
    --bin) bin=$2; shift ;;
    --only) only=$2; shift ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "device-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
out=${out:-device-check-out}
if [ -z "$bin" ]; then
  if [ -x "$root/bin/arl-train" ]; then bin=$root/bin; else bin=$root/target/release; fi
fi
py=${ARL_PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$out/device-check.log
: >"$log"
say() { printf 'device-check: %s\n' "$*" | tee -a "$log" >&2; }
probe_fail() { say "PROBE FAILED: $*"; exit 3; }

# --- the probe -----------------------------------------------------------------
say "date $(date -u '+%Y-%m-%d %H:%M:%S UTC'); host $(uname -srm)"
say "cpu $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
if [ "$dry" = 0 ]; then
  # nvidia-smi is informative; PyTorch seeing the GPU (below) is what counts.
  if command -v nvidia-smi >/dev/null; then
    gpu=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1) ||
      probe_fail "nvidia-smi: $gpu"
    say "gpu $gpu"
  else
    say "no nvidia-smi on PATH (the GPU is read through PyTorch)"
  fi
fi
want_cuda=$([ "$dry" = 0 ] && echo 1 || echo 0)
torch_line=$(timeout 120 "$py" - "$want_cuda" <<'EOF' 2>&1
import os, sys, torch
cuda = torch.cuda.is_available()
name = torch.cuda.get_device_name(0) if cuda else "-"
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}); cuda available: {cuda}; device 0: {name}")
print(os.path.join(os.path.dirname(torch.__file__), "lib"))
if sys.argv[1] == "1" and not cuda:
    sys.exit("PyTorch sees no CUDA device")
EOF
) || probe_fail "$py: $torch_line"
say "$(head -1 <<<"$torch_line")"
# arl's binaries load the libtorch of the PyTorch that gives the baselines
# (their rpath names the GPU machine's; this covers any other place).
torch_lib=$(sed -n 2p <<<"$torch_line")
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "libtorch $torch_lib"
say "binaries $bin"
[ -f "$root/MANIFEST.txt" ] && say "bundle $(head -1 "$root/MANIFEST.txt")"

# --- the checks ------------------------------------------------------------------
args=(--root "$root" --bin "$bin" --work "$work" --json "$out/device-check.json" --only "$only")
[ "$dry" = 1 ] && args+=(--dry-run)
set +e
PYTHONUNBUFFERED=1 timeout -k 10 "${DEVICE_CHECK_TIMEOUT:-450}" "$py" "$root/scripts/device/check.py" "${args[@]}" \
  2> >(tee -a "$log" >&2) >"$out/device-check.md"
rc=$?
set -e
cat "$out/device-check.md"
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  say "TIMED OUT after ${DEVICE_CHECK_TIMEOUT:-450} s: $out/device-check.json holds the rows measured so far"
  rc=1
fi
exit "$rc"
