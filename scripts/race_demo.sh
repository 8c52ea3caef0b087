#!/usr/bin/env bash
# Shows that the race checks would catch a race (docs/race_demo.md); not
# part of CI. Builds the front stress test (tests/cpp/front_stress_test.cc)
# with one defect on purpose (CMake's CACHEALLOC_RACE_DEMO, which sets a
# define in the one file it changes; never set in other builds):
#   drop_free_lock: a free takes no device lock (allocator/front);
#   detach_ignores_in_flight: the profiler reporters' detach removes them
#     while reported calls are under way (bindings/runtime), still under
#     each device's lock;
#   detach_unlocked: the same detach without the device lock.
# Each is run under ThreadSanitizer (build-race-tsan/, built as CI's
# sanitize_ci.sh builds it; one run) and without a sanitizer (build-race/,
# RACE_DEMO_SEEDS runs, seeds 1..N, default 4), where only the test's own
# checks can catch it: the engine's byte accounting and invariants, checked
# by the workers while they run and at the end (0 bytes allocated and
# reserved, no segment), and for the reporters every reported call's
# report. Then both builds without a defect: the same tests pass (control).
# Prints, per build and defect, the head of the first TSan report or the
# test's failures, and a summary; logs in build-race*/race_demo_*.log.
#
#   bash scripts/race_demo.sh
#   RACE_DEMO_MS=3000 RACE_DEMO_SEEDS=8 bash scripts/race_demo.sh
# Exits 0 when every defect was caught by the test's checks in the plain
# build and the controls ran clean; the summary says, per defect, whether
# ThreadSanitizer saw it (it cannot see a race that locks order: see the
# doc).
set -uo pipefail
cd "$(dirname "$0")/.."
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
ms=${RACE_DEMO_MS:-1500}
seeds=${RACE_DEMO_SEEDS:-4}
common=(-G Ninja -DCACHEALLOC_BUILD_BENCHMARKS=OFF -DCACHEALLOC_WITH_TORCH=OFF "${launcher[@]}")
# The same flags as scripts/sanitize_ci.sh's TSan build, and as
# scripts/build.sh's (for ccache's sake).
tsan_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DCACHEALLOC_TSAN=ON)
plain_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
declare -A test_of=(
  [drop_free_lock]="FrontStress.TwoDevicesEightThreads"
  [detach_ignores_in_flight]="FrontStress.ReportersDetachWhileOthersReport"
  [detach_unlocked]="FrontStress.ReportersDetachWhileOthersReport"
)
# What the test's own checks print when they catch a defect.
checks='Failure|allocated bytes|invariant broken|reports missed|Which is|Expected|unnamed error|pool index|segment'
summary=()
ok=1

# run BUILD_DIR SANITIZER VARIANT: builds front_stress_test with the
# variant's defect (none for ""), runs its test, reports.
run() {
  local dir=$1 san=$2 variant=$3 flags name=${3:-control}
  if [ "$san" = tsan ]; then flags=("${tsan_flags[@]}"); else flags=("${plain_flags[@]}"); fi
  cmake -S . -B "$dir" "${common[@]}" "${flags[@]}" -DCACHEALLOC_RACE_DEMO="$variant" >/dev/null
  if ! cmake --build "$dir" -j"$(nproc)" --target front_stress_test >"$dir/race_demo_build.log" 2>&1
  then
    tail -30 "$dir/race_demo_build.log"
    summary+=("$san $name: BUILD FAILED")
    ok=0
    return
  fi
  local filter="${test_of[drop_free_lock]}:${test_of[detach_ignores_in_flight]}"
  [ -n "$variant" ] && filter=${test_of[$variant]}
  local runs=$seeds
  [ "$san" = tsan ] && runs=1
  local caught=0 crashed=0 tsan_seen=0 failed=0 seed log rc
  for seed in $(seq 1 "$runs"); do
    log=$dir/race_demo_${name}_seed$seed.log
    CACHEALLOC_STRESS_SEED=$seed CACHEALLOC_STRESS_MS=$ms \
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
      timeout 300 "$dir/tests/cpp/front_stress_test" --gtest_filter="$filter" >"$log" 2>&1
    rc=$?
    echo "=== $san build, ${variant:-no defect (control)}, seed $seed: exit $rc ($log)"
    if grep -q 'WARNING: ThreadSanitizer' "$log"; then
      tsan_seen=1
      # The report's head: its kind, the two accesses and the first frames
      # of each stack.
      grep -m1 -A60 'WARNING: ThreadSanitizer' "$log" |
        grep -E 'WARNING|^  (Write|Read|Previous|Atomic)|^    #[0-2] ' | head -10 | cut -c1-200
    fi
    grep -a -E "$checks" "$log" | grep -v '^\[' | sort | uniq -c | sort -rn | head -8 | cut -c1-200
    grep -a -E '^\[stress\]' "$log" | head -3
    [ $rc -ne 0 ] && failed=$((failed + 1))
    grep -a -q -E '^\[  FAILED|Failure' "$log" && caught=$((caught + 1))
    # 128 + signal: the race corrupted memory before the checks ran.
    [ $rc -gt 128 ] && ! grep -a -q 'WARNING: ThreadSanitizer' "$log" && crashed=$((crashed + 1))
  done
  local what
  if [ -z "$variant" ]; then
    if [ $failed -eq 0 ]; then what="clean in $runs run(s)"; else what="FAILED without a defect"; ok=0; fi
  elif [ "$san" = tsan ]; then
    if [ $tsan_seen = 1 ]; then what="ThreadSanitizer reported it"
    else what="ThreadSanitizer reported nothing"; fi
    what+="; the test's checks failed in $caught of $runs run(s)"
  else
    what="the test's checks failed in $caught of $runs run(s); crashed in $crashed"
    [ $caught -gt 0 ] || ok=0
  fi
  summary+=("$san $name: $what")
}

for variant in drop_free_lock detach_ignores_in_flight detach_unlocked; do
  run build-race-tsan tsan "$variant"
  run build-race plain "$variant"
done
run build-race-tsan tsan ""
run build-race plain ""
echo "=== race_demo summary"
printf '  %s\n' "${summary[@]}"
[ $ok = 1 ]
