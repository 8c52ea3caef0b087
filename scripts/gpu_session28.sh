#!/usr/bin/env bash
# Session 28's device call (one H100), everything in ONE file, $OUT/gpu_s28.tgz:
#   holdout  issue 46: the session-28 holdout's truth (record.py; split.json
#            "holdout_about_session28": VGG-11-BN, MNASNet 1.0, Gemma-style,
#            DistilBERT), in the background beside the probes (memory only);
#   probe    issue 46: the GPU's request stream (op_probe.py gpu, classic) of
#            EfficientNet-B2 b48, the validation row outside its band (its probe
#            crashed in session 24; tried again). Read only to report: a
#            validation miss is fixed by a general rule, never by its own data;
#   sizes    issue 46: is the GPU's largest batch under a limit monotone? Two
#            validation rows where the predictor's probed answer lies above the
#            GPU's first failing size (EfficientNet-B2 classic: replay 107, GPU
#            trains 97 and fails at 98 and 99; Swin-S expandable: replay 74, GPU
#            trains 70 and fails at 71): fresh processes at the sizes between,
#            under the truth's fraction (read to report, not to tune);
#   cpu211   issue 46: tests/python/test_predict_cudnn.py under this host's torch
#            2.11 CPU (no GPU visible): session 27's _convolution fix. Session
#            27b's run passed the fake step and failed only on the tool's library
#            path (LD_LIBRARY_PATH now set).
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 300),
# ORDER (default "holdout cpu211 sizes probe wait_bg"), SIZES, PROBE_ROWS ("FILE.py:FUNC:batch ...").
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
# setup:conf:fraction:sizes (record_truth.py worker, one fresh process each, 4 at a time).
# The default fractions are of an H100's total memory: on another card they give another
# limit (session 29 ran them on an H200 first, 1.77x too high). Pass SIZES with the
# fraction rescaled (limit_bytes / this card's total), or use benchmarks/zoo/probe_answers.py,
# which rescales the truth's limit in bytes itself.
SIZES=${SIZES:-timm_efficientnet_b2_ckpt_bf16ac_fused:classic:0.025356:100,102,103,104,105,106,107,108 timm_swin_small_ckpt_bf16w:expandable:0.022172:72,73,74,75}
sizes() {
  mkdir -p $R/sizes; SPIDS=()
  for row in $SIZES; do
    IFS=: read -r s conf frac list <<< "$row"
    for b in ${list//,/ }; do
      [ "$(left)" -gt 50 ] || break
      spec="{\"workload\": \"$s\", \"builder\": \"benchmarks/zoo/setups.py:$s\", \"batch\": $b, \"conf\": \"$conf\", \"fraction\": $frac, \"steps\": 3, \"max_step_calls\": 15}"
      alloc=""; [ "$conf" = expandable ] && alloc="expandable_segments:True"
      ( env -u PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF="$alloc" OMP_NUM_THREADS=2 timeout 120 \
          python3 benchmarks/predict/record_truth.py worker --spec "$spec" 2> $R/sizes/${s}_${conf}_b$b.err \
          | grep '^RESULT' | sed 's/^RESULT //' > $R/sizes/${s}_${conf}_b$b.json
        stamp "size $s $conf b$b rc=$?" ) &
      SPIDS+=($!)
      [ ${#SPIDS[@]} -ge 4 ] && { wait ${SPIDS[0]}; SPIDS=("${SPIDS[@]:1}"); }
    done
  done
  for p in "${SPIDS[@]}"; do wait $p; done
  python3 - "$R/sizes" <<'PY' | tee $R/sizes.txt
import json, glob, sys
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    try:
        r = json.load(open(f))
    except ValueError:
        print(f.rsplit('/', 1)[1], 'no result'); continue
    print(f.rsplit('/', 1)[1], 'ok' if r.get('ok') else 'OOM', 'alloc MiB %.1f' % (r['max_memory_allocated'] / 2**20),
          'reserved MiB %.1f' % (r['max_memory_reserved'] / 2**20), (r.get('oom') or '')[:90])
PY
}
wait_bg() { [ -n "${HPID:-}" ] && wait $HPID; [ -n "${CPID:-}" ] && wait $CPID; return 0; }
for part in ${ORDER:-holdout cpu211 sizes probe wait_bg}; do
  [ "$(left)" -gt 40 ] && $part
done
cat $R/timeline.txt; tail -n 6 $R/*.log
