#!/usr/bin/env bash
# Session 26's device call (one H100), everything in ONE file, $OUT/gpu_s26.tgz
# (the strand driver's own tars inside it):
#   1. issue 46: the GPU's request stream of the tuning row that sets the
#      convnet band (tv_resnet50_cl_fp16_bench b64 classic: +1.9 % peak
#      allocated predicted, with or without its workspaces; op_probe.py gpu,
#      as scripts/gpu_probe_rows.sh), to compare with the fake run here;
#   2. issue 48, two_streams under `rescue` after cells were limited to steps
#      with 5 % headroom (scripts/gpu_two_streams_rescue.sh: its largest size,
#      native's open peaks the first run skipped, 7 timing rounds), then three
#      fresh processes each of rescue and native expandable at 15,744 tokens
#      (the size the session-25 search failed: does it vary by process?);
#   3. issue 48, the open peaks (the physical size under twice the limit)
#      of native classic, expandable, advised and rescue on all eight strand
#      workloads, in the same run (benchmarks/strand/open_peaks.py): the
#      first run skipped native's, so the memory rule was not checked.
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (420 s), ORDER (the
# parts run, in this order: default "strand probe open_peaks"; "repeats" alone:
# only the 15,744-token processes).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s26 420
export PYTHONUNBUFFERED=1
probe() {
  PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks timeout 100 python3 benchmarks/predict/op_probe.py gpu \
    --builder benchmarks/zoo/setups.py:tv_resnet50_cl_fp16_bench --batch 64 \
    --name tv_resnet50_cl_fp16_bench_classic --out $R \
    --snapshot $R/tv_resnet50_cl_fp16_bench_classic_b64.pickle.gz > $R/probe_resnet50_bench.log 2>&1
  stamp "op probe resnet50 bench b64 classic rc=$?"
}
REUSE=benchmarks/results/strand_H100/strand_run1.json,benchmarks/results/strand_H100/strand_run2_stitch.json
strand() {
  mkdir -p $R/ts
  OUT=$R/ts STRAND_WALL=$(( $(left) > 300 ? 190 : $(left) / 2 )) STRAND_REUSE=$REUSE \
    bash scripts/gpu_two_streams_rescue.sh > $R/two_streams.log 2>&1
  stamp "two_streams rc=$?"
  repeats
}
repeats() {
  ( export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
    # The glue for this host's torch, as gpu_strand.sh builds it (when strand did not run).
    if [ ! -f .carry/lib/libcachealloc_torch.so ]; then
      bash scripts/gpu_glue.sh $R/glue_build.log
      stamp "glue build rc=$?"
    fi
    export PYTHONPATH=$PWD/bindings/python OMP_NUM_THREADS=2
    # One at a time: two_streams' sizes can vary with stream timing.
    for i in 1 2 3; do
      for k in policy:rescue expandable; do
        [ "$(left)" -gt 30 ] || break 2
        timeout 60 python3 benchmarks/strand/child.py --workload two_streams --kind $k --size 15744 \
          --steps 8 --limit 6442450944 2>>$R/repeat_15744.err | tail -1 | sed "s/^/$k $i /" >> $R/repeat_15744.txt
      done
    done )
  stamp "two_streams 15,744 repeats"
}
open_peaks() {
  [ "$(left)" -gt 60 ] || return 0
  ( export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
    export PYTHONPATH=$PWD/bindings/python OMP_NUM_THREADS=2
    timeout $(( $(left) - 15 )) python3 benchmarks/strand/open_peaks.py --reuse $REUSE --out $R/open_peaks.json \
      --policies rescue --jobs 5 > $R/open_peaks.log 2>&1 )
  stamp "open peaks rc=$?"
}
for part in ${ORDER:-strand probe open_peaks}; do
  [ "$(left)" -gt 45 ] && $part
done
cat $R/timeline.txt; tail -n 5 $R/*.log; cat $R/repeat_15744.txt 2>/dev/null
