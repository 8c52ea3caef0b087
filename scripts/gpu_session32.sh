#!/usr/bin/env bash
# Session 32's first device call, everything in ONE file, $OUT/gpu_s32.tgz:
#   holdout  issue 46: holdout 32's truth (record.py; split.json
#            "holdout_about_session32": ReXNet-1.0, CSPResNet-50, DPN-68);
#   keys     issue 46: the key-level cuDNN probe of holdout 32's convolutions, at the
#            keys cudnn_keys.py wrote on a CPU before any truth existed
#            (benchmarks/results/session32/keys/: powers of two to 256 and a range
#            around each setup's batch), the three side by side;
#   answers  issue 46: holdout 31's answers under its own probe tables run at exactly
#            their size (plan_holdout31_probed.json; session 31 had no time left);
#   history  issue 46: the validation row outside its band when probed (torchvision
#            RegNet-Y-1.6GF channels_last bf16 weights, classic b64, reserved -3.14 %)
#            and its neighbour inside (b128), each a fresh process under the cap its
#            truth row ran under (the same fraction), memory history on, first and
#            alone on the GPU, for a CPU-side diff of the requests;
#   cpu211   this session's predictor tests under the host's torch 2.11 CPU.
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 420).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s32 420
carry_env
( cpu_pytest 300 tests/python/test_predict_honest.py tests/python/test_predict_page.py ) &
PIDS=($!)     # no GPU: beside the history runs too
for bf in 64:0.050519 128:0.101037; do
  gpu_history regnet tv_regnet_y_1_6gf_cl_bf16w ${bf%%:*} ${bf##*:}
done
grep -ho '"ok": [a-z]*\|"oom": "[^"]*' $R/history/*.out
( holdout_truth timm_rexnet_100_fp32,timm_cspresnet50_cl_fp16,timm_dpn68_bf16ac 44 ) &
PIDS+=($!)
( run_answers benchmarks/results/session31/probe_answers/plan_holdout31_probed.json answers31 3 ) &
PIDS+=($!)
key_probes benchmarks/results/session32/keys timm_rexnet_100_fp32 timm_cspresnet50_cl_fp16 timm_dpn68_bf16ac
wait "${PIDS[@]}"
cat $R/timeline.txt; tail -n 4 $R/*.log $R/keys/*.log; tail -c 400 $R/history/*.out
