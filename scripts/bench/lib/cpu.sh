# shellcheck shell=bash
# Sourced by the benchmark scripts: `bench_machine` prints, on stderr, the
# machine a figure was measured on — CPU model, cores, memory, the arl
# commit — so every measured figure can be recorded with it
# (docs/benchmarks.md). CPU_MODEL is set for scripts that print it again
# beside their own figures.
CPU_MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
CPU_MODEL=${CPU_MODEL:-$(uname -m)}
bench_machine() {
  local commit
  commit=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --short HEAD 2>/dev/null || echo unknown)
  printf 'machine: %s, %s cores, %s GiB; arl %s%s; %s\n' "$CPU_MODEL" "$(nproc)" \
    "$(awk '/^MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)" "$commit" \
    "$(git -C "$(dirname "${BASH_SOURCE[0]}")" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')" \
    "$(date -u +%Y-%m-%dT%H:%MZ)" >&2
}
