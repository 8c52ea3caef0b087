#!/usr/bin/env bash
# Session 32's second device call, $OUT/gpu_s32b.tgz: holdout 32's answers run at
# exactly their size under the truth's limit in bytes (probe_answers.py run): one
# plan with the unprobed answers and those through its own probe tables
# (benchmarks/results/session32/probe_answers/plan_holdout32.json, written on a CPU
# from both predictions, made after gpu_session32.sh's truth came back).
# Needs .carry. Knobs: DEADLINE (s, default 150).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s32b 150
carry_env
P=benchmarks/results/session32/probe_answers
run_answers $P/plan_holdout32.json answers 6
cat $R/timeline.txt; tail -n 8 $R/answers*.log
