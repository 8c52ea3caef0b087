#!/usr/bin/env bash
# Shows that the race checks would catch a race (docs/race_demo.md); not
# part of CI. Builds the front stress test (tests/cpp/front_stress_test.cc)
# with one defect on purpose (CMake's CACHEALLOC_RACE_DEMO, which sets a
# define in the one file it changes; never set in other builds):
#   drop_free_lock: a free takes no device lock (allocator/front);
#   detach_ignores_in_flight: the profiler reporters' detach removes them
#     while reported calls are under way (bindings/runtime).
# Each is run twice: under ThreadSanitizer (build-race-tsan/, as CI's
# sanitize_ci.sh builds it), and without a sanitizer (build-race/), where
# only the test's own checks can catch it: the byte accounting at the end
# of a stress run (0 bytes allocated and reserved, no segment, the engine's
# invariants) and, for the reporters, every reported call's report. Then
# both builds again without a defect (the control: the same tests pass).
# Prints, per run, whether it was caught and the head of the report; the
# full logs are build-race*/race_demo_*.log.
#
#   bash scripts/race_demo.sh            # both defects, then the control
#   RACE_DEMO_MS=3000 bash scripts/race_demo.sh   # longer stress runs
# Exits 0 when every defect was caught by both checks and the control ran
# clean; 1 otherwise (the summary says which).
set -uo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
ms=${RACE_DEMO_MS:-1500}
common=(-G Ninja -DCACHEALLOC_BUILD_BENCHMARKS=OFF -DCACHEALLOC_WITH_TORCH=OFF "${launcher[@]}")
# The same flags as scripts/sanitize_ci.sh's TSan build, and as
# scripts/build.sh's (for ccache's sake).
tsan_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DCACHEALLOC_TSAN=ON)
plain_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
declare -A test_of=(
  [drop_free_lock]="FrontStress.TwoDevicesEightThreads:FrontStress.FourDevicesSixteenThreads"
  [detach_ignores_in_flight]="FrontStress.ReportersDetachWhileOthersReport"
)
summary=()
ok=1

# run BUILD_DIR SANITIZER VARIANT: builds front_stress_test with the
# variant's defect (none for ""), runs its tests, reports.
run() {
  local dir=$1 san=$2 variant=$3 flags
  if [ "$san" = tsan ]; then flags=("${tsan_flags[@]}"); else flags=("${plain_flags[@]}"); fi
  cmake -S . -B "$dir" "${common[@]}" "${flags[@]}" -DCACHEALLOC_RACE_DEMO="$variant" >/dev/null
  local t0=$SECONDS
  if ! cmake --build "$dir" -j"$(nproc)" --target front_stress_test >"$dir/race_demo_build.log" 2>&1
  then
    tail -30 "$dir/race_demo_build.log"
    summary+=("$san ${variant:-control}: BUILD FAILED")
    ok=0
    return
  fi
  local filter
  if [ -n "$variant" ]; then filter=${test_of[$variant]}
  else filter="${test_of[drop_free_lock]}:${test_of[detach_ignores_in_flight]}"; fi
  local log=$dir/race_demo_${variant:-control}.log
  t0=$SECONDS
  CACHEALLOC_STRESS_MS=$ms TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    timeout 300 "$dir/tests/cpp/front_stress_test" --gtest_filter="$filter" >"$log" 2>&1
  local rc=$?
  local secs=$((SECONDS - t0)) what
  echo "=== $san build, ${variant:-no defect (control)}: exit $rc after $secs s ($log)"
  if [ "$san" = tsan ]; then
    # The report's head: its kind, the two accesses and where each thread
    # was (the first frames of each stack).
    grep -m1 -A24 'WARNING: ThreadSanitizer' "$log" | grep -E 'WARNING|^  (Write|Read|Previous|Atomic)|^    #[0-3] ' | head -14
    if grep -q 'WARNING: ThreadSanitizer' "$log"; then
      what="caught by ThreadSanitizer: $(grep -m1 'WARNING: ThreadSanitizer' "$log" | sed 's/.*ThreadSanitizer: //')"
    fi
  fi
  # The test's own checks: its failures, its summary line, or a crash.
  grep -E 'Failure|Expected|Which is|  Actual|Value of|unnamed error|\[stress\]|\[  FAILED|Segmentation|Aborted|terminate|double free|corrupted|InvariantViolation' "$log" |
    grep -v '^\[  FAILED  \] [0-9]* test' | head -16
  if [ -z "$variant" ]; then
    if [ $rc -eq 0 ]; then what="clean"; else what="FAILED without a defect"; ok=0; fi
  elif [ "$san" != tsan ]; then
    if grep -q '\[  FAILED' "$log"; then what="caught by the test's checks"
    elif [ $rc -ne 0 ]; then what="caught: the test crashed (exit $rc)"
    else what="NOT caught"; ok=0; fi
  elif [ -z "${what:-}" ]; then
    if [ $rc -ne 0 ]; then what="NOT caught by ThreadSanitizer (the test failed, exit $rc)"
    else what="NOT caught"; fi
    ok=0
  fi
  summary+=("$san ${variant:-control}: $what")
}

for variant in drop_free_lock detach_ignores_in_flight; do
  run build-race-tsan tsan "$variant"
  run build-race plain "$variant"
done
run build-race-tsan tsan ""
run build-race plain ""
echo "=== race_demo summary"
printf '  %s\n' "${summary[@]}"
[ $ok = 1 ]
