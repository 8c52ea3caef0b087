#!/usr/bin/env bash
# Builds the PyTorch glue (bindings/torch) against the torch installed on this
# host, into .carry/lib/libcachealloc_torch.so: the carried libcachealloc.so
# was built elsewhere (scripts/carry_build.sh), but the glue must match this
# host's torch. The one place the device scripts build it.
#   bash scripts/gpu_glue.sh LOG [JOBS]
# LOG gets cmake's output; JOBS defaults to 16; CACHEALLOC_LIBRARY defaults to
# .carry/lib/libcachealloc.so. Exit status: the build's.
set -uo pipefail
LOG=$(realpath -m "${1:?usage: gpu_glue.sh LOG [JOBS]}"); JOBS=${2:-16}
cd "$(dirname "$0")/.."
LIB=${CACHEALLOC_LIBRARY:-$PWD/.carry/lib/libcachealloc.so}
TP=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
{ cmake -S bindings/torch -B /tmp/glue -DCACHEALLOC_LIBRARY="$LIB" -DCMAKE_PREFIX_PATH="$TP" \
    && cmake --build /tmp/glue -j"$JOBS" && cp /tmp/glue/libcachealloc_torch.so .carry/lib/; } > "$LOG" 2>&1
