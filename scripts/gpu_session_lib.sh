# Sourced by the per-session device scripts (scripts/gpu_session2*.sh): the
# part they share. `session_begin NAME DEADLINE` (from the repository root)
# makes an empty /tmp/NAME as R, OUT (default /tmp/out), the clock (left:
# seconds to DEADLINE, or $DEADLINE when set; stamp MSG: a line in
# R/timeline.txt), packs /tmp/NAME into OUT/gpu_NAME.tgz on exit, and notes
# the GPU in R/gpu.txt.
session_begin() {
  R=/tmp/$1; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; rm -rf "$R"; mkdir -p "$R"
  DEADLINE=${DEADLINE:-$2}; t0=$SECONDS
  PACK_NAME=$1
  trap 'tar czf "$OUT/gpu_$PACK_NAME.tgz" -C /tmp "$PACK_NAME" 2>/dev/null' EXIT
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/gpu.txt" 2>&1
}
left() { echo $(( DEADLINE - (SECONDS - t0) )); }
stamp() { echo "[$((SECONDS - t0)) s] $*" | tee -a "$R/timeline.txt"; }
# `carry_env` (from the repository root): the environment a device script's
# Python needs to use the carried build (.carry, scripts/carry_build.sh).
carry_env() {
  export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/bindings/python:$PWD/benchmarks
  export CACHEALLOC_LIBRARY=$PWD/.carry/lib/libcachealloc.so LD_LIBRARY_PATH=$PWD/.carry/lib:${LD_LIBRARY_PATH:-}
}
