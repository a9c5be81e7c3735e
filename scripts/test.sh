#!/usr/bin/env bash
# `make test`: every test, in this order, each step's output on the terminal
# as it comes, then ONE last line with the verdict and the counts:
#
#   make test: PASSED — lint ok; cargo tests 1234 passed, 0 failed, 5 ignored (87 suites); chaos 54 passed, 0 failed; fuzz 5 targets × 20 s, no crash; 31 min 12 s
#   make test: FAILED at cargo test (exit 101) — lint ok; cargo tests …; chaos not run; fuzz not run; 12 min 3 s
#
# The steps (the first failing one ends the run, with its exit status):
#   setup-tests   make setup-tests            (scripts/setup.sh --tests)
#   lint          make lint                   (scripts/setup.sh, fmt, module cycles, clippy)
#   build         cargo build $CARGO_FLAGS --workspace --bins
#   models        scripts/fetch-models.sh
#   benchmarks    scripts/fetch-benchmarks.sh
#   cargo test    cargo test $CARGO_FLAGS --workspace -- --test-threads=$TEST_THREADS
#   setup-fuzz    scripts/setup-fuzz.sh
#   chaos         scripts/chaos.sh            (its fuzz targets too: FUZZ_SECONDS each)
#
# Counts come from the output: cargo's `test result:` lines (summed; one per
# suite), chaos.sh's scenario lines and its total, the fuzz targets' lines
# (chaos.sh runs scripts/fuzz.sh and counts its targets in its total; here
# they are counted apart). A count that cannot be found is `?`.
#
# Run by the Makefile (its environment: the virtualenv's PATH, CARGO_FLAGS,
# TEST_THREADS, FUZZ_SECONDS); run alone, it runs `make test`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
[ -n "${MAKELEVEL:-}" ] || exec make test

read -r -a cargo_flags <<<"${CARGO_FLAGS---release}"
threads=${TEST_THREADS:-2}
fuzz_secs=${FUZZ_SECONDS:-20}
make_cmd=${MAKE:-make}

out=$(mktemp -d "${TMPDIR:-/tmp}/arl-test.XXXXXX") || exit 2
t0=$SECONDS
step=setup-tests  # the step running, or the one that failed
rc=0
lint=""      # ok once lint passed
cargo_ran="" chaos_ran=""

# run NAME tee|plain COMMAND...: runs one step; with `tee`, its output also
# goes to $out/NAME.out (spaces as -). Its stderr joins its stdout there: one
# pipe keeps the order of the two (on two, cargo's `Running …` lines on stderr
# can overtake the test binaries' results on stdout). rc is the command's
# status (tee's if only tee failed).
run() {
  local name=$1 mode=$2; shift 2
  step=$name
  if [ "$mode" = tee ]; then
    "$@" 2>&1 | tee "$out/${name// /-}.out"
    local st=("${PIPESTATUS[@]}")
    rc=${st[0]}
    [ "$rc" = 0 ] && rc=${st[1]}
  else
    "$@"
    rc=$?
  fi
  return "$rc"
}
# echo_run NAME tee|plain COMMAND...: the same, echoing the command first as make does.
echo_run() {
  local name=$1 mode=$2; shift 2
  echo "$*"
  run "$name" "$mode" "$@"
}

# Strips colour codes, in case a tool colours a pipe.
plain() { [ -f "$1" ] && sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "$1"; }

cargo_summary() {
  [ -n "$cargo_ran" ] || { echo "cargo tests not run"; return; }
  local counts
  # test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s
  counts=$(plain "$out/cargo-test.out" | awk '
    /^test result: (ok|FAILED)\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored;/ {
      s++; p += $4; f += $6; i += $8 }
    END { printf "%d %d %d %d", s, p, f, i }')
  local suites passed failed ignored
  read -r suites passed failed ignored <<<"$counts"
  if [ "${suites:-0}" = 0 ]; then
    echo "cargo tests: no test result line$([ "$step" = "cargo test" ] && [ "$rc" != 0 ] && echo " (cargo exited $rc)")"
    return
  fi
  # cargo stops at the first failing suite; one that crashed prints no result
  # line, so a failure with no failed test counted is a count we do not know.
  [ "$step" = "cargo test" ] && [ "$rc" != 0 ] && [ "$failed" = 0 ] && failed="?"
  echo "cargo tests $passed passed, $failed failed, $ignored ignored ($suites suite$([ "$suites" = 1 ] || echo s))"
}

# chaos.sh prints per scenario `NAME expected: …` / `  observed: …  [Ns] PASS|FAIL`,
# per fuzz target `fuzz/T expected: no crash in Ss` / `  observed: N execs, no crash PASS`,
# and at the end `chaos: P passed, F failed`.
chaos_counts() {
  plain "$out/chaos.out" | awk '
    / \[[0-9]+s\] PASS$/ { sp++ }
    / \[[0-9]+s\] FAIL$/ { sf++ }
    /^fuzz\/[A-Za-z0-9_]+ +expected: no crash in [0-9]+s$/ {
      name = substr($1, 6); secs = $NF; sub(/s$/, "", secs); ft++ }
    /^ +observed: [0-9]+ execs, no crash PASS$/ { fp++ }
    /^ +observed: [0-9]+ execs, crash FAIL$/ { ff++; crashed = crashed (crashed ? "," : "") name }
    /^fuzz +the fuzz targets did not build or run/ { fb++ }
    /^chaos: [0-9]+ passed, [0-9]+ failed/ { tp = $2; tf = $4; total = 1 }
    END { printf "%d %d %d %d %d %d %s %d %s %s %s\n", sp, sf, ft, fp, ff, fb, (secs == "" ? "?" : secs),
            total, (total ? tp : "?"), (total ? tf : "?"), (crashed == "" ? "-" : crashed) }'
}

chaos_summary() {
  if [ -z "$chaos_ran" ]; then echo "chaos not run; fuzz not run"; return; fi
  local sp sf ft fp ff fb secs total tp tf crashed
  read -r sp sf ft fp ff fb secs total tp tf crashed <<<"$(chaos_counts)"
  local c="chaos $sp passed, $sf failed"
  if [ "$total" = 0 ]; then
    c="$c (chaos.sh ended without its total)"
  elif [ $((sp + fp)) != "$tp" ] || [ $((sf + ff + fb)) != "$tf" ]; then
    # Lines this script could not read: say what chaos.sh itself counted.
    c="chaos ? (chaos.sh's own total, fuzz targets included: $tp passed, $tf failed)"
  fi
  local f
  if [ "$fb" -gt 0 ]; then
    f="fuzz targets did not build or run"
  elif [ "$ft" = 0 ]; then
    if [ "$fuzz_secs" = 0 ]; then f="fuzz skipped (FUZZ_SECONDS=0)"
    elif [ "$total" = 0 ]; then f="fuzz not run"
    else f="fuzz ? targets"
    fi
  else
    f="fuzz $ft targets × $secs s, "
    if [ "$ff" -gt 0 ]; then f="$f$ff crashed (${crashed//,/, })"
    elif [ "$fp" = "$ft" ]; then f="${f}no crash"
    else f="$f$fp of $ft ran to the end"
    fi
  fi
  echo "$c; $f"
}

duration() {
  local s=$((SECONDS - t0))
  if [ "$s" -ge 60 ]; then echo "$((s / 60)) min $((s % 60)) s"; else echo "$s s"; fi
}

# The verdict: the last line, whatever happened.
verdict() {
  local status=$?
  trap - EXIT INT TERM
  local head
  if [ -n "${interrupted:-}" ]; then
    head="FAILED at $step (interrupted)"
    [ "$status" = 0 ] && status=130
  elif [ "$rc" = 0 ] && [ "$step" = finished ]; then
    head="PASSED"
  else
    head="FAILED at $step (exit $rc)"
    [ "$rc" = 0 ] || status=$rc
    [ "$status" = 0 ] && status=1
  fi
  local l
  case $lint in
    ok) l="lint ok" ;;
    *) [ "$step" = lint ] && l="lint failed" || l="lint not run" ;;
  esac
  echo "make test: $head — $l; $(cargo_summary); $(chaos_summary); $(duration)"
  rm -rf "$out"
  exit "$status"
}
trap verdict EXIT
trap 'interrupted=1; exit 130' INT TERM

run setup-tests plain "$make_cmd" --no-print-directory setup-tests || exit
run lint plain "$make_cmd" --no-print-directory lint || exit
lint=ok
echo_run build plain cargo build "${cargo_flags[@]}" --workspace --bins || exit
echo_run models plain scripts/fetch-models.sh || exit
echo_run benchmarks plain scripts/fetch-benchmarks.sh || exit
cargo_ran=1
echo_run "cargo test" tee cargo test "${cargo_flags[@]}" --workspace -- --test-threads="$threads" || exit
echo_run setup-fuzz plain scripts/setup-fuzz.sh || exit
chaos_ran=1
echo_run chaos tee scripts/chaos.sh || exit
step=finished
