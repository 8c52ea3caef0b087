#!/usr/bin/env bash
# Session 34's third device call, $OUT/gpu_s34b.tgz: holdout 34's answers
# (unprobed and probed, plan_holdout34.json) run at exactly their size under
# the truth's limit in bytes, one fresh process each. Needs .carry.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s34b 200
carry_env
run_answers benchmarks/results/session34/plan_holdout34.json answers34 4
cat $R/timeline.txt $R/answers34.log
