#!/usr/bin/env bash
# CI's fuzzing (called by scripts/sanitize_ci.sh): builds the libFuzzer
# targets (scripts/fuzz_build.sh), then runs each for a fixed time from the
# corpus kept in the repository (tests/fuzz/corpus/TARGET) and the seeds
# made from the bundled traces (tests/fuzz/make_seeds.py, into
# build-fuzz/seeds), all four within two minutes together. New inputs go
# to a scratch folder (build-fuzz/ci-corpus), never into the repository.
#
# Bounds, each a finding when passed (docs/fuzzing.md):
#   memory: the pickle reader's budget CACHEALLOC_PICKLE_MEMORY_LIMIT
#     (64 MB unless set), and the process's: -rss_limit_mb / -malloc_limit_mb
#     (1024 MB: the budget, ASan's shadow and quarantine, the engine);
#   time: -timeout (10 s for one input);
#   no crash, ASan or UBSan report, leak, or undocumented exception.
# A finding's input is saved as build-fuzz/artifacts/TARGET-crash-... (or
# -leak-, -timeout-, -oom-); the script then fails. Prints each target's
# executions and coverage (libFuzzer's cov: edges, ft: features).
#
# FUZZ_SECONDS (default 28) sets each target's time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fuzz_build.sh
export CACHEALLOC_PICKLE_MEMORY_LIMIT=${CACHEALLOC_PICKLE_MEMORY_LIMIT:-64MB}
seconds=${FUZZ_SECONDS:-28}
mkdir -p build-fuzz/artifacts
rm -rf build-fuzz/seeds && python3 tests/fuzz/make_seeds.py build-fuzz/seeds
failed=()
for t in pickle config replay explain; do
  scratch=build-fuzz/ci-corpus/$t
  rm -rf "$scratch" && mkdir -p "$scratch"
  max_len=16384; [ $t = config ] && max_len=512
  log=build-fuzz/fuzz_$t.log
  t0=$SECONDS
  rc=0
  build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
    -max_len=$max_len -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/$t- \
    "$scratch" tests/fuzz/corpus/$t build-fuzz/seeds/$t >"$log" 2>&1 || rc=$?
  # The last status line ("#N DONE cov: C ft: F corp: ...") and the run's stats.
  done_line=$(grep -a -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "fuzz_ci: fuzz_$t: ${execs:-?} executions in $((SECONDS - t0)) s; ${done_line}"
  if [ $rc -ne 0 ]; then
    failed+=(fuzz_$t)
    echo "fuzz_ci: fuzz_$t FAILED (exit $rc); its log:" >&2
    grep -v -E '^#[0-9]+ ' "$log" | tail -60 >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz_ci: FAILED: ${failed[*]} (inputs in build-fuzz/artifacts)" >&2
  exit 1
fi
echo "fuzz_ci: every target ran clean"
