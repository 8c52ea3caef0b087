#!/usr/bin/env bash
# One device call (session 24): the zoo's cuDNN workspace probes
# (gpu_cudnn_zoo.sh) beside an op probe of one tuning row (gpu_probe_rows.sh),
# then, on an H100 only, issue 48's strand run of `rescue` on the five
# workloads not yet measured (gpu_strand.sh; native's figures reused from the
# H100 runs, so another GPU would not compare). Each part packs its own tar
# under $OUT.
#   bash scripts/carry_build.sh   # here, then carry .carry
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$SECONDS
ZOO_PROBE_TIMEOUT=${ZOO_PROBE_TIMEOUT:-170} bash scripts/gpu_cudnn_zoo.sh > "$OUT/cudnn_zoo.log" 2>&1 &
PROBE_ROWS=${PROBE_ROWS:-tv_convnext_small_cl_bf16ac:32} timeout 200 bash scripts/gpu_probe_rows.sh > "$OUT/probe_rows.log" 2>&1 &
wait
echo "probes done in $((SECONDS - t0)) s"; tail -n 6 "$OUT/cudnn_zoo.log"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$GPU"
if [[ "$GPU" == *H100* ]] && [ -z "${NO_STRAND:-}" ]; then
  STRAND_WALL=${STRAND_WALL:-$(( 580 - (SECONDS - t0) ))} \
  STRAND_WORKLOADS=${STRAND_WORKLOADS:-finetune_padding,kv_generation,rl_loop,pipeline_1f1b,two_streams} \
  STRAND_POLICIES=rescue \
  STRAND_REUSE=benchmarks/results/strand_H100/strand_run1.json,benchmarks/results/strand_H100/strand_run2_stitch.json \
  bash scripts/gpu_strand.sh 2>&1 | tail -25
else
  echo "no strand run: not an H100 ($GPU) or NO_STRAND set"
fi
echo "wall $((SECONDS - t0)) s"
