#!/usr/bin/env bash
# Session 28's device call (one H100), everything in ONE file, $OUT/gpu_s28.tgz:
#   holdout  issue 46: the session-28 holdout's truth (record.py; split.json
#            "holdout_about_session28": VGG-11-BN, MNASNet 1.0, Gemma-style,
#            DistilBERT), in the background beside the probes (memory only);
#   probe    issue 46: the GPU's request stream (op_probe.py gpu, classic) of
#            EfficientNet-B2 b48, the validation row outside its band (its probe
#            crashed in session 24; tried again). Read only to report: a
#            validation miss is fixed by a general rule, never by its own data;
#   cpu211   issue 46: tests/python/test_predict_cudnn.py under this host's torch
#            2.11 CPU (no GPU visible): session 27's _convolution fix. Session
#            27b's run passed the fake step and failed only on the tool's library
#            path (LD_LIBRARY_PATH now set).
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 300),
# ORDER (default "holdout cpu211 probe wait_bg"), PROBE_ROWS ("FILE.py:FUNC:batch ...").
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s28 300
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks
export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
HOLDOUT=${HOLDOUT:-tv_vgg11_bn_bf16ac,tv_mnasnet1_0_cl_fp16,gemma_bf16w_sdpa,distilbert_mlm_fp16_eager}
holdout() {
  ( timeout $(( $(left) - 20 )) python3 benchmarks/zoo/record.py run \
      --out $R/holdout --setups "$HOLDOUT" --cpus 8 --gpu-gib 48 --deadline $(( $(left) - 30 )) > $R/holdout.log 2>&1
    stamp "holdout truth rc=$?" ) &
  HPID=$!
}
cpu211() {
  ( CACHEALLOC_CLI=$PWD/.carry/bin/cachealloc CUDA_VISIBLE_DEVICES= timeout 200 \
      python3 -m pytest -q -p no:cacheprovider tests/python/test_predict_cudnn.py > $R/cpu211.log 2>&1
    stamp "torch 2.11 CPU predict tests rc=$?" ) &
  CPID=$!
}
probe() {
  for row in ${PROBE_ROWS:-benchmarks/zoo/setups.py:timm_efficientnet_b2_ckpt_bf16ac_fused:48}; do
    b=${row##*:}; builder=${row%:*}; s=${builder##*:}
    [ "$(left)" -gt 60 ] || break
    timeout 120 python3 benchmarks/predict/op_probe.py gpu --builder $builder --batch $b \
      --name ${s}_classic --out $R --snapshot $R/${s}_classic_b$b.pickle.gz > $R/probe_$s.log 2>&1
    stamp "op probe $s b$b classic rc=$?"
  done
}
wait_bg() { [ -n "${HPID:-}" ] && wait $HPID; [ -n "${CPID:-}" ] && wait $CPID; return 0; }
for part in ${ORDER:-holdout cpu211 probe wait_bg}; do
  [ "$(left)" -gt 40 ] && $part
done
cat $R/timeline.txt; tail -n 6 $R/*.log
