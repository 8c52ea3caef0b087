#!/usr/bin/env bash
# Issue 34 on 2 GPUs, in one device call of about 6 minutes (the glue build
# and start-up included: the launches stop at --budget seconds, default 270):
#   bash tests/gpu/multi_gpu_suite.sh [--repeats N] [--steps S] [--budget SECONDS] [--llama]
#       [--llama-runs FIRST:LAST] [--nproc N]
# --nproc N: ranks (GPUs) per run, default 2; with N > 2 the results land in
# $OUT/multi_gpu_N instead of $OUT/multi_gpu, and repeats (--repeats) cover
# the Llama pairs too when --llama is given.
# --first K (with --nproc N > 2): only the repeats, numbered K..K+N-1 (to add
# runs to an earlier call's), then the summary.
# --llama-runs: only the Llama-style decoder's DDP and FSDP2 pairs, runs
# numbered FIRST..LAST (to add repeats to earlier results), then the summary.
# - DDP and FSDP2 on GPT-2 small under native and under cachealloc
#   (`cachealloc run -- torchrun --nproc-per-node 2 ...`), the pair repeated
#   up to N times (default 1; more only while the budget lasts: each torchrun
#   launch takes 30-60 s);
# - one DDP run per allocator recording history, the analysis of the live
#   blocks at each rank's peak by site (peak_sites.py), and `cachealloc
#   report` over the run directory;
# - PyTorch's NCCL user-buffer path (MemPool(backend.mem_allocator) +
#   register_mem_pool) under both allocators, expandable segments off and on.
# Everything lands in $OUT/multi_gpu (JSON per rank and run, logs, the page,
# summary.json; copy it into benchmarks/results/multi_gpu/). Expects the
# library as scripts/gpu_session.sh sets it up (CACHEALLOC_LIBRARY, the glue
# beside it) and NCCL_NVLS_ENABLE=0 (set here).
set -uo pipefail
cd "$(dirname "$0")/../.."
REPEATS=1 STEPS=15 BUDGET=${MULTI_GPU_BUDGET:-270} LLAMA=0 LLAMA_RUNS= NPROC=2 FIRST=
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) REPEATS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --llama) LLAMA=1; shift ;;
    --llama-runs) LLAMA_RUNS=$2; shift 2 ;;
    --nproc) NPROC=$2; shift 2 ;;
    --first) FIRST=$2; shift 2 ;;
    *) echo "usage: $0 [--repeats N] [--steps S] [--budget SECONDS] [--llama] [--llama-runs FIRST:LAST] [--nproc N] [--first K]" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/out}; R=$OUT/multi_gpu; [ "$NPROC" -gt 2 ] && R=${R}_$NPROC; mkdir -p "$R"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/bindings/python${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import torch; assert torch.cuda.device_count() >= $NPROC, 'needs $NPROC GPUs'" || exit 3
# torchrun's workers are new interpreters: they load cachealloc through the
# start-up hook that `pip install` puts in site-packages. Here it comes from
# a sitecustomize on PYTHONPATH (the GPU host's interpreter reads no user site).
HOOK=$(mktemp -d); echo "import _cachealloc_autoinstall" > "$HOOK/sitecustomize.py"
TRAIN=tests/gpu/multi_gpu_train.py
TR="torchrun --standalone --nproc-per-node $NPROC"
LOG=$R/suite.log; : > "$LOG"
left() { [ $SECONDS -lt $((BUDGET - ${1:-45})) ]; }  # room for one more launch of ~$1 s?

native() {  # native MODE DIR [ARGS...]
  local mode=$1 dir=$2; shift 2
  echo "[$SECONDS s] native $mode -> $dir" | tee -a "$LOG"
  $TR $TRAIN --mode "$mode" --steps "$STEPS" --out "$dir" "$@" >>"$LOG" 2>&1 || echo "FAILED native $mode" | tee -a "$LOG"
}
ours() {  # ours MODE DIR [RUN OPTIONS --] [ARGS...]
  local mode=$1 dir=$2; shift 2
  local run_opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do run_opts+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  echo "[$SECONDS s] cachealloc $mode -> $dir" | tee -a "$LOG"
  PYTHONPATH=$HOOK:$PYTHONPATH python3 -m cachealloc.cli run "${run_opts[@]}" -- \
    $TR $TRAIN --mode "$mode" --steps "$STEPS" --out "$dir" "$@" >>"$LOG" 2>&1 || echo "FAILED cachealloc $mode" | tee -a "$LOG"
}

# In order of what matters most, each launch only while the budget lasts:
# the DDP pair, the history pair (the peak analysis and the report read it),
# the user-buffer path, the FSDP2 pair, then extra repeats.
skip() { echo "[$SECONDS s] budget spent: skipping $*" | tee -a "$LOG"; }
if [ -n "$LLAMA_RUNS" ]; then
  for rep in $(seq "${LLAMA_RUNS%%:*}" "${LLAMA_RUNS##*:}"); do
    for mode in ddp fsdp2; do
      left 60 || { skip "llama run $rep and later"; break 2; }
      native $mode "$R/llama_$mode/native/$rep" --model llama
      ours $mode "$R/llama_$mode/cachealloc/$rep" -- --model llama
    done
  done
  python3 tests/gpu/multi_gpu_summary.py "$R" | tee "$R/summary.txt"
  # The device tool returns no deeply nested folders: one archive of them.
  tar czf "$OUT/$(basename "$R")_runs.tgz" -C "$R" . 2>/dev/null
  rm -rf "$HOOK"; echo "[$SECONDS s] done" | tee -a "$LOG"; exit 0
fi

if [ -z "$FIRST" ]; then
  left 50 && native ddp "$R/ddp/native/1" || skip "native ddp"
  left 50 && ours ddp "$R/ddp/cachealloc/1" || skip "cachealloc ddp"
  left 50 && native ddp "$R/history/native" --history || skip "native ddp history"
  left 50 && ours ddp "$R/history/cachealloc" --snapshot-dir "$R/history/cachealloc/run" -- --history \
    || skip "cachealloc ddp history"
  for a in native cachealloc; do
    left 30 || { skip "user buffers $a"; continue; }
    echo "[$SECONDS s] NCCL user buffers, $a" | tee -a "$LOG"
    timeout 120 python3 tests/gpu/nccl_user_buffer_script.py $a "$R/user_buffer_$a.json" "$NPROC" >>"$LOG" 2>&1 \
      || echo "FAILED user buffers $a" | tee -a "$LOG"
  done
  left 50 && native fsdp2 "$R/fsdp2/native/1" || skip "native fsdp2"
  left 50 && ours fsdp2 "$R/fsdp2/cachealloc/1" || skip "cachealloc fsdp2"
  echo "[$SECONDS s] report and peak analysis" | tee -a "$LOG"
  for a in cachealloc native; do
    [ -d "$R/history/$a/run" ] || continue
    python3 -m cachealloc.cli report "$R/history/$a/run" --html "$R/report_$a.html" \
      --json "$R/report_$a.json" --jobs 8 > "$R/report_$a.txt" 2>&1 || echo "FAILED report $a" | tee -a "$LOG"
  done
  python3 tests/gpu/peak_sites.py "$R/history/native/run" "$R/history/cachealloc/run" > "$R/peak_sites.txt" 2>&1 \
    || echo "FAILED peak_sites" | tee -a "$LOG"
  if [ "$LLAMA" = 1 ]; then
    for mode in ddp fsdp2; do
      left 90 && native $mode "$R/llama_$mode/native/1" --model llama
      left 90 && ours $mode "$R/llama_$mode/cachealloc/1" -- --model llama
    done
  fi
fi
MODELS=gpt2; [ "$LLAMA" = 1 ] && [ "$NPROC" -gt 2 ] && MODELS="gpt2 llama"
FROM=2 TO=$REPEATS
[ -n "$FIRST" ] && FROM=$FIRST TO=$((FIRST + REPEATS - 1))
for rep in $(seq "$FROM" "$TO"); do
  for model in $MODELS; do
    for mode in ddp fsdp2; do
      left 100 || { skip "repeat $rep and later"; break 3; }
      dir=$mode; [ "$model" = llama ] && dir=llama_$mode
      native $mode "$R/$dir/native/$rep" --model $model
      ours $mode "$R/$dir/cachealloc/$rep" -- --model $model
    done
  done
done
python3 tests/gpu/multi_gpu_summary.py "$R" | tee "$R/summary.txt"
tar czf "$OUT/$(basename "$R")_runs.tgz" -C "$R" . 2>/dev/null
rm -rf "$HOOK"
echo "[$SECONDS s] done" | tee -a "$LOG"
