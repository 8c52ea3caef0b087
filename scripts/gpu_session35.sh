#!/usr/bin/env bash
# Session 35's device call, everything in ONE file, $OUT/gpu_s35.tgz:
#   holdout  issue 46: holdout 35's truth (split.json "holdout_about_session35":
#            EdgeNeXt-S channels_last fp16, PVT-v2-B1 bf16 autocast), defined before
#            this call and before any prediction of them, to check session 34's
#            key-format rule on setups nobody has seen;
#   keys     their key-level cuDNN probe, at the keys cudnn_keys.py wrote on a CPU
#            (benchmarks/results/session35/keys/);
#   answers  holdout 34's two answers no GPU run had checked (plan_holdout34.json:
#            unprobed MobileOne-S1 at 116, classic and expandable), at their size
#            under the truth's limit in bytes;
#   cpu211   the predictor's tests under the host's torch 2.11 CPU, in three shards
#            beside the GPU work, with session 34's final code.
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 430).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s35 430
carry_env
PIDS=()
cpu_pytest_shards 3 380 tests/python/test_predict_honest.py tests/python/test_predict.py \
  tests/python/test_predict_key_probe.py
( holdout_truth timm_edgenext_small_cl_fp16,timm_pvt_v2_b1_bf16ac 40 ) &
PIDS+=($!)
( run_answers benchmarks/results/session34/plan_holdout34.json answers34 2 ) &
PIDS+=($!)
key_probes benchmarks/results/session35/keys timm_edgenext_small_cl_fp16 timm_pvt_v2_b1_bf16ac
wait "${PIDS[@]}"
cat $R/timeline.txt; tail -n 3 $R/*.log $R/keys/*.log
