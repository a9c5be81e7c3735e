#!/usr/bin/env bash
# Replay one training step of a finished run from its saved inputs and check
# that it reproduces the step's checkpoint bit for bit:
#
#   scripts/replay.sh RUN STEP
#
# The inputs are what the loop kept: steps/step-N/batch.jsonl (the records the
# trainer read), ckpt/step-(N-1) (the policy and its optimizer state) and the
# exact arl-train command with its seed (steps/step-N/train.cmd). The replayed
# checkpoint is written to a temporary directory and every weight file is
# compared byte for byte with ckpt/step-N. Exit 0 when identical, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:?usage: scripts/replay.sh RUN STEP}
step=${2:?usage: scripts/replay.sh RUN STEP}
cmdf=$run/steps/step-$step/train.cmd
want=$run/ckpt/step-$step
[ -f "$cmdf" ] || { echo "replay: no $cmdf" >&2; exit 2; }
[ -d "$want" ] || { echo "replay: no checkpoint $want" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The recorded command with its --save pointed at the temporary directory.
read -r -a argv <"$cmdf"
for i in "${!argv[@]}"; do
  [ "${argv[$i]}" = --save ] && argv[$((i + 1))]=$tmp/step-$step
  # PPO: the critic it trains goes there too, never over the run's.
  [ "${argv[$i]}" = --critic-save ] && argv[$((i + 1))]=$tmp/critic-$step
done
echo "replay: ${argv[*]}" >&2
"${argv[@]}"
status=0
for f in "$want"/*.safetensors; do
  g=$tmp/step-$step/$(basename "$f")
  if cmp -s "$f" "$g"; then
    echo "identical  $(basename "$f")  sha256 $(sha256sum <"$f" | cut -c1-16)"
  else
    echo "DIFFERENT  $(basename "$f")" >&2
    status=1
  fi
done
if [ -d "$want/trainer_state" ]; then
  for f in "$want"/trainer_state/*; do
    cmp -s "$f" "$tmp/step-$step/trainer_state/$(basename "$f")" || { echo "DIFFERENT  trainer_state/$(basename "$f")" >&2; status=1; }
  done
fi
[ $status = 0 ] && echo "replay: step $step of $run reproduced bit for bit" >&2
exit $status
