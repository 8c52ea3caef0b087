#!/usr/bin/env bash
# Issue 48, `rescue` on `two_streams` after its pages moved to 20 MiB handles
# where memory moves between streams, and its reclaim to exactly what a
# mapping needs (branch coalesce; docs/fragmentation.md). Session 24 measured
# rescue 1.32x native expandable's step time there (median of 5 rounds).
# This re-runs only that workload, with the same harness as session 24's
# strand run (scripts/gpu_strand.sh -> benchmarks/strand/measure.py):
#   - rescue's largest size under the 6 GiB limit (search.largest, fresh
#     process per probe; the timing needs it, and the fix may move it);
#   - step time: one persistent process each for native classic, native
#     expandable (advised is the same config on two_streams) and rescue, at
#     95 % of the smallest largest size, >= 5 alternating rounds (default 7)
#     of 3 steps under the limit; per-round ratios to native's best.
# Native's searches are reused from the H100 runs (strand_run1.json,
# strand_run2_stitch.json), as session 24 did; native is timed again here.
# One file comes back: $OUT/strand_results.tar.gz (strand.json, strand.md,
# the driver's log and per-process timing logs). Under 6 minutes of wall
# time (STRAND_WALL, default 330 s, covers everything but the final tar).
#
#   bash scripts/carry_build.sh              # on the build machine, carry .carry
#   bash scripts/gpu_two_streams_rescue.sh   # on the GPU machine (OUT: /tmp/out)
#
# Knobs: those of gpu_strand.sh; this sets STRAND_WORKLOADS=two_streams and
# STRAND_POLICIES=rescue, and defaults STRAND_WALL=330, STRAND_ROUNDS=7,
# STRAND_TIMING_SHARE=0.5, STRAND_REUSE to the two H100 files.
# Dry run without a GPU: STRAND_DEVICE=cpu STRAND_LIMIT_GIB=0.105
# STRAND_REUSE=<a CPU run's strand.json> (the H100 files' limit does not
# match a CPU run's).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$SECONDS
if [ "${STRAND_DEVICE:-cuda}" = cuda ]; then
  GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  echo "GPU: ${GPU:-none found}"
  # Native's figures come from H100 runs: on another GPU the largest sizes
  # would not compare (the step-time ratios still would: native is timed here).
  [[ "$GPU" == *H100* ]] || echo "warning: not an H100; native's reused searches were made on one"
  [ -f .carry/lib/libcachealloc.so ] || echo "warning: .carry/lib/libcachealloc.so missing (run scripts/carry_build.sh and carry .carry)"
fi
STRAND_WORKLOADS=two_streams STRAND_POLICIES=rescue \
STRAND_WALL=${STRAND_WALL:-330} STRAND_ROUNDS=${STRAND_ROUNDS:-7} \
STRAND_TIMING_SHARE=${STRAND_TIMING_SHARE:-0.5} \
STRAND_REUSE=${STRAND_REUSE:-benchmarks/results/strand_H100/strand_run1.json,benchmarks/results/strand_H100/strand_run2_stitch.json} \
  bash scripts/gpu_strand.sh 2>&1 | tail -40
echo "gpu_two_streams_rescue.sh: wall $((SECONDS - T0)) s; results: $OUT/strand_results.tar.gz"
