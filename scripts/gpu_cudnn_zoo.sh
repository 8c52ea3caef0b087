#!/usr/bin/env bash
# cuDNN workspace probes of the zoo's convnet and vision-transformer setups (issue 46: measure, do not
# hand-model), one table per half, written by benchmarks/predict/cudnn_probe.py
# --zoo (cudnn.benchmark forced off: the heuristics' plans). The halves run
# side by side (heuristic plans do not depend on free memory). Everything
# lands in ONE file, $OUT/cudnn_zoo.tgz. No cachealloc build needed.
#   ZOO_PROBE_TIMEOUT (seconds per half, default 240)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/cudnn_zoo; mkdir -p $R
export PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
pack() { tar czf "$OUT/cudnn_zoo.tgz" -C /tmp cudnn_zoo 2>/dev/null; }
trap pack EXIT
# setup:batches per half (the setup's measured batch and half of it)
TUNING="tv_vit_b16_fp32:16,32;hf_vit_base_fp16_ckpt_eager:32,64;tv_convnext_tiny_fp32:32,64;tv_convnext_small_cl_bf16ac:32,64;timm_resnet50d_ckpt_bf16w_fused:48,96;tv_resnet50_cl_fp16_bench:64,128"
VALIDATION="timm_deit_base_distilled_bf16ac_fused:32,64;tv_swin_t_fp16_eager:32,64;timm_swin_small_ckpt_bf16w:32,64;tv_efficientnet_b0_cl_fp16:64,128;timm_efficientnet_b2_ckpt_bf16ac_fused:48,96;tv_regnet_y_1_6gf_cl_bf16w:64,128;tv_mobilenet_v3_large_fp32_bench:128,256;timm_regnety_032_fp32_fused_bench:32,64"
HOLDOUT="tv_densenet121_bf16ac:32,64"
names() { echo "$1" | tr ';' '\n' | cut -d: -f1 | paste -sd, -; }
for half in tuning validation holdout; do
  spec=${half^^}; spec=${!spec}
  timeout "${ZOO_PROBE_TIMEOUT:-240}" python3 benchmarks/predict/cudnn_probe.py "$R/cudnn_zoo_$half.json" \
    --zoo --workloads "$(names "$spec")" --batches "$spec" > "$R/$half.log" 2>&1 &
done
wait
tail -n 4 $R/*.log
