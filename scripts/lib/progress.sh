# shellcheck shell=bash
# Where a long phase is, on stderr (sourced by scripts/lib/loop.sh and the
# benchmarks; not run). While the phase's commands run in the foreground, a
# monitor in the background reads how far they got and shows it:
#
#   on a terminal   one line, redrawn in place every second and cleared when
#                   the phase ends:
#                   SFT step 1400/2400, loss 0.412, 4m40s elapsed, ~3m20s left
#   otherwise       (a pipe, a file, a CI log) one plain line, with the time,
#                   every PROGRESS_EVERY seconds (30) of the phase
#
#   progress_start [-n TOTAL] [-u UNIT] [-f FROM] [-t T0] [-m] LABEL [PROBE ARGS…]
#   …the phase's commands…
#   progress_stop
#
# PROBE (a function, called by the monitor at every line) sets PROGRESS_DONE,
# how far the phase is (a count, shown when set), PROGRESS_NOTE, anything to
# add (e.g. the loss), and PROGRESS_TAIL, what goes at the end of the line
# (after the time); without one the line shows the time only (a heartbeat).
# With -n TOTAL the count shows as DONE/TOTAL with the time left, from the
# rate since T0 (-t, a `date +%s` time, default now) at which the count was
# FROM (-f, default 0); -m: TOTAL is only an upper bound (the phase may end
# earlier); -u UNIT follows the count. Probes here:
#   progress_metrics FILE [OFFSET]  arl-train --metrics FILE (a line per
#                                   optimizer step): OFFSET + its lines, and
#                                   the last line's loss
#   progress_count FILE [WORD]      the lines of FILE.partial while it is being
#                                   written (arl-rollout -o/--trace), else of
#                                   FILE, that contain WORD
#   progress_last_line FILE         the last line of a log (its own progress
#                                   lines too), at the end
#
# Everything goes to stderr, nothing to stdout. One monitor at a time; a new
# progress_start ends the one before. A script that exits in the middle of a
# phase (set -e, a signal) should call `progress_exit` from its EXIT trap,
# last (bash exiting on Ctrl-C may die in its trap as children end); the
# monitor also ends, without a word, within a second of the shell that
# started it (it ignores Ctrl-C, which is for the phase's commands).
# PROGRESS=0 turns it all off.
#
#   progress_phase LABEL [PROBE ARGS…]  a line "HH:MM:SS LABEL" on stderr,
#                               then `progress_start LABEL [PROBE ARGS…]` (a
#                               benchmark's phases)

: "${PROGRESS:=1}"
: "${PROGRESS_EVERY:=30}"
PROGRESS_PID=

# progress_dur SECONDS: 42s, 6m12s, 1h02m (in REPLY: no subshell).
progress_dur() {
  local s=$1
  if [ "$s" -lt 60 ]; then
    printf -v REPLY '%ds' "$s"
  elif [ "$s" -lt 3600 ]; then
    printf -v REPLY '%dm%02ds' $((s / 60)) $((s % 60))
  else
    printf -v REPLY '%dh%02dm' $((s / 3600)) $((s % 3600 / 60))
  fi
}

# progress_eta DONE TOTAL T0 [FROM]: "1m05s elapsed, ~6m10s left" in REPLY —
# the time since T0 (`date +%s`, a fraction ignored), and what is left at the
# rate since T0, when the count was FROM (0); the time only before the first
# unit is done or without a TOTAL.
progress_eta() {
  local done=$1 total=$2 t0=${3%.*} from=${4:-0} now e el
  printf -v now '%(%s)T' -1
  e=$((now - t0))
  [ "$e" -lt 0 ] && e=0
  progress_dur "$e"
  el="$REPLY elapsed"
  if [ -n "$total" ] && [ "$done" -gt "$from" ] && [ "$total" -gt "$done" ]; then
    progress_dur $(((total - done) * e / (done - from)))
    el+=", ~$REPLY left"
  fi
  REPLY=$el
}

# progress_train_steps RECORDS ARGS: the optimizer steps arl-train makes over
# RECORDS records with the flags ARGS (--global-batch-size, --epochs); nothing
# when ARGS give no batch size (one step per epoch then, not worth a count).
progress_train_steps() {
  local n=$1 gbs epochs
  gbs=$(sed -nE 's/(^|.* )--global-batch-size[ =]([0-9]+).*/\2/p' <<<"$2")
  epochs=$(sed -nE 's/(^|.* )--epochs[ =]([0-9]+).*/\2/p' <<<"$2")
  if [ -n "$gbs" ] && [ "$gbs" -gt 0 ] && [ "$n" -gt 0 ]; then
    [ "$gbs" -gt "$n" ] && gbs=$n
    echo $((((n + gbs - 1) / gbs) * ${epochs:-1}))
  fi
  return 0
}

progress_metrics() {
  local f=$1 out="0"
  PROGRESS_NOTE=
  # The number of lines, and the last one's "loss" (not "kl_loss" &c.).
  if [ -s "$f" ]; then
    out=$(awk -F'"loss":' 'END { split($2, a, /[,}]/); if (a[1] == "") print NR; else printf "%d %.4g\n", NR, a[1] }' "$f" 2>/dev/null) || out=0
  fi
  PROGRESS_DONE=$((${2:-0} + ${out%% *}))
  [ "$PROGRESS_DONE" -lt 0 ] && PROGRESS_DONE=0
  [ "${out#* }" != "$out" ] && PROGRESS_NOTE="loss ${out#* }"
  return 0
}

progress_count() {
  local f=$1 n
  PROGRESS_NOTE=
  [ -e "$f.partial" ] && f=$f.partial
  n=$(grep -c -- "${2:-}" "$f" 2>/dev/null) || true
  PROGRESS_DONE=${n:-0}
}

progress_last_line() {
  local line=
  [ -s "$1" ] && line=$(tail -n 1 "$1" 2>/dev/null | tr -d '\r')
  # The newest part of a line redrawn in place (a terminal's progress bar),
  # without a leading HH:MM:SS.
  line=${line##*$'\e'\[K}
  [[ $line =~ ^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\ (.*)$ ]] && line=${BASH_REMATCH[1]}
  PROGRESS_TAIL=$line
}

# The monitor (in the background): a line per second on a terminal, one every
# PROGRESS_EVERY seconds otherwise; ends on SIGTERM (progress_stop clears
# the line) or when PARENT is gone.
_progress_monitor() {
  local parent=$1 label=$2 total=$3 unit=$4 from=$5 t0=$6 atmost=$7 tty=0 cols=0 now next line sp=
  shift 7
  set +eu
  trap '' INT
  trap '[ -n "$sp" ] && kill "$sp" 2>/dev/null; exit 0' TERM
  if [ -t 2 ]; then
    tty=1
    if cols=$(stty size <&2 2>/dev/null); then cols=${cols#* }; else cols=0; fi
  fi
  printf -v next '%(%s)T' -1
  next=$((next + PROGRESS_EVERY))
  while :; do
    kill -0 "$parent" 2>/dev/null || exit 0
    printf -v now '%(%s)T' -1
    if [ "$tty" = 1 ] || [ "$now" -ge "$next" ]; then
      PROGRESS_DONE='' PROGRESS_NOTE='' PROGRESS_TAIL=''
      line=$label
      [ $# -gt 0 ] && "$@"
      [ -n "$PROGRESS_DONE" ] && line+=" $PROGRESS_DONE${total:+/$total}${unit:+ $unit}"
      [ -n "$PROGRESS_NOTE" ] && line+=", $PROGRESS_NOTE"
      progress_eta "${PROGRESS_DONE:-0}" "$total" "$t0" "$from"
      line+=", $REPLY"
      [ -n "$atmost" ] && [ "${line% left}" != "$line" ] && line+=" at most"
      [ -n "$PROGRESS_TAIL" ] && line+=": $PROGRESS_TAIL"
      if [ "$tty" = 1 ]; then
        [ "$cols" -gt 1 ] && [ "${#line}" -ge "$cols" ] && line=${line:0:cols-1}
        printf '\r\033[K%s' "$line" >&2
      else
        printf '%(%H:%M:%S)T %s\n' -1 "$line" >&2
        next=$((next + PROGRESS_EVERY))
      fi
    fi
    sleep 1 >/dev/null 2>&1 &
    sp=$!
    wait "$sp"
    sp=
  done
}

progress_start() {
  local total="" unit="" from=0 t0="" atmost=""
  while [ $# -gt 0 ]; do
    case "$1" in
      -n) total=$2; shift 2 ;;
      -u) unit=$2; shift 2 ;;
      -f) from=$2; shift 2 ;;
      -t) t0=${2%.*}; shift 2 ;;
      -m) atmost=1; shift ;;
      *) break ;;
    esac
  done
  progress_stop
  [ "$PROGRESS" = 0 ] && return 0
  [ -n "$t0" ] || printf -v t0 '%(%s)T' -1
  PROGRESS_TTY=0
  if [ -t 2 ]; then PROGRESS_TTY=1; fi
  # The monitor is forked without the caller's EXIT trap: killed before it
  # has set its own, it would otherwise run the caller's (e.g. run.sh's,
  # which stops the server). Its stdout is /dev/null: it never holds a pipe
  # the caller reads. (The words of an asynchronous command expand in the
  # child: the caller's $BASHPID is taken here.)
  local exit_trap parent=$BASHPID
  exit_trap=$(trap -p EXIT)
  trap - EXIT
  _progress_monitor "$parent" "$1" "$total" "$unit" "$from" "$t0" "$atmost" "${@:2}" >/dev/null </dev/null &
  PROGRESS_PID=$!
  if [ -n "$exit_trap" ]; then eval "$exit_trap"; fi
}

# progress_stop: ends the monitor and clears its line.
progress_stop() {
  [ -n "${PROGRESS_PID:-}" ] || return 0
  kill "$PROGRESS_PID" 2>/dev/null || true
  wait "$PROGRESS_PID" 2>/dev/null || true
  PROGRESS_PID=
  if [ "${PROGRESS_TTY:-0}" = 1 ] && [ -t 2 ]; then printf '\r\033[K' >&2; fi
}

# progress_exit: the same for an EXIT trap, without waiting for the monitor
# (a shell exiting on a signal, Ctrl-C, dies in the middle of a `wait`, and
# the rest of its trap would not run). The trap may run inside a command's
# redirection of stderr (`arl-train … 2>>log`): the line on the terminal is
# then cleared through /dev/tty.
progress_exit() {
  [ -n "${PROGRESS_PID:-}" ] || return 0
  kill "$PROGRESS_PID" 2>/dev/null || true
  PROGRESS_PID=
  if [ -t 2 ]; then
    printf '\r\033[K' >&2
  elif [ "${PROGRESS_TTY:-0}" = 1 ]; then
    { printf '\r\033[K' >/dev/tty; } 2>/dev/null || true
  fi
}

progress_phase() {
  printf '%(%H:%M:%S)T %s\n' -1 "$1" >&2
  progress_start "$@"
}
