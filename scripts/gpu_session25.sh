#!/usr/bin/env bash
# Session 25's device call (one H100, 16 cores), everything in ONE file,
# $OUT/gpu_s25.tgz:
#   GPU, side by side: the key-level cuDNN probes of the zoo rows' keys
#     (benchmarks/results/zoo_session25_H100/keys/*.keys.json, written on a
#     CPU by benchmarks/zoo/cudnn_keys.py; measured by
#     cachealloc/predict/kernels/key_probe.py, by path: no cachealloc build
#     needed), three at a time;
#     and the session-25 holdout setups' truth (benchmarks/zoo/record.py,
#     split.json "holdout": measured once, never tuned on).
# Knobs: HOLDOUT (setups; empty: none), KEYS (keys files; default all),
# DEADLINE (seconds in all, 560).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/s25; mkdir -p $R/probe
export PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
DEADLINE=${DEADLINE:-560}; t0=$SECONDS
left() { echo $(( DEADLINE - (SECONDS - t0) )); }
stamp() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$R/timeline.txt"; }
pack() { tar czf "$OUT/gpu_s25.tgz" -C /tmp s25 2>/dev/null; }
trap pack EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt 2>&1
HOLDOUT=${HOLDOUT-tv_resnext50_32x4d_cl_bf16ac_bench,tv_shufflenet_v2_x1_0_fp32_bench,timm_mixnet_s_fp16}
if [ -n "$HOLDOUT" ]; then
  ( timeout $(( $(left) - 30 )) python3 benchmarks/zoo/record.py run --out $R/holdout --setups "$HOLDOUT" \
      --cpus 6 --gpu-gib 44 --deadline $(( $(left) - 50 )) > "$R/holdout.log" 2>&1
    stamp "holdout truth rc=$?" ) &
fi
KEYS=${KEYS:-$(ls -S benchmarks/results/zoo_session25_H100/keys/*.keys.json*)}  # largest first
export R
echo $KEYS | tr ' ' '\n' | xargs -P 3 -I{} bash -c \
  'n=$(basename {} | sed s/.keys.json.*//); timeout 420 python3 bindings/python/cachealloc/predict/kernels/key_probe.py {} --out $R/probe/$n.table.json > $R/probe/$n.log 2>&1; echo "[probe $n rc=$?]" >> $R/timeline.txt'
stamp "probes done"
wait
stamp "all done"
tail -n 2 $R/probe/*.log; tail -n 25 $R/holdout.log; cat $R/timeline.txt
