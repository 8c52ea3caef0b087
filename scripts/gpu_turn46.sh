#!/usr/bin/env bash
# Issue 46's GPU work in one call (device tool, one H100, 16 cores), about
# 9 minutes; everything lands in $OUT. Needs .carry from scripts/carry_build.sh
# and build-zoo-truth/ (the zoo truth's kept jobs, to resume).
#   GPU, in order:  the zoo truth's unfinished largest-batch searches (resume),
#                   the op probe of the tuning setups (benchmarks/predict/op_probe.py),
#                   the OOM fix without preparation (tests/gpu/oom_fix_script.py),
#                   the recorder's step-time cost (benchmarks/ab_train.py --oom-recorder).
#   CPU, alongside: the zoo's validation predictions with this machine's
#                   torch (2.11) and no GPU visible (benchmarks/zoo/predict.py).
set -uo pipefail
cd "$(dirname "$0")/.."
export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
export CACHEALLOC_CLI=$PWD/.carry/bin/cachealloc PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$SECONDS
stamp() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$OUT/timeline.txt"; }
# The glue against this torch (the OOM fix runs through the PyTorch glue).
TP=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
(cmake -S bindings/torch -B /tmp/glue -DCACHEALLOC_LIBRARY="$CACHEALLOC_LIBRARY" -DCMAKE_PREFIX_PATH="$TP" \
  && cmake --build /tmp/glue -j16 && cp /tmp/glue/libcachealloc_torch.so .carry/lib/) >"$OUT/glue.log" 2>&1 \
  || stamp "glue build failed"
stamp "glue built"
# CPU side, in the background: validation predictions on torch 2.11.
[ -n "${SKIP_PRED:-}" ] || ( CUDA_VISIBLE_DEVICES= PYTHONPATH=$PWD/bindings/python timeout ${PRED_S:-480} python3 benchmarks/zoo/predict.py \
    --truth build-zoo-truth/zoo_truth_H100_80GB_HBM3.json --out "$OUT/zoo_pred_validation_torch2.11.json" \
    --half validation --jobs 6 --timeout 300 ${PRED_LARGEST:---no-largest} > "$OUT/zoo_pred_validation.log" 2>&1
  stamp "validation predictions (torch 2.11 CPU) rc=$?" ) &
timeout ${ZOO_S:-150} python3 benchmarks/zoo/record.py run --out build-zoo-truth --deadline $(( ${ZOO_S:-150} - 15 )) \
  > "$OUT/zoo_resume.log" 2>&1
cp build-zoo-truth/zoo_truth_*.json "$OUT/"
stamp "zoo resume: $(grep -c 'done at' "$OUT/zoo_resume.log") setups, $(tail -32 "$OUT/zoo_resume.log" | grep -c None) rows with an open search"
mkdir -p /tmp/probe
for s in ${PROBE_SETUPS:-bart_base_fp16_sdpa llama_fp32_bf16ac_default gpt2_medium_bf16ac tv_resnet50_cl_fp16_bench llama_bf16w_ckpt_eager tv_convnext_tiny_fp32}; do
  b=$(python3 -c "import sys; sys.path.insert(0,'benchmarks'); from zoo import setups; print(max(1, setups.SETUPS['$s'].batch // 2))")
  echo "$s $b"
done | xargs -P 3 -L 1 sh -c 'timeout 120 python3 benchmarks/predict/op_probe.py gpu \
    --builder benchmarks/zoo/setups.py:$0 --batch $1 --out /tmp/probe >> '"$OUT"'/op_probe.log 2>&1'
tar czf "$OUT/op_probe.tgz" -C /tmp probe
stamp "op probes: $(ls /tmp/probe | wc -l) files"
timeout ${OOM_S:-200} python3 tests/gpu/oom_fix_script.py --out /tmp/oom_fix > "$OUT/oom_fix.log" 2>&1
stamp "oom fix rc=$?"; cp /tmp/oom_fix/oom_fix.json "$OUT/" 2>/dev/null
timeout ${AB_S:-110} python3 benchmarks/ab_train.py --workload transformer --oom-recorder --rounds 5 --steps 20 \
  > "$OUT/ab_oom_recorder.log" 2>&1
stamp "ab_train rc=$?"
wait
[ -n "${SKIP_PRED:-}" ] || tail -3 "$OUT/zoo_pred_validation.log"
cat "$OUT/timeline.txt"
