# shellcheck shell=bash
# Sourced by the benchmark scripts: `bench_machine` prints, on stderr, the
# machine a figure was measured on — CPU model, cores, memory, the arl
# commit — so every measured figure can be recorded with it
# (docs/benchmarks.md). CPU_MODEL is set for scripts that print it again
# beside their own figures.
CPU_MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
CPU_MODEL=${CPU_MODEL:-$(uname -m)}
bench_machine() {
  local here commit
  here=$(dirname "${BASH_SOURCE[0]}")
  commit=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$here" diff --quiet HEAD 2>/dev/null || commit+=" (with local changes)"
  printf 'machine: %s, %s cores, %s GiB; arl %s; %s\n' "$CPU_MODEL" "$(nproc)" \
    "$(awk '/^MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)" "$commit" "$(date -u +%Y-%m-%dT%H:%MZ)" >&2
}
