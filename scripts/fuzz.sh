#!/usr/bin/env bash
# Coverage-guided fuzzing of the input-facing parsers (fuzz/, cargo-fuzz +
# libFuzzer on the stable toolchain via RUSTC_BOOTSTRAP=1).
#
#   scripts/fuzz.sh [SECONDS]     build, then run each target SECONDS (default 20)
#
# Each target runs over a COPY of its checked-in corpus (fuzz/corpus/<target>),
# so a run never grows the repository. One line per target:
#
#   fuzz <target>  expected: no crash in <S>s  observed: <N> execs, <crash|no crash>  PASS|FAIL
#
# and, on a failure, the input that crashed (fuzz/artifacts/<target>/…) and the
# log. Exits 1 if any target crashed, hung (-timeout) or ran out of memory.
# Reproduce a crash: fuzz/target/x86_64-unknown-linux-gnu/release/<target> <artifact>
#
# Environment:
#   FUZZ_TARGETS="a b"   only these targets (default: every one in fuzz/fuzz_targets)
#   FUZZ_GROW=1          merge new coverage-increasing inputs back into fuzz/corpus
#                        (for developers; minimise with `cargo fuzz cmin <target>`)
#   FUZZ_SANITIZER=none  build without AddressSanitizer (default: address)
#   FUZZ_NO_BUILD=1      use the binaries already built
#
# Needs cargo-fuzz: scripts/setup-fuzz.sh installs it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
# shellcheck source=/dev/null
[ -f scripts/env.sh ] && . scripts/env.sh

secs=${1:-20}
case $secs in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2 ;; esac
sanitizer=${FUZZ_SANITIZER:-address}
triple=$(rustc -vV | sed -n 's/^host: //p')
bindir=fuzz/target/$triple/release

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is not installed: run scripts/setup-fuzz.sh" >&2
  exit 2
fi

if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  targets=()
  for f in fuzz/fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi

# Largest input libFuzzer makes per target (the seeds must fit).
max_len() {
  case $1 in
    parquet_reader) echo 16384 ;;
    jsonl_reader) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
  t0=$(date +%s)
  # Release with debug assertions and overflow checks (cargo-fuzz's default);
  # 16 codegen units: the dependency tree (arrow, parquet, tokio…) is large.
  RUSTC_BOOTSTRAP=1 cargo fuzz build --fuzz-dir fuzz --debug-assertions --codegen-units 16 \
    --sanitizer "$sanitizer" >&2
  echo "fuzz: built in $(($(date +%s) - t0))s (sanitizer: $sanitizer)" >&2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/arl-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p fuzz/artifacts/logs

failed=0
for t in "${targets[@]}"; do
  bin=$bindir/$t
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (build failed?)" >&2
    failed=1
    continue
  fi
  corpus=$work/$t
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  [ -d "fuzz/corpus/$t" ] && cp -R "fuzz/corpus/$t/." "$corpus/"
  dict=()
  [ -f "fuzz/dicts/$t.dict" ] && dict=(-dict="fuzz/dicts/$t.dict")
  log=fuzz/artifacts/logs/$t.log
  set +e
  # Rayon: one worker, so a run is reproducible and the 2-CPU CI box is not oversubscribed.
  RAYON_NUM_THREADS=1 "$bin" "$corpus" "${dict[@]}" \
    -max_total_time="$secs" -rss_limit_mb=2048 -max_len="$(max_len "$t")" -timeout=10 \
    -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ -z "$execs" ]; then
    # A crash skips the final stats: take the last progress line's count.
    execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  fi
  execs=${execs:-0}
  if [ "$rc" = 0 ]; then
    printf 'fuzz %s  expected: no crash in %ss  observed: %s execs, no crash  PASS\n' "$t" "$secs" "$execs"
  else
    failed=1
    printf 'fuzz %s  expected: no crash in %ss  observed: %s execs, crash  FAIL\n' "$t" "$secs" "$execs"
    kind=$(grep -oE 'ERROR: libFuzzer: [a-z-]+|ERROR: AddressSanitizer: [a-z-]+|panicked at [^ ]+' "$log" | head -1 || true)
    art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "  ${kind:-exit status $rc}; input: ${art:-none written}; log: $log"
    grep -m1 -A2 'panicked at' "$log" | sed 's/^/  /' || true
  fi
  if [ "${FUZZ_GROW:-0}" = 1 ]; then
    mkdir -p "fuzz/corpus/$t"
    RAYON_NUM_THREADS=1 "$bin" -merge=1 -max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout=10 \
      "fuzz/corpus/$t" "$corpus" >>"$log" 2>&1 || echo "fuzz: merging into fuzz/corpus/$t failed (see $log)" >&2
  fi
done
exit "$failed"
