#!/usr/bin/env bash
# Session 27's device call (one H100), everything in ONE file, $OUT/gpu_s27.tgz:
#   probe      issue 46: the GPU's request stream (op_probe.py gpu, classic) of
#              the tuning row that sets the convnet band (tv_resnet50_cl_fp16_bench
#              b64: +1.9 % peak allocated, with or without its workspaces) and of
#              the validation row that kept the transformer band wide
#              (t5_base_fp32_sdpa b8: reserved -1.25 %), to compare here;
#   holdout    issue 46: the session-27 holdout's truth (record.py; split.json
#              "holdout": Pegasus-style, Phi-style, BEiT-B/16), in the background
#              beside the probes (memory only; nothing is timed meanwhile);
#   cpu211     issue 46: session 26's predictor change (convolutions without cuDNN)
#              under torch 2.11 on this host's CPU: tests/python/test_predict_cudnn.py
#              (the fake device needs no GPU), in the background beside the probes;
#   open_peaks issue 48: the open peaks of native classic, expandable, advised and
#              rescue on all eight strand workloads in one run (open_peaks.py);
#   timing     issue 48: two_streams under rescue again (gpu_two_streams_rescue.sh:
#              rescue's largest, then >= 5 alternating timing rounds).
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 480),
# ORDER (default "holdout cpu211 probe wait_holdout open_peaks timing"), PROBE_ROWS ("setup:batch ...").
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s27 480
export PYTHONUNBUFFERED=1
export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
glue() {  # the glue for this host's torch, as gpu_strand.sh builds it
  [ -f .carry/lib/libcachealloc_torch.so ] && return 0
  bash scripts/gpu_glue.sh $R/glue_build.log
  stamp "glue build rc=$?"
}
probe() {
  for row in ${PROBE_ROWS:-tv_resnet50_cl_fp16_bench:64 t5_base_fp32_sdpa:8}; do
    s=${row%%:*}; b=${row##*:}
    [ "$(left)" -gt 60 ] || break
    PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks timeout 120 python3 benchmarks/predict/op_probe.py gpu \
      --builder benchmarks/zoo/setups.py:$s --batch $b --name ${s}_classic --out $R \
      --snapshot $R/${s}_classic_b$b.pickle.gz > $R/probe_$s.log 2>&1
    stamp "op probe $s b$b classic rc=$?"
  done
}
HOLDOUT=${HOLDOUT:-pegasus_fp32_sdpa,phi_bf16ac_sdpa,timm_beit_base_fp16}
holdout() {
  ( PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks timeout $(( $(left) - 200 )) python3 benchmarks/zoo/record.py run \
      --out $R/holdout --setups "$HOLDOUT" --cpus 8 --gpu-gib 44 --deadline $(( $(left) - 210 )) > $R/holdout.log 2>&1
    stamp "holdout truth rc=$?" ) &
  HPID=$!
}
wait_holdout() { [ -n "${HPID:-}" ] && wait $HPID; [ -n "${CPID:-}" ] && wait $CPID; return 0; }
cpu211() {
  ( CACHEALLOC_CLI=$PWD/.carry/bin/cachealloc PYTHONPATH=$PWD/bindings/python CUDA_VISIBLE_DEVICES= \
      timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_predict_cudnn.py > $R/cpu211.log 2>&1
    stamp "torch 2.11 CPU predict tests rc=$?" ) &
  CPID=$!
}
REUSE=benchmarks/results/strand_H100/strand_run1.json,benchmarks/results/strand_H100/strand_run2_stitch.json
open_peaks() {
  glue
  [ "$(left)" -gt 60 ] || return 0
  ( export PYTHONPATH=$PWD/bindings/python OMP_NUM_THREADS=2
    timeout $(( $(left) - 15 )) python3 benchmarks/strand/open_peaks.py --reuse $REUSE --out $R/open_peaks.json \
      --policies rescue --jobs 5 > $R/open_peaks.log 2>&1 )
  stamp "open peaks rc=$?"
}
timing() {
  glue
  mkdir -p $R/ts
  OUT=$R/ts STRAND_WALL=$(( $(left) - 30 )) STRAND_REUSE=$REUSE \
    bash scripts/gpu_two_streams_rescue.sh > $R/two_streams.log 2>&1
  stamp "two_streams rc=$?"
}
for part in ${ORDER:-holdout cpu211 probe wait_holdout open_peaks timing}; do
  [ "$(left)" -gt 60 ] && $part
done
cat $R/timeline.txt; tail -n 8 $R/*.log
