#!/usr/bin/env bash
# Instructions per cache-hit allocate + device-less free pair (PyTorch's
# tensor deleter gives no device) on each of 4 simulated devices, counted
# with callgrind as count_instructions.sh does ((2N pairs - N pairs) / N),
# and the ratio last / first: the load-independent form of free_path_bench.
#   bash benchmarks/count_free_path.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
bench="$build/benchmarks/free_path_bench"
[ -x "$bench" ] || { echo "no $bench: build first (ninja -C $build free_path_bench)"; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 2; }
n=20000
count() {  # device pairs -> instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bench" count "$1" "$2" 2>&1 \
    | awk '/Collected/ {print $4}'
}
declare -a per
for d in 0 1 2 3; do
  a=$(count $d $n); b=$(count $d $((2 * n)))
  per[$d]=$(( (b - a) / n ))
  echo "device $d: ${per[$d]} instructions per pair"
done
awk -v f="${per[0]}" -v l="${per[3]}" 'BEGIN { r = l / f; printf "ratio device 3 / device 0: %.3f (target 0.95-1.05): %s\n", r, (r >= 0.95 && r <= 1.05) ? "met" : "NOT met" }'
