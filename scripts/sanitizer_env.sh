# Sourced by scripts/sanitize_ci.sh and scripts/nightly.sh (not run): what
# their sanitizer builds share. Expects the caller's cwd at the repo root
# and STEP_LABEL set (the prefix of step's timing lines). Defines:
#   common  CMake arguments of every sanitized build: Ninja, Debug at -O1,
#           no benchmarks, no PyTorch glue, ccache when installed;
#   step    step NAME COMMAND...: runs it, prints its wall time;
#   jobs    build parallelism (every core).
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# Paths relative to the checkout, so any clone shares ccache's entries.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
common=(-G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DCACHEALLOC_BUILD_BENCHMARKS=OFF
        -DCACHEALLOC_WITH_TORCH=OFF "${launcher[@]}")
step() {  # step NAME COMMAND...: runs it, prints its wall time
  local name=$1 t0=$SECONDS
  shift
  "$@"
  echo "$STEP_LABEL: $name took $((SECONDS - t0)) s"
}
jobs=$(nproc)
