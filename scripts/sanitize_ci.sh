#!/usr/bin/env bash
# CI's sanitizer runs (.ci/run), each variant built once per run:
#   1. ThreadSanitizer (build-tsan/): the whole-front stress test
#      (tests/cpp/front_stress_test.cc: 8-16 threads on 2 and 4 simulated
#      devices, device faults, host-memory faults, the re-init race) and
#      the front's thread tests (front_parts_test: pointer table, device
#      lock).
#   2. AddressSanitizer + UndefinedBehaviorSanitizer over the C++ suite:
#      moved to scripts/nightly.sh (CI time budget, issue 45).
#   3. libFuzzer (build-fuzz/, clang, ASan + UBSan): scripts/fuzz_ci.sh runs
#      the four fuzz targets of tests/fuzz from their corpus, two minutes in
#      all, under CACHEALLOC_PICKLE_MEMORY_LIMIT (docs/fuzzing.md).
# Uses ccache when installed. Prints each step's time. Fails if any step
# does.
set -euo pipefail
cd "$(dirname "$0")/.."
STEP_LABEL=sanitize_ci
# shellcheck source=scripts/sanitizer_env.sh
source scripts/sanitizer_env.sh

# 1. ThreadSanitizer.
cmake -S . -B build-tsan "${common[@]}" -DCACHEALLOC_TSAN=ON >/dev/null
step "tsan build" cmake --build build-tsan -j"$jobs" --target front_stress_test front_parts_test
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
step "tsan front_parts_test" build-tsan/tests/cpp/front_parts_test --gtest_brief=1
step "tsan front_stress_test" build-tsan/tests/cpp/front_stress_test --gtest_brief=1

# 2. AddressSanitizer + UndefinedBehaviorSanitizer over the whole C++ suite
# runs nightly (scripts/nightly.sh): its cold build alone took 460 s of a
# 36-minute run on 2 cores (issue 45's budget is 30). CI keeps ASan + UBSan
# on the readers of shared files through the fuzz targets below, whose
# replay target checks the engine's invariants after every request.

# 3. Coverage-guided fuzzing of the file readers, under ASan + UBSan (its build and its runs
# print their own times).
step "fuzz (build and runs)" bash scripts/fuzz_ci.sh
