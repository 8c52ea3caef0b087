#!/usr/bin/env bash
# Instructions per cache-hit allocate+free pair when PyTorch's profiler
# records memory, counted with callgrind as count_instructions.sh does
# ((2N pairs - N pairs) / N): the C API calls the glue made before the
# runtime reported (malloc + block_info + usage, block_info + free + usage:
# three device-lock acquisitions each way) against the _report calls (one
# each way), and the plain pair once the reporters are attached (their cost
# while idle), next to the plain pair (capi); and the glue's pair with the
# profiler off (the _report calls with no report), never profiled and after
# profiling (once the reporters are detached again: the two are equal).
#   bash benchmarks/count_profiler_path.sh [BUILD_DIR]
set -euo pipefail
PAIR_PATHS="capi capi+profiler-3calls capi+profiler-report capi+reporter-idle glue glue+after-profiling" \
  PAIR_SIZES="512 4194304" exec bash "$(dirname "$0")/count_instructions.sh" "$@"
