#!/usr/bin/env bash
# Instructions per cache-hit allocate+free pair, by path and size, counted
# with callgrind: (count for 2N pairs - count for N pairs) / N, so start-up
# and warm-up cancel out. Needs valgrind and a build (default: build/).
#   bash benchmarks/count_instructions.sh [BUILD_DIR]
# PAIR_PATHS and PAIR_SIZES (bytes) choose the rows and columns (pair_loop's
# paths; default: the four front paths at 512 B, 64 KiB, 4 MiB, 64 MiB);
# count_profiler_path.sh sets them for the profiler's paths.
set -euo pipefail
build=${1:-build}
loop="$build/benchmarks/pair_loop"
[ -x "$loop" ] || { echo "no $loop: build first (ninja -C $build pair_loop)"; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 2; }
paths=${PAIR_PATHS:-front front+stats front+history capi}
sizes=${PAIR_SIZES:-512 65536 4194304 67108864}
n=20000
count() {  # pairs bytes path -> instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$loop" "$1" "$2" "$3" 2>&1 \
    | awk '/Collected/ {print $4}'
}
label() {  # bytes -> 512B, 64KiB, 4MiB
  if (( $1 >= 1048576 )); then echo "$(( $1 / 1048576 ))MiB"
  elif (( $1 >= 1024 )); then echo "$(( $1 / 1024 ))KiB"
  else echo "$1B"; fi
}
width=14
for p in $paths; do (( ${#p} + 1 > width )) && width=$(( ${#p} + 1 )); done
row=$(printf "%-${width}s" path)
for bytes in $sizes; do row="$row $(printf '%10s' "$(label "$bytes")")"; done
echo "$row"
for path in $paths; do
  row=$(printf "%-${width}s" "$path")
  for bytes in $sizes; do
    a=$(count $n $bytes $path); b=$(count $((2 * n)) $bytes $path)
    row="$row $(printf '%10d' $(( (b - a) / n )))"
  done
  echo "$row"
done
