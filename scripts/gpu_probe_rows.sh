#!/usr/bin/env bash
# Op probes of zoo rows on the GPU (benchmarks/predict/op_probe.py gpu), each
# in its own process, under classic and expandable segments, with the whole
# allocator snapshot for the lab; plus the dispatch facts of this torch build
# (which composite ops have CUDA kernels: device/backend_kernels.py's rule).
# Everything lands in ONE file, $OUT/probe_rows.tgz.
#   PROBE_ROWS="setup:batch setup:batch ..." (default: the two tuning rows
#   whose peak reserved missed: llama_bf16w_ckpt_eager:8,
#   timm_resnet50d_ckpt_bf16w_fused:96). No cachealloc build needed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/probe_rows; mkdir -p $R
export PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks PYTHONUNBUFFERED=1
pack() { tar czf "$OUT/probe_rows.tgz" -C /tmp probe_rows 2>/dev/null; }
trap pack EXIT
t0=$SECONDS; stamp() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$R/timeline.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/gpu.txt 2>&1
python3 - > $R/dispatch_facts.json 2>&1 <<'P'
import json, torch
hk = torch._C._dispatch_has_kernel_for_dispatch_key
ops = [o for o in torch._C._dispatch_get_all_op_names() if o.startswith("aten::")]
def has(o, k):
    try: return bool(hk(o, k))
    except RuntimeError: return False
ci = [o for o in ops if has(o, "CompositeImplicitAutograd")]
print(json.dumps({"torch": torch.__version__, "cuda_built": torch.backends.cuda.is_built(),
                  "composite_with_cpu": sorted(o for o in ci if has(o, "CPU")),
                  "composite_with_cuda": sorted(o for o in ci if has(o, "CUDA")),
                  "composite_with_autograd_cuda": sorted(o for o in ci if has(o, "AutogradCUDA"))}, indent=1))
P
stamp "dispatch facts"
for row in ${PROBE_ROWS:-llama_bf16w_ckpt_eager:8 timm_resnet50d_ckpt_bf16w_fused:96}; do
  s=${row%%:*}; b=${row##*:}
  for conf in classic expandable; do
    [ $conf = expandable ] && ac=expandable_segments:True || ac=
    PYTORCH_CUDA_ALLOC_CONF=$ac timeout 240 python3 benchmarks/predict/op_probe.py gpu \
      --builder benchmarks/zoo/setups.py:$s --batch $b --name ${s}_$conf --out $R \
      --snapshot $R/${s}_${conf}_b$b.pickle.gz > $R/${s}_$conf.log 2>&1
    stamp "$s b$b $conf rc=$?"
  done
done
