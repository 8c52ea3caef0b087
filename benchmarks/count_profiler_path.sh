#!/usr/bin/env bash
# Instructions per cache-hit allocate+free pair when PyTorch's profiler
# records memory, counted with callgrind as count_instructions.sh does
# ((2N pairs - N pairs) / N): the C API calls the glue made before the
# runtime reported (malloc + block_info + usage, block_info + free + usage:
# three device-lock acquisitions each way) against the _report calls (one
# each way), and the plain pair once the reporters are attached (their cost
# while idle), next to the plain pair (capi).
#   bash benchmarks/count_profiler_path.sh [BUILD_DIR]
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
printf '%-22s %10s %10s\n' path 512B 4MiB
for path in capi capi+profiler-3calls capi+profiler-report capi+reporter-idle; do
  row=$(printf '%-22s' "$path")
  for bytes in 512 4194304; do
    a=$(count $n $bytes $path); b=$(count $((2 * n)) $bytes $path)
    row="$row $(printf '%10d' $(( (b - a) / n )))"
  done
  echo "$row"
done
