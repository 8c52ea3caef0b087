#!/usr/bin/env bash
# What CI's 30-minute budget leaves out (issue 45), to run nightly or before
# a release on any Linux machine (2 cores: about 25 minutes cold):
#   1. AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/) over the
#      whole C++ suite: only the C++ test targets are built (no benchmarks,
#      no PyTorch glue). The two timed scale tests (a 1 M-event search, a
#      10 M-event page) check Release-build speed, which a sanitized -O1
#      build cannot meet; they run in scripts/test.sh. FrontStress replaces
#      operator new/delete (host-memory fault injection) with malloc/free,
#      which ASan reports as an alloc-dealloc mismatch against objects its
#      own operator new made; it runs under ThreadSanitizer in CI.
#   2. A longer fuzz campaign than CI's (scripts/fuzz_campaign.sh, NIGHTLY_FUZZ_SECONDS
#      per target, default 300).
# The Python suite under the sanitizers stays in scripts/sanitize.sh (by
# hand); the race demo in scripts/race_demo.sh (by hand). Uses ccache when
# installed. Fails if any step does.
set -euo pipefail
cd "$(dirname "$0")/.."
STEP_LABEL=nightly
# shellcheck source=scripts/sanitizer_env.sh
source scripts/sanitizer_env.sh

cmake -S . -B build-asan "${common[@]}" -DCACHEALLOC_SANITIZE=ON >/dev/null
test_targets=$(sed -n 's/^build \(tests\/cpp\/[A-Za-z0-9_]*\) .*CXX_EXECUTABLE_LINKER.*/\1/p' \
  build-asan/build.ninja | tr '\n' ' ')
# shellcheck disable=SC2086
step "asan build" cmake --build build-asan -j"$jobs" --target tools/all $test_targets
step "asan ctest" bash -c 'cd build-asan && ASAN_OPTIONS=detect_leaks=1 \
  ctest --output-on-failure -j"$(nproc)" --timeout 1500 -E "AdviseSpeed|AdvisePageScale|FrontStress"'
step "fuzz campaign" bash scripts/fuzz_campaign.sh -t "${NIGHTLY_FUZZ_SECONDS:-300}"
