#!/usr/bin/env bash
# `make device-bundle`: arl-train and arl-serve built here for the GPU machine
# that is lent now and then (docs/device.md), packed with what
# scripts/device-check.sh needs, and proven on this CPU first.
#
# That machine has PyTorch 2.11.0+cu130 in /opt/torch/.venv (Python 3.12), no
# Rust toolchain, no network, and takes at most 64 MiB of files. So:
#  * libtorch 2.11: the PyPI wheel torch==2.11.0 (the same CUDA 13.0 build) in
#    its own cached virtualenv (scripts/setup.sh --device). tch 0.26 is made
#    for torch 2.13: with the version check bypassed its C wrappers fail to
#    compile on 15 operators 2.11 lacks (none used by arl), so the build uses
#    a copy of torch-sys whose wrappers for those raise an error instead
#    (scripts/device/patch_torch_sys.py), through a cargo `[patch]` given on
#    the command line to a copy of the working tree (target/device/src).
#  * no MPI (`--no-default-features`): the binaries need nothing beyond
#    libtorch and the C/C++ runtime.
#  * rpath: TARGET_TORCH_LIB (the machine's torch/lib) first, then this
#    machine's torch 2.11, so the same files run in both places.
#  * built in target/device (the main build in target/release is untouched).
#
# Writes target/device-bundle/arl-device/ (bin/, scripts/device-check.sh and
# scripts/device/, testdata/ with the tiny models, MANIFEST.txt) and
# target/device-bundle/arl-device.tar.gz, both replaced whole; prints their
# sizes and what the binaries link. Then the proof, on this CPU against the
# torch 2.11 libraries: the bundle's own dry run (scripts/device-check.sh
# --dry-run with the 2.11 virtualenv's Python) and the bundle's log-probs
# beside the main build's (torch 2.13) on the tiny models.
#
# Environment: TARGET_TORCH_LIB (default
# /opt/torch/.venv/lib/python3.12/site-packages/torch/lib); PROVE=0 skips the
# proof; MAX_MIB (default 64) is the size limit.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/bench/lib/cpu.sh
target_lib=${TARGET_TORCH_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/torch/lib}
max_mib=${MAX_MIB:-64}
say() { printf 'device-bundle: %s\n' "$*" >&2; }

scripts/setup.sh --device
venv=$ARL_CACHE/venv-torch-2.11.0
torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
tf_version=$("$venv/bin/python" -c 'import transformers; print(transformers.__version__)')

# A copy of the working tree (its tracked and new files) to build from: the
# patch below rewrites that copy's Cargo.lock, never the checkout's.
repo=$PWD
src=target/device/src
rm -rf "$src"
mkdir -p "$src"
git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$src" -xf -
tsys=$(cd "$src" && cargo metadata --format-version 1 | python3 -c '
import json, os, sys
m = json.load(sys.stdin)
print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"] == "torch-sys"))')
python3 scripts/device/patch_torch_sys.py "$tsys" target/device/torch-sys-torch2.11
say "building arl-train and arl-serve against torch $torch_version (target/device)"
(
  cd "$src"
  export PATH="$venv/bin:$PATH" LIBTORCH_USE_PYTORCH=1 LIBTORCH_BYPASS_VERSION_CHECK=1
  export ARL_TORCH_RPATH=$target_lib CARGO_TARGET_DIR=$repo/target/device
  cargo build --release --no-default-features -p arl-train -p arl-serve \
    --config "patch.crates-io.torch-sys.path=\"$repo/target/device/torch-sys-torch2.11\""
)

# --- the bundle, assembled beside its place and moved in whole --------------
dest=target/device-bundle
mkdir -p "$dest"
stage=$(mktemp -d "$dest/.stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
b=$stage/arl-device
mkdir -p "$b/bin" "$b/scripts/device" "$b/testdata/golden"
for t in arl-train arl-serve; do
  # Symbols stripped too (panics still name file:line); half the size.
  strip -s -o "$b/bin/$t" "target/device/release/$t"
done
cp scripts/device-check.sh "$b/scripts/"
cp scripts/device/check.py "$b/scripts/device/"
for m in qwen2 qwen3 llama; do
  mkdir -p "$b/testdata/golden/$m"
  cp testdata/golden/$m/{config.json,generation_config.json,model.safetensors} "$b/testdata/golden/$m/"
done
cp -r testdata/tiny-model "$b/testdata/"

links() {
  local f=$1
  printf '%s\n' "$(basename "$f"):"
  printf '  needs:   %s\n' "$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  printf '  runpath: %s\n' "$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')"
  printf '  newest symbol versions: %s\n' "$(objdump -T "$f" | grep -o 'GLIBC\(XX\)\?_[0-9.]*' | sort -t_ -k1,1 -k2,2V -u |
    awk -F_ '{v[$1]=$0} END {for (k in v) printf "%s ", v[k]}')"
}
{
  echo "arl $(git describe --always --dirty 2>/dev/null || echo unknown), built $(date -u '+%Y-%m-%d %H:%M UTC') for torch $torch_version at $target_lib"
  echo "built on: $CPU_MODEL, $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
  echo "proven here with: torch $torch_version, transformers $tf_version (scripts/requirements-device.txt)"
  echo "run: bash scripts/device-check.sh [--dry-run] [--out DIR]   (from this directory; docs/device.md)"
  echo
  for t in arl-train arl-serve; do links "$b/bin/$t"; done
  echo
  echo "sha256:"
  (cd "$b" && find . -type f ! -name MANIFEST.txt | sort | xargs sha256sum)
} >"$b/MANIFEST.txt"
tar -C "$stage" -czf "$stage/arl-device.tar.gz" arl-device
rm -rf "$dest/arl-device" "$dest/arl-device.tar.gz"
mv "$b" "$dest/arl-device"
mv "$stage/arl-device.tar.gz" "$dest/arl-device.tar.gz"

dir_bytes=$(du -sb "$dest/arl-device" | cut -f1)
tar_bytes=$(stat -c %s "$dest/arl-device.tar.gz")
mib() { echo "scale=1; $1 / 1048576" | bc; }
sed -n '1,/^sha256:/p' "$dest/arl-device/MANIFEST.txt" | sed '$d'
echo "bundle: $dest/arl-device $(mib "$dir_bytes") MiB; $dest/arl-device.tar.gz $(mib "$tar_bytes") MiB (limit $max_mib MiB)"
if [ "$dir_bytes" -gt $((max_mib * 1048576)) ] || [ "$tar_bytes" -gt $((max_mib * 1048576)) ]; then
  say "the bundle is over $max_mib MiB"
  exit 1
fi

[ "${PROVE:-1}" = 0 ] && exit 0

# --- the proof on this CPU, against torch 2.11 -------------------------------
say "the bundle's dry run on this CPU (torch $torch_version, transformers $tf_version)"
ARL_PYTHON=$venv/bin/python bash "$dest/arl-device/scripts/device-check.sh" --dry-run --out "$dest/cpu-check"

ref=target/release/arl-train
if [ -x "$ref" ]; then
  say "log-probs of the bundle (torch $torch_version) beside the main build (torch 2.13, $ref)"
  "$venv/bin/python" - "$dest/arl-device/bin/arl-train" "$ref" <<'EOF'
import json, os, random, subprocess, sys
new, old = sys.argv[1], sys.argv[2]
worst = 0.0
for b in (new, old):
    lib = [l.split("=>")[1].split("(")[0].strip() for l in subprocess.run(["ldd", b], capture_output=True, text=True).stdout.splitlines() if "libtorch_cpu" in l]
    print(f"  {b} loads {lib[0] if lib else '(no libtorch_cpu)'}")
for m in ["testdata/golden/qwen2", "testdata/golden/qwen3", "testdata/golden/llama", "testdata/tiny-model"]:
    v = json.load(open(f"{m}/config.json"))["vocab_size"]
    rng = random.Random(7)
    recs = "".join(json.dumps({"prompt_id": f"s{i}", "tokens": [rng.randrange(v) for _ in range(16)], "prompt_len": 1,
                               "loss_mask": [1] * 15}) + "\n" for i in range(4))
    outs = []
    for b in (new, old):
        # Each binary with its own libtorch (its rpath): no LD_LIBRARY_PATH.
        env = {k: x for k, x in os.environ.items() if k != "LD_LIBRARY_PATH"}
        p = subprocess.run([b, "logprobs", "--model", m, "--threads", "1"], input=recs, capture_output=True, text=True, env=env)
        if p.returncode:
            sys.exit(f"{b}: {p.stderr[-1000:]}")
        outs.append([x for l in p.stdout.splitlines() for x in json.loads(l)["ref_log_probs"]])
    d = max(abs(a - b) for a, b in zip(*outs))
    same = sum(a == b for a, b in zip(*outs))
    worst = max(worst, d)
    print(f"  {m}: {len(outs[0])} log-probs, max |Δ| {d:.1e}, bit-identical {same}/{len(outs[0])}")
print(f"torch 2.11 bundle vs torch 2.13 build: max |Δ| {worst:.1e}")
sys.exit(0 if worst < 1e-5 else 1)
EOF
else
  say "no $ref (make build): the comparison with the torch 2.13 build is skipped"
fi
say "ok: carry target/device-bundle/arl-device to the GPU machine and run bash scripts/device-check.sh there"
