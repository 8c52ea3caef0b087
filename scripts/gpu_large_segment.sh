#!/usr/bin/env bash
# Issue 32 on the GPU machine, in one call (about 2 minutes): the
# large_segment_size_mb / re-parse probes (tests/gpu/large_segment_script.py)
# under native torch and under cachealloc (glue mode), every case in a fresh
# process, and native recordings with large_segment_size_mb in their settings
# (classic and expandable) for tests/data. Expects .carry/lib/libcachealloc.so
# (scripts/carry_build.sh). Logs and recordings go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/bindings/python
# The glue builds while native's side runs (on the second GPU).
bash scripts/gpu_glue.sh "$OUT/glue.log" 12 &
glue=$!
CASES=$(cd tests/gpu && python3 -c 'from large_segment_script import CASES; print(" ".join(CASES))')
run_side() {  # allocator gpu
  for c in $CASES; do
    (cd tests/gpu && CUDA_VISIBLE_DEVICES=$2 python3 large_segment_script.py "$1" "$c") >>"$OUT/probe_$1.jsonl" 2>>"$OUT/probe_$1.err" &
  done
  wait
}
( run_side native 1
  CUDA_VISIBLE_DEVICES=1 python3 examples/record_trace.py --workload mlp --conf large_segment_size_mb:40 \
    --out "$OUT/ls40_mlp" 2>&1 | tail -1
  CUDA_VISIBLE_DEVICES=1 python3 examples/record_trace.py --workload mlp \
    --conf large_segment_size_mb:64,expandable_segments:True --out "$OUT/x_ls64_mlp" 2>&1 | tail -1 ) &
native=$!
wait $glue || { echo "glue build failed"; tail -30 "$OUT/glue.log"; }
run_side cachealloc 0
wait
echo "== native";     sort "$OUT/probe_native.jsonl"
echo "== cachealloc"; sort "$OUT/probe_cachealloc.jsonl"
for f in "$OUT"/probe_*.err; do tail -n 5 "$f"; done
