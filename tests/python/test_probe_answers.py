"""benchmarks/zoo/probe_answers.py without a GPU: which sizes its plan asks
the GPU to run (the answers first, nothing the truth already probed), and
how its report counts an answer that trains where the truth's search
stopped below a size that also trains (the need is not monotone near the
limit)."""
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "zoo"))

import probe_answers  # noqa: E402

TRUTH = {"setups": {"s": {
    "half": "validation", "limit_bytes": 1000, "largest": {"classic": 70, "expandable": 70},
    "probes": {"classic": {"64": {"ok": True}, "70": {"ok": True}, "71": {"ok": False}},
               "expandable": {"70": {"ok": True}, "71": {"ok": False}}}}}}
PRED = {"setups": {"s": {"largest": {"largest": {"classic": 70, "expandable": 74},
                                     "largest_within_band": {"classic": 68, "expandable": 70}}},
                   "gone": {"largest": {}}}}


def test_plan_runs_the_answers_first_and_skips_what_the_truth_probed():
    got = probe_answers.plan(TRUTH, [PRED], "validation", above=3)
    assert [(e["conf"], e["batch"], e["why"]) for e in got] == [
        ("classic", 68, "answer"),
        ("classic", 72, "above"), ("classic", 73, "above"),
        ("expandable", 74, "replay"), ("expandable", 72, "above"), ("expandable", 73, "above")]
    assert all(e["limit_bytes"] == 1000 for e in got)
    assert probe_answers.plan(TRUTH, [PRED], "holdout", above=3) == []


def test_report_counts_within_one_against_the_largest_size_seen_training(tmp_path):
    for conf, b, ok in (("classic", 68, True), ("expandable", 72, True), ("expandable", 74, True),
                        ("expandable", 73, False)):
        (tmp_path / f"{conf}{b}.json").write_text(json.dumps(
            {"entry": {"setup": "s", "conf": conf, "batch": b}, "ok": ok}))
    (tmp_path / "crashed.json").write_text(json.dumps(
        {"entry": {"setup": "s", "conf": "classic", "batch": 72}, "ok": None}))
    got = probe_answers.results(str(tmp_path))
    assert ("s", "classic", 72) not in got          # no outcome: not counted, run again
    text = probe_answers.report(TRUTH, [PRED], ["p"], got, "validation")
    assert "| s | expandable | 70 | 70 | yes | 74 | yes | 72, 74 |" in text
    # classic 68 trains, within one of 70? no (68 < 69); expandable 70 vs 74: no.
    assert "2 answers: 2 train on the GPU, 0 do not, 0 not probed; 0 train and are at most 1" in text
    assert "Not counted (no answer, or not in the truth's validation half): gone." in text
