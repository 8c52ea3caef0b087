#!/usr/bin/env bash
# Session 30's first device call, everything in ONE file, $OUT/gpu_s30.tgz:
#   holdout  issue 46: holdout 30's truth (record.py; split.json
#            "holdout_about_session30": DLA-34, SqueezeNet 1.1, GhostNet 1.0,
#            ELECTRA-base MLM, BLOOM-style), in the background;
#   cpu211   issue 46 ("the same on CPU torch 2.11 and 2.13"): the predictor's
#            tests of this session's changes (deferred CPU fills, in-place
#            foreach, the device query) and the cuDNN ones under this host's
#            torch 2.11 CPU (no GPU visible).
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 300), HOLDOUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s30 300
carry_env
HOLDOUT=${HOLDOUT:-timm_dla34_fp32,tv_squeezenet1_1_fp16,timm_ghostnet_cl_bf16ac,electra_base_mlm_bf16ac,bloom_bf16w_eager}
( holdout_truth "$HOLDOUT" 48 ) &
HPID=$!
( CACHEALLOC_CLI=$PWD/.carry/bin/cachealloc CUDA_VISIBLE_DEVICES= timeout 240 \
    python3 -m pytest -q -p no:cacheprovider tests/python/test_predict_foreach_inplace.py \
    tests/python/test_predict_cudnn.py "tests/python/test_predict_nohang.py::test_cpu_init_defers_random_fills_and_keeps_every_value" \
    "tests/python/test_predict_nohang.py::test_cpu_side_is_real_and_moves_become_fakes" > $R/cpu211.log 2>&1
  stamp "torch 2.11 CPU predict tests rc=$?" ) &
CPID=$!
wait $CPID; wait $HPID
cat $R/timeline.txt; tail -n 6 $R/*.log
