#!/usr/bin/env bash
# Session 33's device call, everything in ONE file, $OUT/gpu_s33.tgz:
#   history  issue 46: holdout 32's probed row outside its band (timm CSPResNet-50
#            channels_last fp16 with GradScaler, classic b64, reserved -3.78 %), a
#            fresh process under the cap its truth row ran under, memory history on,
#            first and alone on the GPU: do its own requests, replayed with the
#            driver's addresses and without, differ as RegNet-Y-1.6GF's did, and do
#            the random segment orders reach the GPU's figure?
#   holdout  issue 46: holdout 33's truth (record.py; split.json
#            "holdout_about_session33": LCNet-1.0, PoolFormer-S12, ALBERT-base MLM),
#            defined before this call and before any prediction of them;
#   keys     issue 46: the key-level cuDNN probe of holdout 33's convnets, at the keys
#            cudnn_keys.py wrote on a CPU before any truth existed
#            (benchmarks/results/session33/keys/);
#   answers  issue 46: holdout 32's answers run at exactly their size under the
#            truth's limit in bytes (plan_holdout32.json; session 32 had no time left);
#   cpu211   the predictor's band tests under the host's torch 2.11 CPU.
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 420).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s33 420
carry_env
( cpu_pytest 300 tests/python/test_predict_honest.py tests/python/test_predict.py ) &
PIDS=($!)     # no GPU: beside the history run too
# The truth row's limit in bytes (0.151556 of an H100 80GB's 85,017,493,504 B), as a
# fraction of whichever card this is (an H200 may come instead).
frac=$(python3 -c "import torch; print(round(0.151556 * 85017493504 / torch.cuda.get_device_properties(0).total_memory, 6))")
stamp "history fraction $frac"
gpu_history cspresnet timm_cspresnet50_cl_fp16 64 "$frac"
grep -ho '"ok": [a-z]*\|"oom": "[^"]*' $R/history/*.out
( holdout_truth timm_lcnet_100_fp16,timm_poolformer_s12_ckpt_bf16ac,albert_base_mlm_bf16ac_sdpa 44 ) &
PIDS+=($!)
( run_answers benchmarks/results/session32/probe_answers/plan_holdout32.json answers32 3 ) &
PIDS+=($!)
key_probes benchmarks/results/session33/keys timm_lcnet_100_fp16 timm_poolformer_s12_ckpt_bf16ac
wait "${PIDS[@]}"
cat $R/timeline.txt; tail -n 4 $R/*.log $R/keys/*.log; tail -c 400 $R/history/*.out
