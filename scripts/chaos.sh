#!/usr/bin/env bash
# The fault and abuse suite: crashes of every stage, bad data, a full disk,
# misbehaving servers, abuse of arl-serve and arl-env, sandbox escapes and fuzzing, each
# run against the real release binaries. One line per scenario (name,
# expected, observed, PASS/FAIL) and a total; exit status 1 when any fails.
#
#   scripts/chaos.sh [FILTER]     only scenarios whose name contains FILTER
#
# Variables: BIN (target/release), FUZZ_SECONDS (per fuzz target, 20; 0 skips
# fuzzing), KEEP=1 keeps the work directory (logs of every scenario).
# Needs root for the full-disk scenario (a tmpfs mount) and the sandbox's
# per-run uid; `make test` runs it after the cargo tests.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# The environment the Makefile exports (the virtualenv's python), from a plain shell too.
# shellcheck source=/dev/null
. "$ROOT/scripts/env.sh"
BIN=${BIN:-$ROOT/target/release}
[[ $BIN = /* ]] || BIN=$ROOT/$BIN
PY=${ARL_PYTHON:-python3}
command -v "$PY" >/dev/null || PY=python3
FILTER=${1:-}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
TINY=$ROOT/testdata/tiny-model
W=$(mktemp -d /tmp/arl-chaos.XXXXXX)
PIDS=()
MOUNTS=()
PASS=0
FAIL=0
FAILED=()

cleanup() {
  # The background servers are this shell's jobs: bash reports each one that
  # a signal ends ("line N: PID Killed  …") on its own stderr when it reaps
  # it. Reaping them here, with stderr silenced, keeps the report out of the
  # output (and waits until they are gone).
  {
    for p in "${PIDS[@]}"; do kill -9 "$p"; done
    for p in "${PIDS[@]}"; do wait "$p"; done
  } 2>/dev/null
  for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
  if [ "${KEEP:-0}" = 1 ] || [ "$FAIL" -gt 0 ]; then
    echo "work directory kept: $W" >&2
  else
    rm -rf "$W"
  fi
}
trap cleanup EXIT
ulimit -n 8192 2>/dev/null || ulimit -n 4096 2>/dev/null

for b in arl-tasks arl-rollout arl-reward arl-filter arl-advantage arl-train arl-sync arl-serve arl-env arl-inspect; do
  [ -x "$BIN/$b" ] || { echo "chaos: $BIN/$b is missing; build first (make build)" >&2; exit 2; }
done
for t in jq curl; do command -v $t >/dev/null || { echo "chaos: needs $t (scripts/setup.sh installs it)" >&2; exit 2; }; done

# --- plumbing ---------------------------------------------------------------

# scenario NAME FUNCTION: runs FUNCTION (which sets EXPECT and OBS and returns
# 0 for pass) with its output in $W/logs/NAME.log, and prints the line.
mkdir -p "$W/logs"
scenario() {
  local name=$1 fn=$2 ok
  [ -n "$FILTER" ] && [[ $name != *"$FILTER"* ]] && return 0
  EXPECT="?" OBS="?"
  local t0=$SECONDS
  if "$fn" >"$W/logs/${name//\//_}.log" 2>&1; then ok=PASS; PASS=$((PASS + 1)); else ok=FAIL; FAIL=$((FAIL + 1)); FAILED+=("$name"); fi
  printf '%-26s expected: %s\n%-26s observed: %s  [%ss] %s\n' "$name" "$EXPECT" "" "$OBS" "$((SECONDS - t0))" "$ok"
}

lines() { [ -f "$1" ] && wc -l <"$1" | tr -d ' ' || echo 0; }
has_lines() { [ "$(lines "$1")" -ge "$2" ]; }
# no_panic LOG: the program reported instead of panicking.
no_panic() { ! grep -q "panicked at\|RUST_BACKTRACE" "$1"; }
# unique_samples FILE: how many distinct (prompt_id, sample_index) pairs.
unique_samples() { jq -r '"\(.prompt_id) \(.sample_index)"' "$1" | sort -u | wc -l | tr -d ' '; }
# leftovers DIR: temporary files or directories an atomic write left behind.
leftovers() { find "$1" -maxdepth 1 -name '.*.tmp*' -o -maxdepth 1 -name '.*.old-*' | wc -l | tr -d ' '; }
wait_for() { # wait_for SECONDS CMD...: polls CMD every 20 ms
  local until=$((SECONDS + $1)); shift
  while [ $SECONDS -lt $until ]; do "$@" && return 0; sleep 0.02; done
  return 1
}
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# serve DIR PORT [ARGS...]: arl-serve in the background; SERVE_PID is set.
serve() {
  local dir=$1 port=$2; shift 2
  "$BIN/arl-serve" --model-path "$dir" --port "$port" --random-seed 1 --cpu-threads 1 --dtype float32 "$@" >>"$W/serve-$port.log" 2>&1 &
  SERVE_PID=$!
  PIDS+=("$SERVE_PID")
  local until=$((SECONDS + 60))
  while [ $SECONDS -lt $until ]; do
    curl -sf "http://127.0.0.1:$port/health" -o /dev/null && return 0
    kill -0 "$SERVE_PID" 2>/dev/null || { echo "arl-serve exited:"; tail -n 5 "$W/serve-$port.log"; return 1; }
    sleep 0.1
  done
  return 1
}

# --- shared data --------------------------------------------------------------
"$BIN/arl-tasks" arith -n 12 --seed 7 -q >"$W/prompts.jsonl"
"$BIN/arl-tasks" arith -n 64 --seed 8 -q >"$W/prompts64.jsonl"
# Scored trajectories: the sample file, repeated with fresh prompt ids.
for i in $(seq 0 249); do
  jq -c --arg i "$i" '.prompt_id = "r\($i):" + .prompt_id' "$ROOT/testdata/sample-trajectories.jsonl"
done >"$W/traj.jsonl"
"$BIN/arl-reward" --rm auto -q -i "$W/traj.jsonl" -o "$W/scored.jsonl"
"$BIN/arl-inspect" convert -q -i "$W/scored.jsonl" -o "$W/scored.parquet" 2>/dev/null \
  || "$BIN/arl-filter" -q -i "$W/scored.jsonl" -o "$W/scored.parquet"
ROLL=(--tokenizer "$TINY" -n 2 --max-response-len 24 --max-turns 2 --tools calculator -q)

# --- crashes: kill -9 in the middle of the work, then restart ----------------

# crash_stream TOOL INPUT ARGS...: TOOL is killed while it waits for the rest
# of its input (half of it read and processed), then rerun on the whole input.
crash_stream() {
  local tool=$1 input=$2; shift 2
  local d=$W/crash-$tool rc p after left_kill left same
  mkdir -p "$d"
  "$BIN/$tool" "$@" -q -i "$input" -o "$d/ref.jsonl" || return 1
  { head -n 2000 "$input"; exec sleep 31.5; } | "$BIN/$tool" "$@" -q -o "$d/out.jsonl" &
  p=$!
  sleep 2
  kill -9 "$p"
  pkill -f "^sleep 31.5$"
  wait "$p" 2>/dev/null
  [ -e "$d/out.jsonl" ] && after=present || after=absent
  left_kill=$(leftovers "$d")
  "$BIN/$tool" "$@" -q -i "$input" -o "$d/out.jsonl"; rc=$?
  left=$(leftovers "$d")
  cmp -s "$d/out.jsonl" "$d/ref.jsonl" && same=identical || same=different
  EXPECT="killed half-way: no output file; rerun rc 0, output identical to an uninterrupted run, no temp file left"
  OBS="killed: output $after ($left_kill temp file); rerun rc $rc, $(lines "$d/out.jsonl")/$(lines "$d/ref.jsonl") records, $same, $left temp left"
  [ "$after" = absent ] && [ "$rc" = 0 ] && [ "$same" = identical ] && [ "$left" = 0 ]
}
crash_reward() { crash_stream arl-reward "$W/traj.jsonl" --rm auto; }
crash_filter() { crash_stream arl-filter "$W/scored.jsonl" --drop-status aborted; }
crash_advantage() { crash_stream arl-advantage "$W/scored.jsonl" --estimator grpo; }

# rollout_through URL OUT [ARGS...]: 12 prompts × 2 samples.
rollout_through() {
  local url=$1 out=$2; shift 2
  [[ " $* " == *" --max-retries "* ]] || set -- --max-retries 6 --retry-backoff 0.05 "$@"
  "$BIN/arl-rollout" -i "$W/prompts.jsonl" --endpoint "$url" "${ROLL[@]}" -o "$out" "$@"
}

# The crash scenarios roll out 64 prompts × 2 one request at a time, so the
# kill lands in the middle; a run that finished first fails the scenario.
crash_rollout() {
  local d=$W/crash-rollout port p rc at_kill running
  mkdir -p "$d"; port=$(free_port)
  serve "$TINY" "$port" || return 1
  "$BIN/arl-rollout" -i "$W/prompts64.jsonl" --endpoint "http://127.0.0.1:$port" "${ROLL[@]}" --concurrency 1 \
    -o "$d/out.jsonl" 2>"$d/rollout.err" &
  p=$!
  wait_for 60 has_lines "$d/out.jsonl.partial" 4
  kill -0 "$p" 2>/dev/null && running=yes || running=no
  kill -9 "$p"; wait "$p" 2>/dev/null
  at_kill=$(( $(lines "$d/out.jsonl.partial") / 2 ))
  "$BIN/arl-rollout" -i "$W/prompts64.jsonl" --endpoint "http://127.0.0.1:$port" "${ROLL[@]}" -o "$d/out.jsonl" --resume \
    2>>"$d/rollout.err"; rc=$?
  EXPECT="killed mid-run; --resume ends with 128 samples, each (prompt_id, sample_index) once"
  OBS="killed while running: $running, $at_kill/64 groups kept; resume rc $rc, $(lines "$d/out.jsonl") samples, $(unique_samples "$d/out.jsonl") distinct"
  [ "$running" = yes ] && [ "$rc" = 0 ] && [ "$(lines "$d/out.jsonl")" = 128 ] && [ "$(unique_samples "$d/out.jsonl")" = 128 ]
}

crash_serve() {
  local d=$W/crash-serve port p rc running
  mkdir -p "$d"; port=$(free_port)
  serve "$TINY" "$port" || return 1
  "$BIN/arl-rollout" -i "$W/prompts64.jsonl" --endpoint "http://127.0.0.1:$port" "${ROLL[@]}" --concurrency 1 \
    --retry-backoff 0.3 --max-retries 8 -o "$d/out.jsonl" 2>"$d/rollout.err" &
  p=$!
  wait_for 60 has_lines "$d/out.jsonl.partial" 4
  kill -0 "$p" 2>/dev/null && running=yes || running=no
  kill -9 "$SERVE_PID"
  sleep 1
  serve "$TINY" "$port" || return 1
  wait "$p"; rc=$?
  EXPECT="arl-serve killed mid-rollout and restarted: the rollout retries and ends with 128 samples, none twice"
  OBS="rollout running at the kill: $running; rc $rc, $(lines "$d/out.jsonl") samples, $(unique_samples "$d/out.jsonl") distinct"
  [ "$running" = yes ] && [ "$rc" = 0 ] && [ "$(lines "$d/out.jsonl")" = 128 ] && [ "$(unique_samples "$d/out.jsonl")" = 128 ]
}

# A model big enough (11M parameters, 42 MB, 127 MB with the AdamW state) that writing and loading a
# checkpoint takes long enough to be interrupted.
big_model() {
  local d=$W/big
  [ -d "$d/base" ] && return 0
  mkdir -p "$d"
  jq '.hidden_size = 384 | .intermediate_size = 1024 | .num_hidden_layers = 6 | .num_attention_heads = 6 | .num_key_value_heads = 2' \
    "$TINY/config.json" >"$d/config.json"
  "$BIN/arl-train" init --config "$d/config.json" --tokenizer "$TINY" --out "$d/base" || return 1
  head -n 4 "$W/scored.jsonl" | "$BIN/arl-advantage" --estimator grpo -q -o "$d/batch.jsonl"
}

# ckpt_ok DIR: config.json parses and every safetensors file is as long as its header says.
ckpt_ok() {
  "$PY" - "$1" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
json.load(open(os.path.join(d, "config.json")))
files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
assert files, "no safetensors"
for f in files:
    p = os.path.join(d, f)
    with open(p, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        h = json.loads(fh.read(n))
    end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
    assert os.path.getsize(p) == 8 + n + end, f"{f}: truncated"
PY
}

# train_killed_writing ARGS...: starts arl-train and kills it as soon as its
# temporary checkpoint directory appears; says whether it caught it writing.
train_killed_writing() {
  local d=$W/big p caught=no
  "$BIN/arl-train" "$@" & p=$!
  if wait_for 60 compgen -G "$d/ck/.step-1.tmp-$p-*" >/dev/null; then caught=yes; fi
  kill -9 "$p"; wait "$p" 2>/dev/null
  echo "$caught"
}

crash_train() {
  big_model || return 1
  local d=$W/big rc1 rc3 first c1 c2 h1 h2 ok1 ok2 left
  local args=(--model "$d/base" -i "$d/batch.jsonl" --save "$d/ck/step-1" -q)
  c1=$(train_killed_writing "${args[@]}" --lr 1e-5)
  [ -e "$d/ck/step-1" ] && first=present || first=absent
  "$BIN/arl-train" "${args[@]}" --lr 1e-5; rc1=$?
  ckpt_ok "$d/ck/step-1" && ok1=complete || ok1=broken
  h1=$(sha256sum "$d/ck/step-1/model.safetensors" | cut -c1-16)
  c2=$(train_killed_writing "${args[@]}" --lr 1e-3)
  ckpt_ok "$d/ck/step-1" && ok2=complete || ok2=broken
  h2=$(sha256sum "$d/ck/step-1/model.safetensors" | cut -c1-16)
  "$BIN/arl-train" "${args[@]}" --lr 1e-5; rc3=$?
  left=$(leftovers "$d/ck")
  EXPECT="killed while writing a new checkpoint: none appears; while overwriting one: the old one stays whole; no temp dir left after a rerun"
  OBS="killed writing: $c1, new: $first; rerun rc $rc1, $ok1; killed overwriting: $c2, old one $ok2, $([ "$h1" = "$h2" ] && echo unchanged || echo changed); rerun rc $rc3, $left temp left"
  [ "$c1" = yes ] && [ "$c2" = yes ] && [ "$first" = absent ] && [ "$rc1" = 0 ] && [ "$ok1" = complete ] && [ "$ok2" = complete ] \
    && [ "$h1" = "$h2" ] && [ "$rc3" = 0 ] && [ "$left" = 0 ]
}

crash_sync() {
  big_model || return 1
  local d=$W/big port p rc v1 v2 path health
  [ -d "$d/ck/step-1" ] || "$BIN/arl-train" --model "$d/base" -i "$d/batch.jsonl" --lr 1e-5 --save "$d/ck/step-1" -q || return 1
  port=$(free_port)
  serve "$d/base" "$port" --weight-version 0 || return 1
  "$BIN/arl-sync" --checkpoint "$d/ck/step-1" --endpoint "http://127.0.0.1:$port" --weight-version 1 >/dev/null & p=$!
  # Killed once it holds a connection to the server (the update asked for, or
  # its answer awaited), not after a fixed delay: it starts in milliseconds,
  # so no delay both lands before it connects and before it is done.
  local running
  running=$("$PY" - "$p" "$port" <<'PY'
import os, sys, time
pid, port = sys.argv[1], int(sys.argv[2])
deadline = time.time() + 10
while time.time() < deadline:
    try:
        socks = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith("socket:["):
                socks.add(t[8:-1])
    except OSError:
        break  # it has exited
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if f[9] in socks and int(f[2].split(":")[1], 16) == port and f[3] == "01":
            os.kill(int(pid), 9)
            print("yes")
            sys.exit()
    time.sleep(0.001)
print("no")
PY
  )
  kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null
  # Let a load in progress finish, then read the version twice.
  sleep 2
  v1=$(curl -sf "http://127.0.0.1:$port/get_model_info" | jq -r '"\(.weight_version) \(.model_path)"')
  sleep 0.5
  v2=$(curl -sf "http://127.0.0.1:$port/get_model_info" | jq -r '"\(.weight_version) \(.model_path)"')
  health=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health_generate")
  local consistent=no
  case "$v1" in
    "0 $d/base"|"0 $d/base/") consistent=yes ;;
    "1 $d/ck/step-1"|"1 $d/ck/step-1/") consistent=yes ;;
  esac
  "$BIN/arl-sync" --checkpoint "$d/ck/step-1" --endpoint "http://127.0.0.1:$port" --weight-version 1; rc=$?
  EXPECT="arl-sync killed during an update: the server reports a version that matches its weights' path, stays healthy; a rerun syncs"
  OBS="sync running at the kill: $running; after: version/path '${v1/$W/\$W}' (stable: $([ "$v1" = "$v2" ] && echo yes || echo no), consistent: $consistent), health_generate $health; rerun rc $rc"
  [ "$running" = yes ] && [ "$v1" = "$v2" ] && [ "$consistent" = yes ] && [ "$health" = 200 ] && [ "$rc" = 0 ]
}

# --- bad data ---------------------------------------------------------------
# Each bad file goes through every tool that reads records. Without a policy
# the first bad record is an error (exit 65) naming the file, the line and the
# field, and no output file appears; with --on-error skip the bad records go
# to the rejects file and output + rejects = input.

make_bad() {
  local d=$W/bad
  [ -d "$d" ] && return 0
  mkdir -p "$d"
  head -n 20 "$W/scored.jsonl" >"$d/good.jsonl"
  # Each file is good.jsonl with one line spoiled (lines count from 1).
  "$PY" - "$d" <<'PY'
import json, os, sys
d = sys.argv[1]
good = open(os.path.join(d, "good.jsonl"), "rb").read().splitlines()
def spoil(name, n, f):
    lines = list(good)
    lines[n - 1] = f(lines[n - 1])
    open(os.path.join(d, name), "wb").write(b"\n".join(lines) + b"\n")
def edit(g):
    return lambda line: json.dumps(g(json.loads(line))).encode()
spoil("broken.jsonl", 5, lambda l: l[: len(l) // 2])
spoil("wrong-type.jsonl", 7, edit(lambda r: {**r, "reward": "high"}))
spoil("missing-field.jsonl", 3, edit(lambda r: {k: v for k, v in r.items()
      if k not in ("response", "reward", "tokens", "loss_mask", "prompt_len", "rollout_log_probs")}))
spoil("mismatched-lengths.jsonl", 6, edit(lambda r: {**r, "loss_mask": r["loss_mask"][3:]}))
spoil("invalid-utf8.jsonl", 4, lambda l: l.replace(b'"response":"', b'"response":"\xff\xfe', 1))
PY
  : >"$d/empty.jsonl"
  local size
  size=$(stat -c %s "$W/scored.parquet")
  head -c $((size / 2)) "$W/scored.parquet" >"$d/truncated.parquet"
  cp "$W/scored.parquet" "$d/corrupt-footer.parquet"
  printf 'GARBAGEGARBAGEGARBAGE' | dd of="$d/corrupt-footer.parquet" bs=1 seek=$((size - 300)) conv=notrunc status=none
  cp "$W/scored.parquet" "$d/corrupt-data.parquet"
  head -c 4096 /dev/urandom | dd of="$d/corrupt-data.parquet" bs=1 seek=$((size / 3)) conv=notrunc status=none
}

TOOLS_READING=("arl-filter --drop-status aborted" "arl-advantage --estimator grpo" "arl-reward --rm auto" "arl-inspect stats")
# (arl-inspect writes to stdout; the others get -o.)

# bad_case FILE WHAT_TO_NAME: every tool exits 65 naming the file (and WHAT).
bad_case() {
  make_bad
  local f=$W/bad/$1 want=$2 t tool rc codes="" named=0 panics=0 outputs=0 n=0
  for t in "${TOOLS_READING[@]}"; do
    tool=${t%% *}; n=$((n + 1))
    local out=$W/bad/out-$tool-$1
    if [ "$tool" = arl-inspect ]; then
      $BIN/$t -i "$f" >"$out.stdout" 2>"$out.err"; rc=$?
    else
      $BIN/$t -q -i "$f" -o "$out" 2>"$out.err"; rc=$?
    fi
    codes+="${tool#arl-}:$rc "
    cat "$out.err"
    grep -q -- "$want" "$out.err" && named=$((named + 1))
    no_panic "$out.err" || panics=$((panics + 1))
    [ -e "$out" ] && outputs=$((outputs + 1))
  done
  EXPECT="exit 65 from each of $n tools, the message matches '$want', no output file, no panic"
  OBS="${codes% }; $named/$n name it; $outputs outputs; $panics panics"
  [ "$codes" = "filter:65 advantage:65 reward:65 inspect:65 " ] && [ "$named" = "$n" ] && [ "$outputs" = 0 ] && [ "$panics" = 0 ]
}
bad_broken() { bad_case broken.jsonl "broken.jsonl:5"; }
bad_wrong_type() { bad_case wrong-type.jsonl "wrong-type.jsonl:7.*reward"; }
bad_mismatch() { bad_case mismatched-lengths.jsonl "mismatched-lengths.jsonl:6.*loss_mask"; }
bad_utf8() { bad_case invalid-utf8.jsonl "invalid-utf8.jsonl:4"; }
# A file the fuzzer found (fuzz/corpus/parquet_reader): the arrow decoder
# itself panics on it; the readers turn that into an error.
bad_decoder_panic() {
  make_bad
  cp "$ROOT/fuzz/corpus/parquet_reader/regress-bit-chunk-oob.parquet" "$W/bad/decoder-panic.parquet"
  bad_parquet_case decoder-panic.parquet "decoder-panic.parquet.*corrupt Parquet"
}
# Corrupt Parquet data (the footer intact). The tools read Parquet by
# columns: a tool that decodes the damaged chunk exits 65 naming the file and
# writes nothing; a tool that never decodes it copies it into its output
# undecoded (Parquet pages carry no checksum) and exits 0 — then reading that
# output whole fails with 65 naming the output: the damage travels with the
# data, it is never silently dropped or "repaired". `arl-inspect stats`
# exits 0 when the damage lies outside the columns it reads. Never a panic.
bad_parquet_case() {
  make_bad
  local f=$W/bad/$1 want=$2 t tool rc r2 codes="" ok=0 panics=0 n=0
  for t in "${TOOLS_READING[@]}"; do
    tool=${t%% *}; n=$((n + 1))
    local out=$W/bad/out-$tool-$1
    if [ "$tool" = arl-inspect ]; then
      $BIN/$t -i "$f" >"$out.stdout" 2>"$out.err"; rc=$?
      if [ $rc = 0 ] || { [ $rc = 65 ] && grep -q -- "$want" "$out.err"; }; then ok=$((ok + 1)); fi
    else
      rm -f "$out"
      $BIN/$t -q -i "$f" -o "$out" 2>"$out.err"; rc=$?
      if [ $rc = 65 ]; then
        grep -q -- "$want" "$out.err" && [ ! -e "$out" ] && ok=$((ok + 1))
      elif [ $rc = 0 ]; then
        $BIN/arl-inspect convert -q -i "$out" -o "$out.jsonl" 2>"$out.read.err"; r2=$?
        cat "$out.read.err"
        [ $r2 = 65 ] && grep -q "out-$tool-$1" "$out.read.err" && no_panic "$out.read.err" && ok=$((ok + 1))
        rc="0(output read: $r2)"
      fi
    fi
    codes+="${tool#arl-}:$rc "
    cat "$out.err"
    no_panic "$out.err" || panics=$((panics + 1))
  done
  EXPECT="each of $n tools exits 65 naming the file with no output, or exits 0 and reading its output fails with 65 naming it (stats: 0 or 65); no panic"
  OBS="${codes% }; $ok/$n as expected; $panics panics"
  [ "$ok" = "$n" ] && [ "$panics" = 0 ]
}
bad_truncated() { bad_case truncated.parquet "truncated.parquet.*Parquet"; }
bad_corrupt_footer() { bad_case corrupt-footer.parquet "corrupt-footer.parquet.*Parquet"; }
bad_corrupt_data() { bad_parquet_case corrupt-data.parquet "corrupt-data.parquet.*Parquet"; }

bad_missing() {
  # A record without response/reward/tokens is valid for filter and inspect
  # (nothing to check) but not for the tools that need those fields.
  make_bad
  local f=$W/bad/missing-field.jsonl rc1 rc2 rc3 e1 e2
  "$BIN/arl-reward" --rm auto -q -i "$f" -o "$W/bad/m-r.jsonl" 2>"$W/bad/m-r.err"; rc1=$?
  "$BIN/arl-advantage" --estimator grpo -q -i "$f" -o "$W/bad/m-a.jsonl" 2>"$W/bad/m-a.err"; rc2=$?
  "$BIN/arl-train" --model "$TINY" -i "$f" --save "$W/bad/m-ckpt" -q 2>"$W/bad/m-t.err"; rc3=$?
  cat "$W/bad/m-"*.err
  e1=$(grep -c "missing-field.jsonl:3.*response" "$W/bad/m-r.err"); e2=$(grep -c "missing-field.jsonl:3.*reward" "$W/bad/m-a.err")
  EXPECT="reward, advantage and train refuse line 3 (no response / reward / tokens) with exit 65, naming it; nothing written"
  OBS="reward $rc1, advantage $rc2, train $rc3; line named by reward $e1, advantage $e2; outputs: $(ls "$W/bad" | grep -c '^m-[rat].jsonl\|^m-ckpt$')"
  [ "$rc1" = 65 ] && [ "$rc2" = 65 ] && [ "$rc3" = 65 ] && [ "$e1" -ge 1 ] && [ "$e2" -ge 1 ] \
    && [ ! -e "$W/bad/m-r.jsonl" ] && [ ! -e "$W/bad/m-a.jsonl" ] && [ ! -e "$W/bad/m-ckpt" ] \
    && no_panic "$W/bad/m-t.err"
}

bad_skip() {
  make_bad
  local d=$W/bad/skip f total=0 good=0 rej=0 ok=1 rc
  mkdir -p "$d"
  cat "$W/bad/broken.jsonl" "$W/bad/wrong-type.jsonl" "$W/bad/mismatched-lengths.jsonl" "$W/bad/invalid-utf8.jsonl" >"$d/all.jsonl"
  total=$(lines "$d/all.jsonl")
  "$BIN/arl-filter" --drop-status aborted -i "$d/all.jsonl" -o "$d/out.jsonl" --on-error skip --rejects "$d/rejects.jsonl" 2>"$d/err"; rc=$?
  cat "$d/err"
  good=$(lines "$d/out.jsonl"); rej=$(lines "$d/rejects.jsonl")
  EXPECT="--on-error skip: exit 0, 4 rejects kept verbatim, output + rejects = $total input lines"
  OBS="rc $rc, $good out + $rej rejects = $((good + rej)) of $total"
  [ "$rc" = 0 ] && [ "$rej" = 4 ] && [ $((good + rej)) = "$total" ] && grep -q $'\xff\xfe' "$d/rejects.jsonl"
}

bad_empty() {
  make_bad
  local t tool codes="" outs=0 n=0
  for t in "${TOOLS_READING[@]}"; do
    tool=${t%% *}
    [ "$tool" = arl-inspect ] && continue
    n=$((n + 1))
    $BIN/$t -q -i "$W/bad/empty.jsonl" -o "$W/bad/e-$tool.parquet"; codes+="${tool#arl-}:$? "
    [ "$("$BIN/arl-inspect" stats -i "$W/bad/e-$tool.parquet" --json 2>/dev/null | jq '.records // .n // 0')" = 0 ] && outs=$((outs + 1))
  done
  EXPECT="empty input: exit 0 and a valid empty Parquet file from each of $n tools"
  OBS="${codes% }; $outs/$n valid empty outputs"
  [ "$codes" = "filter:0 advantage:0 reward:0 " ] && [ "$outs" = "$n" ]
}

bad_huge_line() {
  make_bad
  local d=$W/bad rc peak
  { head -n 3 "$d/good.jsonl"
    "$PY" -c 'import json,sys; r=json.loads(sys.argv[1]); r["response"]="7"*(64<<20); print(json.dumps(r))' "$(sed -n 4p "$d/good.jsonl" | jq -c 'del(.tokens, .loss_mask, .rollout_log_probs, .prompt_len)')"
    tail -n +5 "$d/good.jsonl"; } >"$d/huge.jsonl"
  /usr/bin/time -f '%M' -o "$d/huge.time" "$BIN/arl-filter" --drop-status aborted -q -i "$d/huge.jsonl" -o "$d/huge-out.jsonl"; rc=$?
  peak=$(( $(tail -n 1 "$d/huge.time") / 1024 ))
  EXPECT="a 64 MiB line passes through (exit 0, 20 records) in bounded memory (< 1 GiB)"
  OBS="rc $rc, $(lines "$d/huge-out.jsonl") records, peak RSS ${peak} MiB"
  [ "$rc" = 0 ] && [ "$(lines "$d/huge-out.jsonl")" = 20 ] && [ "$peak" -lt 1024 ]
}

# --- full disk ----------------------------------------------------------------
full_disk() {
  local d=$W/full rc1 rc2 before after files
  mkdir -p "$d"
  if ! mount -t tmpfs -o size=1m tmpfs "$d"; then
    EXPECT="a 1 MiB tmpfs"; OBS="cannot mount a tmpfs (needs root)"; return 1
  fi
  MOUNTS+=("$d")
  before=$(sha256sum <"$W/scored.jsonl")
  "$BIN/arl-filter" --drop-status aborted -q -i "$W/scored.jsonl" -o "$d/out.jsonl" 2>"$W/full.err1"; rc1=$?
  big_model >/dev/null 2>&1 || return 1
  "$BIN/arl-train" --model "$W/big/base" -i "$W/big/batch.jsonl" --lr 1e-5 --save "$d/ckpt" -q 2>"$W/full.err2"; rc2=$?
  cat "$W/full.err1" "$W/full.err2"
  after=$(sha256sum <"$W/scored.jsonl")
  files=$(ls -A "$d" | wc -l)
  local msgs
  msgs=$(cat "$W/full.err1" "$W/full.err2" | grep -c "No space left")
  EXPECT="filter and train fail with 'No space left on device', leave nothing on the full disk, input untouched"
  OBS="filter rc $rc1, train rc $rc2, $msgs messages say 'No space left', $files files left, input $([ "$before" = "$after" ] && echo untouched || echo CHANGED)"
  [ "$rc1" != 0 ] && [ "$rc2" != 0 ] && [ "$msgs" -ge 2 ] && [ "$files" = 0 ] && [ "$before" = "$after" ] \
    && no_panic "$W/full.err1" && no_panic "$W/full.err2"
}

# --- server faults --------------------------------------------------------------
# A fault-injecting proxy (scripts/chaos/faulty_proxy.py) in front of a real
# arl-serve: every third /generate fails in one way; the rollout must retry
# and record each sample once.
FAULT_SERVER=""
fault_server() {
  [ -n "$FAULT_SERVER" ] && return 0
  local port; port=$(free_port)
  serve "$TINY" "$port" || return 1
  FAULT_SERVER=127.0.0.1:$port
}
# proxy MODE [ARGS]: starts the proxy, sets PROXY (URL) and PROXY_LOG.
proxy() {
  local mode=$1; shift
  PROXY_LOG=$W/proxy-$mode.log
  rm -f "$W/proxy-$mode.port"
  "$PY" "$ROOT/scripts/chaos/faulty_proxy.py" --upstream "$FAULT_SERVER" --mode "$mode" --port-file "$W/proxy-$mode.port" "$@" 2>"$PROXY_LOG" &
  PIDS+=("$!")
  wait_for 20 test -s "$W/proxy-$mode.port" || return 1
  PROXY=http://127.0.0.1:$(cat "$W/proxy-$mode.port")
}
server_fault() {
  local mode=$1; shift
  fault_server && proxy "$mode" "${PROXY_ARGS[@]}" || return 1
  local d=$W/fault-$mode rc faults
  mkdir -p "$d"
  rollout_through "$PROXY" "$d/out.jsonl" "$@" 2>"$d/err"; rc=$?
  cat "$d/err"
  faults=$(grep -c " $mode$" "$PROXY_LOG")
  EXPECT="$faults of $(grep -c generate "$PROXY_LOG") requests faulty ($mode): retried, 24 samples, each once"
  OBS="rc $rc, $(lines "$d/out.jsonl") samples, $(unique_samples "$d/out.jsonl") distinct"
  [ "$faults" -gt 0 ] && [ "$rc" = 0 ] && [ "$(lines "$d/out.jsonl")" = 24 ] && [ "$(unique_samples "$d/out.jsonl")" = 24 ]
}
fault_5xx() { PROXY_ARGS=(--every 3); server_fault 5xx; }
fault_garbage() { PROXY_ARGS=(--every 3); server_fault garbage; }
fault_reset() { PROXY_ARGS=(--every 3); server_fault reset; }
fault_slow() { PROXY_ARGS=(--every 3 --delay 5); server_fault slow --request-timeout 1; }
fault_down() {
  fault_server && proxy always5xx || return 1
  local d=$W/fault-down rc t0=$SECONDS
  mkdir -p "$d"
  rollout_through "$PROXY" "$d/out.jsonl" --max-retries 3 --retry-backoff 0.1 2>"$d/err"; rc=$?
  cat "$d/err"
  local took=$((SECONDS - t0)) said=no
  grep -q "503" "$d/err" && grep -q "gave up after 3 retries" "$d/err" && said=yes
  EXPECT="every request fails: exit 1 within 30 s saying 'HTTP 503 ... gave up after 3 retries'; no output file, an empty .partial for --resume"
  OBS="rc $rc after ${took}s, message: $said, output: $([ -e "$d/out.jsonl" ] && echo present || echo absent), partial: $(lines "$d/out.jsonl.partial") lines"
  [ "$rc" = 1 ] && [ "$took" -lt 30 ] && [ "$said" = yes ] && [ ! -e "$d/out.jsonl" ] && [ "$(lines "$d/out.jsonl.partial")" = 0 ]
}
fault_gone() {
  local d=$W/fault-gone rc t0=$SECONDS port
  mkdir -p "$d"; port=$(free_port)
  "$BIN/arl-rollout" -i "$W/prompts.jsonl" --endpoint "http://127.0.0.1:$port" "${ROLL[@]}" --max-retries 2 --retry-backoff 0.1 -o "$d/out.jsonl" 2>"$d/err"; rc=$?
  cat "$d/err"
  EXPECT="no server at all: exit 1 within 15 s naming the endpoint; no output"
  OBS="rc $rc after $((SECONDS - t0))s, names endpoint: $(grep -q "127.0.0.1:$port" "$d/err" && echo yes || echo no), output: $([ -e "$d/out.jsonl" ] && echo present || echo absent)"
  [ "$rc" = 1 ] && [ $((SECONDS - t0)) -lt 15 ] && grep -q "127.0.0.1:$port" "$d/err" && [ ! -e "$d/out.jsonl" ]
}

# --- abuse of arl-serve -------------------------------------------------------
# One server with an API key and a 4 MiB body limit takes every abuse in turn
# (scripts/chaos/abuse.py); after each, a normal request must be answered.
ABUSE_PORT=""
abuse_server() {
  [ -n "$ABUSE_PORT" ] && return 0
  ABUSE_PORT=$(free_port)
  serve "$TINY" "$ABUSE_PORT" --api-key chaos-key --max-body-bytes $((4 << 20)) --read-timeout 3 || return 1
  ABUSE_PID=$SERVE_PID
}
abuse() { ARL_API_KEY=chaos-key "$PY" "$ROOT/scripts/chaos/abuse.py" "$ABUSE_PORT" "$@"; }
rss_mib() { awk '/VmHWM/ { print int($2 / 1024) }' "/proc/$1/status"; }

abuse_flood() {
  abuse_server || return 1
  local r; r=$(abuse flood 1000); echo "$r"
  EXPECT="1000 concurrent /generate: every one answered 200, a request alongside is answered, server peak RSS < 2 GiB"
  OBS="statuses $(jq -c .statuses <<<"$r"), probe $(jq -r .probe_ok <<<"$r") in $(jq -r .probe_s <<<"$r")s, peak RSS $(rss_mib "$ABUSE_PID") MiB"
  [ "$(jq -r '.statuses["200"] // 0' <<<"$r")" = 1000 ] && [ "$(jq -r .probe_ok <<<"$r")" = true ] && [ "$(rss_mib "$ABUSE_PID")" -lt 2048 ]
}
abuse_idle() {
  abuse_server || return 1
  local r; r=$(abuse idle 1000); echo "$r"
  EXPECT="1000 stalled half-sent requests: a normal request is still answered"
  OBS="$(jq -r .opened <<<"$r") connections held, probe $(jq -r .probe_ok <<<"$r") in $(jq -r .probe_s <<<"$r")s"
  [ "$(jq -r .opened <<<"$r")" = 1000 ] && [ "$(jq -r .probe_ok <<<"$r")" = true ]
}
abuse_slow() {
  abuse_server || return 1
  local r; r=$(abuse slow 400 3); echo "$r"
  EXPECT="400 connections stalled mid-header or mid-body (slowloris) against --read-timeout 3: the server closes every one within 3 s (+ slack), mid-body ones answered 408; a normal request is answered"
  OBS="$(jq -r .closed <<<"$r")/400 closed, slowest after $(jq -r .max_s <<<"$r")s, mid-header $(jq -c .header_statuses <<<"$r"), mid-body $(jq -c .body_statuses <<<"$r"), probe $(jq -r .probe_ok <<<"$r")"
  [ "$(jq -r .closed <<<"$r")" = 400 ] && [ "$(jq -r '.max_s < 8' <<<"$r")" = true ] && [ "$(jq -r '.body_statuses["408"] // 0' <<<"$r")" = 200 ] && [ "$(jq -r .probe_ok <<<"$r")" = true ]
}
abuse_body() {
  abuse_server || return 1
  local r; r=$(abuse body $((64 << 20))); echo "$r"
  EXPECT="a 64 MiB body against a 4 MiB limit: HTTP 413, server keeps serving"
  OBS="status $(jq -r .status <<<"$r"), probe $(jq -r .probe_ok <<<"$r"), peak RSS $(rss_mib "$ABUSE_PID") MiB"
  [ "$(jq -r .status <<<"$r")" = 413 ] && [ "$(jq -r .probe_ok <<<"$r")" = true ]
}
abuse_malformed() {
  abuse_server || return 1
  local r; r=$(abuse malformed); echo "$r"
  EXPECT="8 malformed bodies (not JSON, array, empty, bad UTF-8, wrong types, bad ids): each a 4xx, server keeps serving"
  OBS="$(jq -c .statuses <<<"$r"), probe $(jq -r .probe_ok <<<"$r")"
  [ "$(jq '[.statuses[] | select(type == "number" and . >= 400 and . < 500)] | length' <<<"$r")" = 8 ] && [ "$(jq -r .probe_ok <<<"$r")" = true ]
}
abuse_key() {
  abuse_server || return 1
  local r; r=$(abuse key wrong-key); echo "$r"
  EXPECT="a wrong API key: 401 on /generate and /get_model_info, others still served"
  OBS="generate $(jq -r .generate <<<"$r"), model_info $(jq -r .model_info <<<"$r"), probe $(jq -r .probe_ok <<<"$r")"
  [ "$(jq -r .generate <<<"$r")" = 401 ] && [ "$(jq -r .model_info <<<"$r")" = 401 ] && [ "$(jq -r .probe_ok <<<"$r")" = true ]
}
abuse_million() {
  abuse_server || return 1
  local r ctx; r=$(abuse million); echo "$r"
  ctx=$(jq .max_position_embeddings "$TINY/config.json")
  EXPECT="max_new_tokens 1e6: generation stops at the context ($ctx) or a 400; 1e6 input ids: 400; server keeps serving"
  OBS="new tokens: $(jq -r .new_tokens_status <<<"$r") ($(jq -r .completion_tokens <<<"$r") tokens, $(jq -r .seconds <<<"$r")s), input ids: $(jq -r .input_ids_status <<<"$r"), probe $(jq -r .probe_ok <<<"$r")"
  local s1 n1; s1=$(jq -r .new_tokens_status <<<"$r"); n1=$(jq -r '.completion_tokens // 0' <<<"$r")
  { [ "$s1" = 400 ] || { [ "$s1" = 200 ] && [ "$n1" -le "$ctx" ]; }; } && [ "$(jq -r .input_ids_status <<<"$r")" = 400 ] && [ "$(jq -r .probe_ok <<<"$r")" = true ]
}

# --- abuse of arl-env ---------------------------------------------------------
# arl-env takes connections as arl-serve does (arl_http::server): a client
# that stalls mid-header or mid-body is cut off after --read-timeout, and the
# others are served meanwhile.
ENV_PORT=""
env_server() {
  [ -n "$ENV_PORT" ] && return 0
  local port; port=$(free_port)
  "$BIN/arl-env" --port "$port" --read-timeout 3 >>"$W/env-$port.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  local until=$((SECONDS + 30))
  while [ $SECONDS -lt $until ]; do
    curl -sf "http://127.0.0.1:$port/health" -o /dev/null && { ENV_PORT=$port; return 0; }
    kill -0 "$pid" 2>/dev/null || { echo "arl-env exited:"; tail -n 5 "$W/env-$port.log"; return 1; }
    sleep 0.1
  done
  return 1
}
env_abuse() { ABUSE_TARGET="env" "$PY" "$ROOT/scripts/chaos/abuse.py" "$ENV_PORT" "$@"; }

env_slow() {
  env_server || return 1
  local r; r=$(env_abuse slow 200 3); echo "$r"
  EXPECT="200 connections stalled mid-header or mid-body (slowloris) against arl-env --read-timeout 3: the server closes every one within 3 s (+ slack), mid-body ones answered 408; GET /health answered meanwhile and after"
  OBS="$(jq -r .closed <<<"$r")/200 closed, slowest after $(jq -r .max_s <<<"$r")s, mid-header $(jq -c .header_statuses <<<"$r"), mid-body $(jq -c .body_statuses <<<"$r"), probe meanwhile $(jq -r .probe_during_ok <<<"$r"), after $(jq -r .probe_ok <<<"$r")"
  [ "$(jq -r .closed <<<"$r")" = 200 ] && [ "$(jq -r '.max_s < 8' <<<"$r")" = true ] && [ "$(jq -r '.body_statuses["408"] // 0' <<<"$r")" = 100 ] && [ "$(jq -r .probe_during_ok <<<"$r")" = true ] && [ "$(jq -r .probe_ok <<<"$r")" = true ]
}

# --- sandbox escapes ----------------------------------------------------------
# Model-written programs scored by `arl-reward --rm code` in the local sandbox.
# Each tries one escape; the verdict comes from the host side: the loopback
# listener saw no connection, the planted secret is in no output, no file
# appeared outside the sandbox, the host's processes are alive.
# The same programs run twice: in the default sandbox (bubblewrap here) and,
# as `sandbox-fallback/*` (SBX=_fallback), in the fallback that is used where
# bubblewrap cannot be (ARL_SANDBOX_NO_BWRAP=1): bare namespaces plus Landlock.
SBX=""
SANDBOX_SETUP=""
sandbox_run() {
  local done_var=SANDBOX_DONE$SBX rc_var=SANDBOX_RC$SBX secs_var=SANDBOX_SECONDS$SBX
  if [ -n "${!done_var:-}" ]; then
    SANDBOX_RC=${!rc_var} SANDBOX_SECONDS=${!secs_var}
    return "$SANDBOX_RC"
  fi
  printf -v "$done_var" 1
  sandbox_setup
  local d=$W/sandbox extra=()
  [ -n "$SBX" ] && extra=(ARL_SANDBOX_NO_BWRAP=1)
  local t0=$SECONDS
  env "${extra[@]}" CHAOS_TOKEN="$SECRET" "$BIN/arl-reward" --rm code --test-timeout 3 --memory-mb 512 --concurrency 4 \
    -i "$d/escapes.jsonl" -o "$d/scored$SBX.jsonl" 2>"$d/reward$SBX.err"
  SANDBOX_RC=$?
  SANDBOX_SECONDS=$((SECONDS - t0))
  printf -v "$rc_var" %s "$SANDBOX_RC"
  printf -v "$secs_var" %s "$SANDBOX_SECONDS"
  cat "$d/reward$SBX.err"
  return "$SANDBOX_RC"
}
sandbox_setup() {
  [ -n "$SANDBOX_SETUP" ] && return 0
  SANDBOX_SETUP=1
  local d=$W/sandbox
  mkdir -p "$d"
  SECRET=chaos-secret-$RANDOM$RANDOM$RANDOM
  echo "$SECRET" >"$d/secret.txt"; chmod 644 "$d/secret.txt"
  chmod 755 "$W" "$d"
  LISTEN_PORT=$(free_port)
  "$PY" -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
while True:
    c, a = s.accept(); open(sys.argv[2], "a").write("connection from %s\n" % (a,)); c.close()
' "$LISTEN_PORT" "$d/listener.log" &
  LISTENER_PID=$!
  PIDS+=("$LISTENER_PID")
  "$PY" - "$d" "$LISTEN_PORT" "$LISTENER_PID" "$W" <<'PY' >"$d/escapes.jsonl"
import json, sys
d, port, lpid, w = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
progs = {
  "network": f"""
import socket
for fam, addr in [(socket.AF_INET, ("127.0.0.1", {port})), (socket.AF_INET6, ("::1", {port}))]:
    try:
        s = socket.socket(fam); s.settimeout(2); s.connect(addr); print("ESCAPED network", addr)
    except Exception as e:
        note("blocked:", type(e).__name__)
print("contained")
""",
  "read-secret": f"""
for p in ["{d}/secret.txt", "/proc/1/root{d}/secret.txt"]:
    try:
        print("ESCAPED read", open(p).read())
    except Exception as e:
        note("blocked:", type(e).__name__)
print("contained")
""",
  "write-outside": f"""
import os
for p in ["{w}/pwned", "/tmp/arl-chaos-pwned", "/var/tmp/arl-chaos-pwned", "/root/arl-chaos-pwned"]:
    try:
        open(p, "w").write("x"); note("wrote (inside the sandbox)", p)
    except Exception as e:
        note("blocked:", type(e).__name__)
print("contained")
""",
  "proc-of-others": """
import os
found = 0
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for f in ("environ", "cmdline"):
        try:
            data = open(f"/proc/{pid}/{f}", "rb").read()
        except Exception:
            continue
        if b"chaos-secret" in data:
            print("ESCAPED proc", pid, data[:200]); found += 1
note("pids visible:", sum(p.isdigit() for p in os.listdir("/proc")))
print("contained")
""",
  "signals": f"""
import os, signal
for target in [os.getppid(), {lpid}, 1, -1]:
    try:
        os.kill(target, signal.SIGKILL); note("sent SIGKILL to", target)
    except Exception as e:
        note("blocked:", target, type(e).__name__)
print("contained")
""",
  "fork-bomb": """
import os
n = 0
try:
    while True:
        os.fork(); n += 1
except Exception as e:
    note("stopped:", type(e).__name__)
""",
  "memory-bomb": """
chunks = []
while True:
    chunks.append(bytearray(64 << 20))
""",
  "sleep": """
import time
time.sleep(120)
print("contained")
""",
  "close-stdout": """
import os, time
os.close(1); os.close(2)
time.sleep(0.5)
""",
  "rlimits": """
import resource
for r in (resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE):
    try:
        resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)); print("ESCAPED rlimit raised", r)
    except Exception as e:
        note("blocked:", r, type(e).__name__)
chunks = []
while True:
    chunks.append(bytearray(64 << 20))
""",
}
# Diagnostics go to stderr: stdout is `contained` exactly when the program
# ran to its end without getting out (reward 1).
NOTE = "import sys\ndef note(*a):\n    print(*a, file=sys.stderr)\n"
for i, (name, code) in enumerate(progs.items()):
    print(json.dumps({"prompt_id": f"escape:{name}", "sample_index": 0, "data_source": "code", "prompt": name,
                      "response": "```python\n" + NOTE + code + "\n```",
                      "label": {"cases": [{"stdin": "", "stdout": "contained"}]}}))
PY
}
# detail NAME: the record's reward_detail, compact.
detail() { jq -c --arg n "escape:$1" 'select(.prompt_id == $n) | .reward_detail' "$W/sandbox/scored$SBX.jsonl"; }
sandbox_common() {
  # Nothing anywhere shows the secret; the run completed; the host listener lives.
  ! grep -rq "$SECRET" "$W/sandbox/scored$SBX.jsonl" "$W/sandbox/reward$SBX.err" && kill -0 "$LISTENER_PID" 2>/dev/null
}
# escape NAME REWARD WHAT: REWARD 1 = the program ran to its end (and printed
# `contained`), 0 = the sandbox stopped it.
escape() {
  local name=$1 want=$2; shift 2
  sandbox_run; local rc=$SANDBOX_RC det; det=$(detail "$name")
  echo "$det"
  OBS="arl-reward rc $rc in ${SANDBOX_SECONDS}s; $*; reward $(jq -r .score <<<"$det"): $(jq -r '.reason // "ran to the end"' <<<"$det" | tr '\n' ' ' | cut -c1-70)"
  [ "$rc" = 0 ] && sandbox_common && ! grep -q "ESCAPED" <<<"$det" && [ "$(jq -r .score <<<"$det")" = "$want" ]
}
escape_network() {
  EXPECT="connecting to a listener on the host's loopback fails; the listener sees nothing"
  local conns; sandbox_run; conns=$(lines "$W/sandbox/listener.log")
  escape network 1 "listener saw $conns connections" && [ "$conns" = 0 ]
}
escape_secret() { EXPECT="a planted host file (mode 644) cannot be read"; escape read-secret 1 "secret in no output"; }
escape_write() {
  EXPECT="no file appears outside the sandbox's scratch"
  local n; sandbox_run
  n=$(ls "$W/pwned" /tmp/arl-chaos-pwned /var/tmp/arl-chaos-pwned /root/arl-chaos-pwned 2>/dev/null | wc -l)
  escape write-outside 1 "$n files on the host" && [ "$n" = 0 ]
}
escape_proc() { EXPECT="/proc shows no host process (the secret in arl-reward's environment stays hidden)"; escape proc-of-others 1 "secret in no output"; }
escape_signals() { EXPECT="SIGKILL to the parent, a host pid, pid 1 and -1 reach no host process"; escape signals 1 "host listener alive: $(kill -0 "$LISTENER_PID" 2>/dev/null && echo yes || echo no)"; }
escape_fork() {
  EXPECT="a fork bomb is contained (process limit), the host can still start processes, no sandbox process survives"
  sandbox_run; local left
  left=$(ps -eo args | grep -c "[p]ython3 .*arl-sb\|[s]olution.py" )
  escape fork-bomb 0 "host fork ok: $(true && echo yes), leftover sandbox processes: $left" && [ "$left" = 0 ]
}
escape_memory() { EXPECT="allocating without end ends at the 512 MiB limit"; escape memory-bomb 0 "host alive"; }
escape_sleep() {
  EXPECT="sleeping 120 s is killed at the 3 s limit; the whole run stays well under 120 s"
  sandbox_run; escape sleep 0 "run took ${SANDBOX_SECONDS}s" && [ "$SANDBOX_SECONDS" -lt 60 ]
}
escape_stdout() { EXPECT="a program that closes stdout/stderr is scored 0, the run goes on"; escape close-stdout 0 "scored"; }
escape_rlimits() { EXPECT="raising the rlimits fails; the memory limit still holds"; escape rlimits 0 "limits kept"; }

# The fallback: the same escapes, and what it says about itself.
landlock_enforced() { [ "$(jq -r '.reward_detail.sandbox.landlock.enforced' "$W/sandbox/scored_fallback.jsonl" | sort -u)" = true ]; }
fallback() { SBX=_fallback; "$@"; local rc=$?; SBX=""; return $rc; }
fallback_honest() {
  EXPECT="one warning on stderr naming what is missing; every record says namespaces, degraded, and whether Landlock is enforced"
  SBX=_fallback; sandbox_run; local rc=$? err=$W/sandbox/reward_fallback.err out=$W/sandbox/scored_fallback.jsonl; SBX=""
  local warnings iso ll
  warnings=$(grep -c "runs without bubblewrap" "$err")
  iso=$(jq -r '.reward_detail.sandbox | "\(.isolation)/\(.degraded)"' "$out" | sort -u | tr '\n' ' ')
  ll=$(jq -c '.reward_detail.sandbox.landlock' "$out" | sort -u | tr '\n' ' ')
  OBS="rc $rc; $warnings warning(s); records: $iso; landlock: $ll"
  [ "$rc" = 0 ] && [ "$warnings" = 1 ] && grep -q "no pid namespace" "$err" && [ "$iso" = "namespaces/true " ] \
    && [ "$(jq -r '.reward_detail.sandbox.missing | index("private root filesystem") != null' "$out" | sort -u)" = true ]
}
fallback_strict() {
  EXPECT="\`--sandbox strict\` refuses the fallback: exit 1, no output file, no sandbox run"
  local d=$W/sandbox rc
  sandbox_setup
  ARL_SANDBOX_NO_BWRAP=1 "$BIN/arl-reward" --rm code --sandbox strict -i "$d/escapes.jsonl" -o "$d/strict.jsonl" 2>"$d/strict.err"
  rc=$?
  cat "$d/strict.err"
  OBS="rc $rc; $(head -n 1 "$d/strict.err" | cut -c1-80)"
  [ "$rc" = 1 ] && [ ! -e "$d/strict.jsonl" ] && grep -q "refusing" "$d/strict.err" && ! grep -q "runs without bubblewrap" "$d/strict.err"
}
# Landlock: where the kernel has it, host files are out of reach; where it
# does not, the records must say so (and the escapes it would stop are not checked).
fallback_landlock() { # fallback_landlock FUNCTION: FUNCTION when Landlock is enforced
  SBX=_fallback; sandbox_run >/dev/null; SBX=""
  if landlock_enforced; then fallback "$@"; else
    EXPECT="(this kernel has no Landlock) the records say it is not enforced"
    OBS="landlock: $(jq -c '.reward_detail.sandbox.landlock' "$W/sandbox/scored_fallback.jsonl" | sort -u)"
    [ "$(jq -r '.reward_detail.sandbox.landlock.enforced' "$W/sandbox/scored_fallback.jsonl" | sort -u)" = false ]
  fi
}
fallback_proc_escape() {
  EXPECT="/proc is out of reach (Landlock): the program fails to list it; the secret in arl-reward's environment stays hidden"
  local det; sandbox_run; det=$(detail proc-of-others)
  OBS="reward $(jq -r .score <<<"$det"): $(jq -r '.reason // "ran to the end"' <<<"$det" | tr '\n' ' ' | cut -c1-70)"
  [ "$SANDBOX_RC" = 0 ] && sandbox_common && ! grep -q "ESCAPED" <<<"$det" && grep -q "PermissionError" <<<"$det"
}
fallback_network() { fallback escape_network; }
fallback_secret() { fallback_landlock escape_secret; }
fallback_write() { fallback_landlock escape_write; }
fallback_proc() { fallback_landlock fallback_proc_escape; }
fallback_signals() { fallback escape_signals; }
fallback_fork() { fallback escape_fork; }
fallback_memory() { fallback escape_memory; }
fallback_sleep() { fallback escape_sleep; }
fallback_rlimits() { fallback escape_rlimits; }

# --- fuzzing ------------------------------------------------------------------
fuzz_all() {
  [ "$FUZZ_SECONDS" = 0 ] && return 0
  [ -n "$FILTER" ] && [[ fuzz != *"$FILTER"* ]] && return 0
  local out
  out=$("$ROOT/scripts/fuzz.sh" "$FUZZ_SECONDS" 2>"$W/logs/fuzz.log")
  local rc=$?
  # scripts/fuzz.sh prints `fuzz T  expected: …  observed: …  PASS`; same layout as the rest.
  local line name rest
  while IFS= read -r line; do
    if [[ $line =~ ^fuzz\ ([a-z_]+)\ \ expected:\ (.*)\ \ observed:\ (.*)\ \ (PASS|FAIL)$ ]]; then
      printf '%-26s expected: %s\n%-26s observed: %s %s\n' "fuzz/${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "" "${BASH_REMATCH[3]}" "${BASH_REMATCH[4]}"
      [ "${BASH_REMATCH[4]}" = FAIL ] && FAILED+=("fuzz/${BASH_REMATCH[1]}")
    else
      echo "$line"
    fi
  done <<<"$out"
  PASS=$((PASS + $(grep -c ' PASS$' <<<"$out")))
  FAIL=$((FAIL + $(grep -c ' FAIL$' <<<"$out")))
  if [ "$rc" != 0 ] && ! grep -q ' FAIL$' <<<"$out"; then
    echo "fuzz                       the fuzz targets did not build or run (see $W/logs/fuzz.log)  FAIL"
    FAIL=$((FAIL + 1)); FAILED+=(fuzz)
    tail -n 20 "$W/logs/fuzz.log"
  fi
}

# --- run ----------------------------------------------------------------------
echo "chaos: work directory $W"
scenario crash/rollout crash_rollout
scenario crash/reward crash_reward
scenario crash/filter crash_filter
scenario crash/advantage crash_advantage
scenario crash/train-checkpoint crash_train
scenario crash/sync crash_sync
scenario crash/serve crash_serve
scenario bad/broken-jsonl bad_broken
scenario bad/wrong-type bad_wrong_type
scenario bad/missing-field bad_missing
scenario bad/mismatched-lengths bad_mismatch
scenario bad/invalid-utf8 bad_utf8
scenario bad/empty-input bad_empty
scenario bad/huge-line bad_huge_line
scenario bad/truncated-parquet bad_truncated
scenario bad/corrupt-parquet-footer bad_corrupt_footer
scenario bad/corrupt-parquet-data bad_corrupt_data
scenario bad/parquet-decoder-panic bad_decoder_panic
scenario bad/skip-adds-up bad_skip
scenario disk/full full_disk
scenario server/5xx fault_5xx
scenario server/garbage-json fault_garbage
scenario server/connection-reset fault_reset
scenario server/slow fault_slow
scenario server/always-failing fault_down
scenario server/absent fault_gone
scenario serve/1000-concurrent abuse_flood
scenario serve/1000-stalled abuse_idle
scenario serve/slowloris abuse_slow
scenario serve/oversized-body abuse_body
scenario serve/malformed-json abuse_malformed
scenario serve/wrong-api-key abuse_key
scenario serve/million-tokens abuse_million
scenario env/slowloris env_slow
scenario sandbox/network escape_network
scenario sandbox/host-file escape_secret
scenario sandbox/write-outside escape_write
scenario sandbox/proc escape_proc
scenario sandbox/signals escape_signals
scenario sandbox/fork-bomb escape_fork
scenario sandbox/memory-bomb escape_memory
scenario sandbox/sleep escape_sleep
scenario sandbox/close-stdout escape_stdout
scenario sandbox/rlimits escape_rlimits
scenario sandbox-fallback/honest fallback_honest
scenario sandbox-fallback/strict fallback_strict
scenario sandbox-fallback/network fallback_network
scenario sandbox-fallback/host-file fallback_secret
scenario sandbox-fallback/write-outside fallback_write
scenario sandbox-fallback/proc fallback_proc
scenario sandbox-fallback/signals fallback_signals
scenario sandbox-fallback/fork-bomb fallback_fork
scenario sandbox-fallback/memory-bomb fallback_memory
scenario sandbox-fallback/sleep fallback_sleep
scenario sandbox-fallback/rlimits fallback_rlimits
fuzz_all

echo "chaos: $PASS passed, $FAIL failed$([ "$FAIL" -gt 0 ] && echo ": ${FAILED[*]}")"
[ "$FAIL" = 0 ]
