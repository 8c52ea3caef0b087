#!/usr/bin/env bash
# Session 25's second device call (one H100), everything in ONE file,
# $OUT/gpu_s25b.tgz (plus gpu_two_streams_rescue.sh's own tar):
#   GPU, alone: issue 48's two_streams step time under `rescue` after its
#     20 MiB handles (scripts/gpu_two_streams_rescue.sh; needs .carry);
#   CPU alongside (torch 2.11 of the GPU host, no GPU visible, one thread a
#     prediction, PRED_JOBS at once): the zoo's predictions with this
#     session's predictor, to compare with torch 2.13 here: validation
#     (peaks and largest), tuning (peaks), the session-25 holdout unprobed
#     and with its key-level probe tables, the validation vision rows with
#     theirs.
# Knobs: PRED_JOBS (6), DEADLINE (500 s), NO_STRAND.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/s25b; mkdir -p $R
DEADLINE=${DEADLINE:-500}; t0=$SECONDS
left() { echo $(( DEADLINE - (SECONDS - t0) )); }
stamp() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$R/timeline.txt"; }
pack() { tar czf "$OUT/gpu_s25b.tgz" -C /tmp s25b 2>/dev/null; }
trap pack EXIT
Z=benchmarks/results/zoo_session25_H100; P=$Z/probe
python3 benchmarks/zoo/merge_tables.py $R/probe_validation.json $P/tv_efficientnet_b0_cl_fp16.table.json.gz \
  $P/timm_efficientnet_b2_ckpt_bf16ac_fused.table.json.gz $P/tv_regnet_y_1_6gf_cl_bf16w.table.json.gz \
  $P/timm_regnety_032_fp32_fused_bench.table.json.gz $P/tv_mobilenet_v3_large_fp32_bench.table.json.gz \
  $P/timm_deit_base_distilled_bf16ac_fused.table.json.gz $P/tv_swin_t_fp16_eager.table.json.gz \
  $P/timm_swin_small_ckpt_bf16w.table.json.gz > $R/merge.log 2>&1
python3 benchmarks/zoo/merge_tables.py $R/probe_holdout.json $P/tv_resnext50_32x4d_cl_bf16ac_bench.table.json.gz \
  $P/tv_shufflenet_v2_x1_0_fp32_bench.table.json.gz $P/timm_mixnet_s_fp16.table.json.gz >> $R/merge.log 2>&1
( export CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks PYTHONUNBUFFERED=1
  export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-} CACHEALLOC_CLI=$PWD/.carry/bin/cachealloc
  J=${PRED_JOBS:-6}; T=$(( $(left) - 20 ))
  timeout $T python3 benchmarks/zoo/predict.py --truth $Z/holdout_truth_H100.json --out $R/holdout_unprobed.json \
      --jobs 2 --timeout 300 > $R/holdout_unprobed.log 2>&1 &
  CACHEALLOC_CUDNN_TABLE=$R/probe_holdout.json timeout $T python3 benchmarks/zoo/predict.py --truth $Z/holdout_truth_H100.json \
      --out $R/holdout_probed.json --jobs 2 --timeout 300 > $R/holdout_probed.log 2>&1 &
  timeout $T python3 benchmarks/zoo/predict.py --truth tests/data/predict/zoo_truth.json --half validation \
      --out $R/validation.json --jobs $J --timeout 300 > $R/validation.log 2>&1
  CACHEALLOC_CUDNN_TABLE=$R/probe_validation.json timeout $(( $(left) - 15 )) python3 benchmarks/zoo/predict.py \
      --truth tests/data/predict/zoo_truth.json --setups tv_efficientnet_b0_cl_fp16,timm_efficientnet_b2_ckpt_bf16ac_fused,tv_regnet_y_1_6gf_cl_bf16w,timm_regnety_032_fp32_fused_bench,tv_mobilenet_v3_large_fp32_bench,timm_deit_base_distilled_bf16ac_fused,tv_swin_t_fp16_eager,timm_swin_small_ckpt_bf16w \
      --out $R/validation_probed.json --jobs $J --timeout 300 > $R/validation_probed.log 2>&1 &
  timeout $(( $(left) - 15 )) python3 benchmarks/zoo/predict.py --truth tests/data/predict/zoo_truth.json --half tuning \
      --no-largest --out $R/tuning.json --jobs 2 --timeout 300 > $R/tuning.log 2>&1
  wait; stamp "CPU predictions done" ) &
if [ -z "${NO_STRAND:-}" ]; then
  OUT=$OUT STRAND_WALL=${STRAND_WALL:-330} bash scripts/gpu_two_streams_rescue.sh > $R/two_streams.log 2>&1
  stamp "two_streams rc=$?"
fi
wait
tail -n 30 $R/two_streams.log; tail -n 2 $R/*.log; cat $R/timeline.txt
