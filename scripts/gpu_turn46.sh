#!/usr/bin/env bash
# Issue 46's (and 47's) GPU work in one device call (one H100, 16 cores),
# under 10 minutes; everything lands in ONE file, $OUT/gpu_turn46.tgz (the
# device tool returns few files). Needs .carry from scripts/carry_build.sh.
#   GPU, side by side:  the holdout setups' truth (benchmarks/zoo/record.py,
#                       split.json "holdout": measured once, never tuned on),
#                       the GPU tests of the engine refactor (issue 47:
#                       test_plugin, test_torch_api, test_policy_gpu);
#   CPU, alongside:     the zoo's predictions (peaks at every measured batch
#                       and the largest batch) with this machine's torch
#                       (2.11), no GPU visible (benchmarks/zoo/predict.py);
#   GPU, alone, last:   the OOM recorder's step-time cost (ab_train.py
#                       --oom-recorder), if time is left.
# Knobs: PRED_HALF (validation), PRED_JOBS (8), HOLDOUT (the holdout setups;
# empty: no holdout truth), TESTS_K (the pytest -k of the GPU tests; empty:
# none), PROBE_ROWS (non-empty: scripts/gpu_probe_rows.sh's op probes of
# those rows too, into the same tar), OOM_COST (0: skip the recorder's
# cost), DEADLINE (570 s in all). The holdout rows are predicted too when
# the committed holdout truth exists.
set -uo pipefail
cd "$(dirname "$0")/.."
export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
export CACHEALLOC_CLI=$PWD/.carry/bin/cachealloc PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/turn46; mkdir -p $R
DEADLINE=${DEADLINE:-570}
t0=$SECONDS
left() { echo $(( DEADLINE - (SECONDS - t0) )); }
stamp() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$R/timeline.txt"; }
pack() { tar czf "$OUT/gpu_turn46.tgz" -C /tmp turn46 $([ -d /tmp/probe_rows ] && echo probe_rows) 2>/dev/null; }
trap pack EXIT
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt 2>&1
if [ -n "${TESTS_K-x}" ] || [ "${OOM_COST:-1}" != 0 ]; then
  # The glue against this torch (the GPU tests and ab_train run through it).
  bash scripts/gpu_glue.sh "$R/glue.log" || stamp "glue build failed"
  stamp "glue built"
fi
# CPU, torch 2.11, no GPU visible, one thread per prediction:
#   1. the tuning rows' peaks (the zoo's tuning half and the H200 workloads
#      the band also holds), 2. the band data made again from them alone
#      (answer/data/tuning_errors.json, copied out), 3. the validation rows'
#      peaks and every setup's largest batch, answered with that band.
( export CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 PJ=${PRED_JOBS:-10}
  H=benchmarks/results; U=$H/predict_unnamed_H200
  python3 benchmarks/zoo/predict.py --truth tests/data/predict/zoo_truth.json --half tuning --no-largest \
      --out "$R/zoo_pred_tuning_torch2.11.json" --jobs $PJ --timeout 200 > "$R/zoo_pred_tuning.log" 2>&1 &
  python3 benchmarks/predict/predict_all.py --truth $H/predict_truth_H200.json --no-largest \
      --out "$R/predict_pred_H200_torch2.11.json" --jobs 4 > "$R/predict_all.log" 2>&1 &
  python3 benchmarks/predict/predict_all.py --truth $U/predict_truth_H200.json --no-largest \
      --out "$R/predict_unnamed_pred_torch2.11.json" --jobs 2 > "$R/predict_unnamed.log" 2>&1 &
  wait; stamp "tuning predictions done"
  python3 benchmarks/zoo/compare.py --truth tests/data/predict/zoo_truth.json \
      --pred "$R/zoo_pred_tuning_torch2.11.json" --tuning-errors "$R/zoo_tuning_errors.json" > /dev/null 2>&1
  python3 benchmarks/predict/tuning_errors.py --pair $H/predict_truth_H200.json:"$R/predict_pred_H200_torch2.11.json" \
      --pair $U/predict_truth_H200.json:"$R/predict_unnamed_pred_torch2.11.json" \
      --zoo-errors "$R/zoo_tuning_errors.json" --out bindings/python/cachealloc/predict/answer/data/tuning_errors.json \
      > "$R/tuning_errors.log" 2>&1
  cp bindings/python/cachealloc/predict/answer/data/tuning_errors.json "$R/"
  stamp "band data made again rc=$?"
  HT=benchmarks/results/zoo_session22_H100/holdout_truth_H100.json
  if [ -f $HT ]; then
    timeout $(( $(left) - 15 )) python3 benchmarks/zoo/predict.py --truth $HT \
        --out "$R/zoo_pred_holdout_torch2.11.json" --jobs 4 --timeout 200 > "$R/zoo_pred_holdout.log" 2>&1 &
  fi
  timeout $(( $(left) - 15 )) python3 benchmarks/zoo/predict.py --truth tests/data/predict/zoo_truth.json \
      --half ${PRED_HALF:-validation} --out "$R/zoo_pred_torch2.11.json" --jobs 10 --timeout 200 > "$R/zoo_pred.log" 2>&1
  stamp "zoo predictions (torch 2.11 CPU) rc=$?"; wait ) &
# GPU: the holdout truth.
HOLDOUT=${HOLDOUT-qwen3_bf16ac_sdpa,gpt_neox_fp16_sdpa,tv_densenet121_bf16ac}
[ -n "$HOLDOUT" ] && ( timeout $(( $(left) - 40 )) python3 benchmarks/zoo/record.py run --out $R/holdout --setups "$HOLDOUT" \
    --cpus 4 --gpu-gib 44 --deadline $(( $(left) - 60 )) > "$R/holdout.log" 2>&1
  stamp "holdout truth rc=$?" ) &
# GPU: op probes of zoo rows (one process at a time).
if [ -n "${PROBE_ROWS:-}" ]; then
  PROBE_ROWS="$PROBE_ROWS" timeout $(( $(left) - 60 )) bash scripts/gpu_probe_rows.sh > "$R/probe_rows.log" 2>&1
  stamp "probes rc=$?"
fi
# GPU: issue 47's tests.
TESTS_K=${TESTS_K-test_plugin or test_torch_api or test_policy_gpu}
if [ -n "$TESTS_K" ]; then
  timeout $(( $(left) - 150 )) python3 -m pytest -v -rs tests/gpu -k "$TESTS_K" > "$R/gpu_tests.log" 2>&1
  stamp "gpu tests rc=$? $(tail -1 $R/gpu_tests.log)"
fi
wait
# GPU, alone: the recorder's cost, with what time is left.
if [ "${OOM_COST:-1}" != 0 ] && [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 10 )) python3 benchmarks/ab_train.py --workload transformer --oom-recorder --rounds 5 --steps 20 \
    > "$R/ab_oom_recorder.log" 2>&1
  stamp "ab_train rc=$?"
fi
tail -3 "$R/zoo_pred.log"; tail -20 "$R/holdout.log"
cat "$R/timeline.txt"
