#!/usr/bin/env bash
# Session 31's third device call, $OUT/gpu_s31c.tgz: holdout 31's answers under its own
# probe tables (benchmarks/results/session31/holdout31_probed.json) run at exactly their
# size (probe_answers.py run). Needs .carry. Knobs: DEADLINE (s, default 90).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s31c 90
carry_env
timeout $(( $(left) - 10 )) python3 benchmarks/zoo/probe_answers.py run \
    --plan benchmarks/results/session31/probe_answers/plan_holdout31_probed.json --out $R/answers \
    --jobs 6 --deadline $(( $(left) - 20 )) > $R/answers.log 2>&1
stamp "answers rc=$?"
cat $R/timeline.txt; tail -n 8 $R/answers.log
