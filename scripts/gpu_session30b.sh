#!/usr/bin/env bash
# Session 30's second device call, $OUT/gpu_s30b.tgz:
#   keys     issue 46: the key-level cuDNN probe (kernels/key_probe.py) of holdout
#            30's three convnets, at the keys cudnn_keys.py wrote on a CPU
#            (benchmarks/results/session30/keys/: the peaks' batches, the
#            search's doubling sizes and the sizes around the unprobed replay's
#            largest), one model after another, each cut at its share of the time;
#   answers  issue 46: holdout 30's unprobed answers run at exactly their size
#            (probe_answers.py run), beside the probe;
#   cpu211   the deferred-fills test under this host's torch 2.11 CPU, with the
#            CLI where conftest looks for it.
# Needs .carry. Knobs: DEADLINE (s, default 420).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s30b 420
carry_env
K=benchmarks/results/session30/keys
( mkdir -p /tmp/cbuild/tools && cp .carry/bin/cachealloc /tmp/cbuild/tools/ &&
  CACHEALLOC_BUILD=/tmp/cbuild CACHEALLOC_CLI=/tmp/cbuild/tools/cachealloc CUDA_VISIBLE_DEVICES= timeout 150 \
    python3 -m pytest -q -p no:cacheprovider \
    "tests/python/test_predict_nohang.py::test_cpu_init_defers_random_fills_and_keeps_every_value" \
    "tests/python/test_predict_nohang.py::test_cpu_side_is_real_and_moves_become_fakes" > $R/cpu211.log 2>&1
  stamp "torch 2.11 CPU tests rc=$?" ) &
CPID=$!
( timeout $(( $(left) - 25 )) python3 benchmarks/zoo/probe_answers.py run \
    --plan benchmarks/results/session30/probe_answers/plan_holdout30.json --out $R/answers \
    --jobs 6 --deadline $(( $(left) - 35 )) > $R/answers.log 2>&1
  stamp "answers rc=$?" ) &
APID=$!
mkdir -p $R/keys
for spec in timm_dla34_fp32:70 tv_squeezenet1_1_fp16:70 timm_ghostnet_cl_bf16ac:0; do
  s=${spec%%:*}; share=${spec##*:}
  budget=$share; [ "$share" = 0 ] && budget=$(( $(left) - 30 ))
  [ "$budget" -gt 20 ] || break
  timeout $budget python3 -m cachealloc.predict.kernels.key_probe $K/$s.keys.json \
    --out $R/keys/$s.table.json > $R/keys/$s.log 2>&1
  stamp "key probe $s rc=$?"
done
wait $CPID; wait $APID
gzip -f $R/keys/*.table.json
cat $R/timeline.txt; tail -n 4 $R/*.log $R/keys/*.log
