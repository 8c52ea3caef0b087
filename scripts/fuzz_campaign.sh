#!/usr/bin/env bash
# A longer fuzzing campaign than CI's (docs/fuzzing.md), for anyone to run:
#
#   bash scripts/fuzz_campaign.sh [-t SECONDS] [-j JOBS] [--merge] [TARGET...]
#
# TARGET: pickle, config, replay, explain (default: all four, one after
# another). -t: seconds per target (default 600). -j: parallel fuzzing
# processes per target (default: the number of cores). Starts from the
# repository's corpus (tests/fuzz/corpus/TARGET) and fresh seeds made from
# the bundled traces (tests/fuzz/make_seeds.py); new inputs collect in
# build-fuzz/campaign/TARGET. --merge: afterwards, adds to
# tests/fuzz/corpus/TARGET the inputs found that reach code the seeds and
# the corpus do not (libFuzzer -merge=1 -use_counters=0: a new edge, not
# just a new hit count), of at most 2 KiB each, so that the corpus stays
# small (about 100 KB for all four targets); commit it.
# Findings are saved as build-fuzz/artifacts/TARGET-*; reproduce one with
#   build-fuzz/tests/fuzz/fuzz_TARGET build-fuzz/artifacts/TARGET-crash-...
# The memory budget is the same as CI's (CACHEALLOC_PICKLE_MEMORY_LIMIT,
# 64 MB unless set; -rss_limit_mb=1024).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600 jobs=$(nproc) merge=0 targets=()
while [ $# -gt 0 ]; do
  case $1 in
    -t) seconds=$2; shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    --merge) merge=1; shift ;;
    pickle|config|replay|explain) targets+=("$1"); shift ;;
    *) echo "usage: $0 [-t SECONDS] [-j JOBS] [--merge] [pickle|config|replay|explain]..." >&2
       exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(pickle config replay explain)
bash scripts/fuzz_build.sh
export CACHEALLOC_PICKLE_MEMORY_LIMIT=${CACHEALLOC_PICKLE_MEMORY_LIMIT:-64MB}
rm -rf build-fuzz/seeds && python3 tests/fuzz/make_seeds.py build-fuzz/seeds
mkdir -p build-fuzz/artifacts
before=$(ls build-fuzz/artifacts)  # findings of earlier runs, not listed again
status=0
for t in "${targets[@]}"; do
  work=build-fuzz/campaign/$t
  mkdir -p "$work" "tests/fuzz/corpus/$t"
  max_len=16384; [ $t = config ] && max_len=512
  echo "fuzz_campaign: fuzz_$t for $seconds s with $jobs jobs"
  rc=0
  build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
    -max_len=$max_len -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/$t- \
    -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    "$work" "tests/fuzz/corpus/$t" build-fuzz/seeds/$t 2>&1 | tee "build-fuzz/campaign_$t.log" |
    grep -E '^#[0-9]+ .*(DONE|pulse)|^INFO: fuzzed for|^stat::|ERROR|crash-|leak-|timeout-|oom-' ||
    true
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || status=1
  if [ $merge = 1 ]; then
    # The merge's first folder holds what is there already (seeds and
    # corpus); only files that add an edge to it are copied in.
    have=build-fuzz/merge-have/$t small=build-fuzz/merge-small/$t
    rm -rf "$have" "$small" && mkdir -p "$have" "$small"
    cp build-fuzz/seeds/$t/* "$have"/
    cp "tests/fuzz/corpus/$t"/* "$have"/ 2>/dev/null || true
    find "$work" -type f -size -2049c -exec cp {} "$small"/ \;
    build-fuzz/tests/fuzz/fuzz_$t -merge=1 -use_counters=0 -timeout=10 -rss_limit_mb=1024 \
      -max_len=$max_len "$have" "$small" 2>&1 | grep -E '^MERGE-OUTER: [0-9]+ new files' || true
    for f in "$have"/*; do
      [ -e "build-fuzz/seeds/$t/${f##*/}" ] || cp "$f" "tests/fuzz/corpus/$t/"
    done
    echo "fuzz_campaign: tests/fuzz/corpus/$t: $(ls "tests/fuzz/corpus/$t" | wc -l) files," \
         "$(du -sb "tests/fuzz/corpus/$t" | cut -f1) bytes"
  fi
done
found=$(comm -13 <(echo "$before" | sort) <(ls build-fuzz/artifacts | sort))
if [ -n "$found" ]; then
  echo "$found" | sed 's|^|fuzz_campaign: finding: build-fuzz/artifacts/|'
  status=1
else
  echo "fuzz_campaign: no finding"
fi
exit $status
