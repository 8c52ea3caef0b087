#!/usr/bin/env bash
# Session 31's second device call, $OUT/gpu_s31b.tgz:
#   keys     issue 46: the key-level cuDNN probe (kernels/key_probe.py) of holdout
#            31's three convnets, at the keys cudnn_keys.py wrote on a CPU
#            (benchmarks/results/session31/keys/: the peaks' batches and the sizes
#            around the unprobed replay's largest), the three side by side;
#   answers  issue 46: holdout 31's unprobed answers run at exactly their size
#            (probe_answers.py run), beside the probes.
# Needs .carry. Knobs: DEADLINE (s, default 330); KEYS=0 runs the answers alone.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s31b 330
carry_env
K=benchmarks/results/session31/keys
( run_answers benchmarks/results/session31/probe_answers/plan_holdout31.json answers 6 ) &
APID=$!
mkdir -p $R/keys
PIDS=()
[ "${KEYS:-1}" = 0 ] && SETUPS="" || SETUPS="timm_repvgg_a0_fp16 timm_res2net50_cl_bf16ac timm_hrnet_w18_small_fp32"
for s in $SETUPS; do
  ( key_probe $K $s $(( $(left) - 20 )) ) &
  PIDS+=($!)
done
[ ${#PIDS[@]} -gt 0 ] && wait "${PIDS[@]}"; wait $APID
cat $R/timeline.txt; tail -n 4 $R/*.log $R/keys/*.log
