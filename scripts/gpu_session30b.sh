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
( cpu_pytest 150 \
    "tests/python/test_predict_nohang.py::test_cpu_init_defers_random_fills_and_keeps_every_value" \
    "tests/python/test_predict_nohang.py::test_cpu_side_is_real_and_moves_become_fakes" ) &
CPID=$!
( run_answers benchmarks/results/session30/probe_answers/plan_holdout30.json answers 6 ) &
APID=$!
mkdir -p $R/keys
for spec in timm_dla34_fp32:70 tv_squeezenet1_1_fp16:70 timm_ghostnet_cl_bf16ac:0; do
  s=${spec%%:*}; share=${spec##*:}
  budget=$share; [ "$share" = 0 ] && budget=$(( $(left) - 30 ))
  [ "$budget" -gt 20 ] || break
  key_probe $K $s $budget
done
wait $CPID; wait $APID
cat $R/timeline.txt; tail -n 4 $R/*.log $R/keys/*.log
