#!/usr/bin/env bash
# Session 31's first device call, everything in ONE file, $OUT/gpu_s31.tgz:
#   holdout  issue 46: holdout 31's truth (record.py; split.json
#            "holdout_about_session31": RepVGG-A0, Res2Net-50, HRNet-W18-small),
#            in the background;
#   answers  issue 46: holdout 30's answers under its own probe tables after
#            session 31's search rule (a measured size answers above sizes that only
#            their missing workspaces fail), run at exactly their size
#            (probe_answers.py run), beside the truth;
#   cpu211   issue 46 ("the same on CPU torch 2.11 and 2.13"): session 30's last
#            predictor change (the re-read mend of the deferred fills) and session
#            31's (the band's two-sided classic reserved, the measured-size answer)
#            under this host's torch 2.11 CPU (no GPU visible), with the CLI where
#            conftest looks for it.
# Needs .carry (scripts/carry_build.sh). Knobs: DEADLINE (s, default 420), HOLDOUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_session_lib.sh
session_begin s31 420
carry_env
HOLDOUT=${HOLDOUT:-timm_repvgg_a0_fp16,timm_res2net50_cl_bf16ac,timm_hrnet_w18_small_fp32}
( holdout_truth "$HOLDOUT" 48 ) &
HPID=$!
( run_answers benchmarks/results/session31/probe_answers/plan_holdout30_probed.json answers 4 ) &
APID=$!
( cpu_pytest 300 tests/python/test_predict_foreach_inplace.py \
    "tests/python/test_predict_nohang.py::test_cpu_init_defers_random_fills_and_keeps_every_value" \
    "tests/python/test_predict_nohang.py::test_cpu_side_is_real_and_moves_become_fakes" \
    "tests/python/test_predict_honest.py::test_an_unknown_workspace_widens_classics_peak_reserved_both_ways" \
    "tests/python/test_predict_honest.py::test_a_measured_size_answers_above_sizes_only_their_missing_workspaces_fail" \
    "tests/python/test_predict_honest.py::test_unmodelled_items_widen_the_band" ) &
CPID=$!
wait $CPID; wait $APID; wait $HPID
cat $R/timeline.txt; tail -n 6 $R/*.log
