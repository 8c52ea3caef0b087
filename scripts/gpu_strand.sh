#!/usr/bin/env bash
# Issue 48: where does PyTorch's native allocator strand memory, and does a
# policy of ours recover it at native's speed?
# Runs the strand suite's driver (benchmarks/strand/measure.py) on one GPU in
# under 9 minutes of wall time and packs everything into ONE file:
# $OUT/strand_results.tar.gz (strand.json, strand.md, the workloads' traces,
# the driver's log, the GPU's description).
#
#   bash scripts/carry_build.sh            # on the build machine, then carry .carry
#   bash scripts/gpu_strand.sh             # on the GPU machine (OUT defaults to /tmp/out)
#
# Knobs (environment): STRAND_WALL (seconds for the whole script, default
# 530), STRAND_LIMIT_GIB (the memory limit, default 6), STRAND_WORKLOADS
# (comma-separated, default all), STRAND_POLICIES (default: all of ours),
# STRAND_JOBS (probe processes at once, default 8), STRAND_STEPS (steps per
# probe, default 8), STRAND_ROUNDS (timing rounds, default 5),
# STRAND_ROUND_STEPS (steps per timing round, default 3), STRAND_TIMING_SHARE
# (share of the driver's time kept for timing, default 0.35).
# STRAND_REUSE (comma-separated strand.json files of earlier runs, e.g.
# benchmarks/results/strand_H100/strand_run1.json,...run2_stitch.json: their
# native measurements stand in, only our policies are searched; native is
# still timed in this run). STRAND_AB (A/B workloads for
# benchmarks/gpu/policy_gpu.py ab --serve after the driver, e.g.
# gpt2,resnet50,encoder,multistream; default none), STRAND_AB_POLICY
# (default: the first of STRAND_POLICIES), STRAND_AB_ROUNDS (default 5),
# STRAND_AB_STEPS (steps per round, default 8), STRAND_AB_WALL (seconds kept
# for it at the end, default 170).
# STRAND_DEVICE=cpu runs the same plumbing on the CPU at tiny sizes (a dry
# run of this script where there is no GPU; set STRAND_LIMIT_GIB to ~0.03).
# Whatever happens, the tar is written with what there is; the driver's
# own deadline ends the work, and a watchdog ends its process group 45 s
# after that.
set -uo pipefail
T0=$(date +%s)
cd "$(dirname "$0")/.."
REPO=$PWD
export CACHEALLOC_LIBRARY=$REPO/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$REPO/.carry/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 PYTHONPATH=$REPO/bindings/python
# Up to 8 probe processes share 16 cores; none needs CPU threads of its own.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
[ -x .carry/bin/cachealloc ] && export CACHEALLOC_CLI=$REPO/.carry/bin/cachealloc
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/strand.XXXXXX)
LOG=$WORK/gpu_strand.log
WALL=${STRAND_WALL:-530}

pack() {
  cp "$LOG" "$WORK/results/" 2>/dev/null
  tar czf "$OUT/strand_results.tar.gz" -C "$WORK" results && echo "packed $OUT/strand_results.tar.gz ($(du -h "$OUT/strand_results.tar.gz" | cut -f1))"
}
mkdir -p "$WORK/results"
trap pack EXIT

{
  echo "gpu_strand.sh $(git rev-parse --short HEAD 2>/dev/null) $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
  nproc
} 2>&1 | tee "$LOG"

# The PyTorch glue, built against the torch installed here when not carried
# (as gpu_session.sh does); every child process loads it.
DEVICE=${STRAND_DEVICE:-cuda}
if [ "$DEVICE" = cuda ] && [ ! -f .carry/lib/libcachealloc_torch.so ]; then
  bash scripts/gpu_glue.sh "$WORK/results/glue_build.log" \
    || { echo "glue build failed (cachealloc kinds will fail; native kinds still run)"; tail -20 "$WORK/results/glue_build.log"; } | tee -a "$LOG"
fi
ls .carry/lib .carry/bin 2>&1 | tr '\n' ' ' | tee -a "$LOG"; echo | tee -a "$LOG"
[ "$DEVICE" = cuda ] && python3 -c 'import cachealloc; print("policies:", cachealloc.policies())' 2>&1 | tee -a "$LOG"

# The driver's budget: what is left of the wall time, less packing and the
# watchdog's margin.
AB=${STRAND_AB:-}
AB_WALL=0; [ -n "$AB" ] && AB_WALL=${STRAND_AB_WALL:-170}
BUDGET=$(( WALL - ($(date +%s) - T0) - 50 - AB_WALL ))
echo "driver budget ${BUDGET} s" | tee -a "$LOG"
setsid python3 benchmarks/strand/measure.py --out "$WORK/results" --budget "$BUDGET" --device "$DEVICE" \
  --limit-gib "${STRAND_LIMIT_GIB:-6}" --jobs "${STRAND_JOBS:-8}" --steps "${STRAND_STEPS:-8}" \
  --rounds "${STRAND_ROUNDS:-5}" --round-steps "${STRAND_ROUND_STEPS:-3}" \
  --timing-share "${STRAND_TIMING_SHARE:-0.35}" \
  ${STRAND_WORKLOADS:+--workloads "$STRAND_WORKLOADS"} ${STRAND_POLICIES:+--policies "$STRAND_POLICIES"} \
  ${STRAND_REUSE:+--reuse "$STRAND_REUSE"} \
  >>"$LOG" 2>&1 &
DRIVER=$!
# Watchdog: the driver's process group (its children too) ends 45 s after
# its own deadline at the latest.
while kill -0 "$DRIVER" 2>/dev/null; do
  if [ $(( $(date +%s) - T0 )) -gt $(( WALL - 5 - AB_WALL )) ]; then
    echo "watchdog: ending the driver's process group" | tee -a "$LOG"
    kill -TERM -- "-$DRIVER" 2>/dev/null; sleep 3; kill -KILL -- "-$DRIVER" 2>/dev/null
    break
  fi
  sleep 2
done
wait "$DRIVER"; echo "driver exit status $?" | tee -a "$LOG"
[ -f "$WORK/results/strand.md" ] && cat "$WORK/results/strand.md"
if [ -n "$AB" ]; then
  # The GPU A/B workloads: persistent processes, alternating rounds; the
  # JSON is rewritten after each workload, so a cut-off run keeps what it had.
  AB_POLICY=${STRAND_AB_POLICY:-${STRAND_POLICIES%%,*}}
  LEFT=$(( WALL - ($(date +%s) - T0) - 10 ))
  echo "policy_gpu.py ab --serve --policy ${AB_POLICY:-?} --workloads $AB (${LEFT} s left)" | tee -a "$LOG"
  if [ -z "$AB_POLICY" ]; then
    echo "STRAND_AB needs STRAND_AB_POLICY or STRAND_POLICIES" | tee -a "$LOG"
  elif [ "$LEFT" -gt 20 ]; then
    setsid timeout -k 5 "$LEFT" python3 benchmarks/gpu/policy_gpu.py ab --serve --policy "$AB_POLICY" \
      --workloads "$AB" --rounds "${STRAND_AB_ROUNDS:-5}" --steps "${STRAND_AB_STEPS:-8}" --warmup 3 \
      --device "$DEVICE" --timeout "$LEFT" --json "$WORK/results/ab.json" 2>&1 | tee "$WORK/results/ab.log" | tee -a "$LOG" >/dev/null
    echo "ab exit status ${PIPESTATUS[0]}" | tee -a "$LOG"
    cat "$WORK/results/ab.log"
  fi
fi
echo "wall $(( $(date +%s) - T0 )) s" | tee -a "$LOG"
