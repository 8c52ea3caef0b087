#!/usr/bin/env bash
# Session 34's device call, everything in ONE file, $OUT/gpu_s34.tgz:
#   copies   issue 46: the host-copy and sliced-convolution requests of
#            tests/python/predict_steps/steps.py:host_copies on the real GPU
#            (record_step_gpu.py), for the test of kernels/cuda_copy.py and
#            kernels/conv_input.py, the rules made from CSPResNet-50's history;
#   holdout  issue 46: holdout 34's truth (split.json "holdout_about_session34":
#            InceptionNeXt-T, MobileOne-S1), defined before this call and before
#            any prediction of them, to check those rules on setups nobody has seen;
#   keys     its key-level cuDNN probe, at the keys cudnn_keys.py wrote on a CPU
#            (benchmarks/results/session34/keys/);
#   answers  holdout 33's answers run at exactly their size under the truth's limit
#            (plan_holdout33.json: unprobed, and probed after the measured-size search);
#   cpu211   the predictor's tests under the host's torch 2.11 CPU, in three shards
#            beside the GPU work (session 33's one process was cut at 300 s).
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 430).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s34 430
carry_env
python3 benchmarks/predict/record_step_gpu.py tests/python/predict_steps/steps.py:host_copies 1 \
  "$R/host_copies_H100.pickle.gz" > "$R/copies.log" 2>&1
stamp "copies rc=$?"
PIDS=()
cpu_pytest_shards 3 380 tests/python/test_predict_honest.py tests/python/test_predict.py
( holdout_truth timm_inception_next_tiny_bf16ac,timm_mobileone_s1_cl_fp16 40 ) &
PIDS+=($!)
( run_answers benchmarks/results/session34/plan_holdout33.json answers33 3 ) &
PIDS+=($!)
key_probes benchmarks/results/session34/keys timm_inception_next_tiny_bf16ac timm_mobileone_s1_cl_fp16
wait "${PIDS[@]}"
cat $R/timeline.txt; tail -n 3 $R/*.log $R/keys/*.log
