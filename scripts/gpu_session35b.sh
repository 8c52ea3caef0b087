#!/usr/bin/env bash
# Session 35's second device call, $OUT/gpu_s35b.tgz:
#   holdout  issue 46: holdout 35b's truth (split.json "holdout_about_session35b":
#            RepViT-M1.1 channels_last bf16 autocast, EfficientViT-B1 fp16), defined
#            before this call and before any prediction of them;
#   keys     their key-level cuDNN probe at batches 64 and 128 only
#            (benchmarks/results/session35/keys_b64_128/): each missing key's real
#            workspace beside its bound;
#   answers  holdout 35's answers and the sizes just above them (plan_holdout35.json)
#            at their size under the truth's limit in bytes, one fresh process each;
#   val211   the validation half predicted by this host's torch 2.11 with this
#            session's code (benchmarks/zoo/predict.py, the fake device), to set
#            beside the same prediction by torch 2.13 on the development CPU. The
#            predictor's worker drops CUDA_VISIBLE_DEVICES (answer/record.py
#            _worker_env), so the empty value below does not hide the GPU from it.
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 360).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s35b 360
carry_env
PIDS=()
( holdout_truth timm_repvit_m1_1_cl_bf16ac,timm_efficientvit_b1_fp16 40 ) &
PIDS+=($!)
( run_answers benchmarks/results/session35/plan_holdout35.json answers35 3 ) &
PIDS+=($!)
( CUDA_VISIBLE_DEVICES= CACHEALLOC_CLI=/tmp/cbuild/tools/cachealloc timeout $(( $(left) - 20 )) \
    python3 benchmarks/zoo/predict.py --truth tests/data/predict/zoo_truth.json --half validation \
    --out "$R/val_unprobed_torch211.json" --jobs 6 > "$R/val211.log" 2>&1
  stamp "validation predicted by torch 2.11 CPU rc=$?" ) &
PIDS+=($!)
key_probes benchmarks/results/session35/keys_b64_128 timm_repvit_m1_1_cl_bf16ac timm_efficientvit_b1_fp16
wait "${PIDS[@]}"
cat $R/timeline.txt; tail -n 3 $R/*.log $R/keys/*.log
