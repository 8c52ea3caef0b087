#!/usr/bin/env bash
# Instructions per cache-hit allocate+free pair, by path and size, counted
# with callgrind: (count for 2N pairs - count for N pairs) / N, so start-up
# and warm-up cancel out. Needs valgrind and a build (default: build/).
#   bash benchmarks/count_instructions.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
loop="$build/benchmarks/pair_loop"
[ -x "$loop" ] || { echo "no $loop: build first (ninja -C $build pair_loop)"; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 2; }
n=20000
count() {  # pairs bytes path -> instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$loop" "$1" "$2" "$3" 2>&1 \
    | awk '/Collected/ {print $4}'
}
printf '%-14s %10s %10s %10s %10s\n' path 512B 64KiB 4MiB 64MiB
for path in front front+stats front+history capi; do
  row=$(printf '%-14s' "$path")
  for bytes in 512 65536 4194304 67108864; do
    a=$(count $n $bytes $path); b=$(count $((2 * n)) $bytes $path)
    row="$row $(printf '%10d' $(( (b - a) / n )))"
  done
  echo "$row"
done
