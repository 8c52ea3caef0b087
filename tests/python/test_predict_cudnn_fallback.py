"""cuDNN plan fallback under a memory limit (docs/prediction.md, "cuDNN"):
torch's cuDNN v8 path catches the OutOfMemoryError of a workspace
allocation and tries the next plan, so a predicted workspace that OOMs
under the limit must not fail the step, while any other request that OOMs
still does. The replay (lab/whatif.cc) gets the workspaces marked fallible
in the trace ("fallible_group", trace_writer.py)."""
import json
import pathlib
import pickle

import pytest

STEPS = pathlib.Path(__file__).with_name("predict_steps") / "steps.py"
MIB = 1 << 20

torch = pytest.importorskip("torch")

from cachealloc import lab, plain_pickle  # noqa: E402


def _write_trace(path, entries):
    """entries: (action, addr, size[, fallible group]) as a snapshot's device trace."""
    trace = []
    for t, (action, addr, size, *group) in enumerate(entries):
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t, "frames": []}
        if group:
            e["fallible_group"] = group[0]
        trace.append(e)
        if action == "free_requested":
            trace.append(dict(e, action="free_completed"))
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}, protocol=4))
    return path


def test_a_fallible_request_that_ooms_is_a_fallback(tmp_path, cli):
    """At a 24 MiB limit: a held 10 MiB block, then two 40 MiB workspaces
    of one group (the second call is not made: the plan that ran is kept),
    one of another group that fits, then a needed 40 MiB request: one
    fallback, one call without, and exactly one OOM of the run. Without a
    limit nothing changes; the minimum memory ignores what may fall back."""
    entries = [("alloc", 1, 10 * MIB),
               ("alloc", 2, 40 * MIB, 7), ("free_requested", 2, 0),
               ("alloc", 3, 40 * MIB, 7), ("free_requested", 3, 0),
               ("alloc", 4, 1 * MIB, 9), ("free_requested", 4, 0)]
    marked = _write_trace(tmp_path / "marked.pickle", entries)
    plain = _write_trace(tmp_path / "plain.pickle", [e[:3] for e in entries])
    confs = ["", "expandable_segments:True"]
    for row in lab.compare(marked, confs, memory_limit=24 * MIB):
        assert (row["ooms"], row["fallbacks"], row["fallback_skips"]) == (0, 1, 1), row["conf"]
        assert row["peak_allocated"] == 11 * MIB       # 10 MiB held + the 1 MiB workspace
    for row in lab.compare(plain, confs, memory_limit=24 * MIB):
        assert (row["ooms"], row["fallbacks"]) == (2, 0)
    needed = _write_trace(tmp_path / "needed.pickle", entries + [("alloc", 5, 40 * MIB)])
    for row in lab.compare(needed, confs, memory_limit=24 * MIB):
        assert (row["ooms"], row["fallbacks"], row["fallback_skips"]) == (1, 1, 1)
    unlimited = [lab.compare(p, confs) for p in (marked, plain)]
    peaks = [[(r["peak_reserved"], r["peak_allocated"], r["ooms"]) for r in rows] for rows in unlimited]
    assert peaks[0] == peaks[1] and peaks[0][0] == (52 * MIB, 50 * MIB, 0)
    assert all(r["fallbacks"] == 0 for rows in unlimited for r in rows)
    # Only the held block is needed: every workspace, the 1 MiB one too, may fall back.
    assert lab.min_memory(marked, [""]) == {"": 10 * MIB}
    assert lab.min_memory(plain, [""]) == {"": 50 * MIB}   # the 2 MiB small segment: cache released


def test_bad_fallible_group_is_refused(tmp_path, cli):
    bad = _write_trace(tmp_path / "bad.pickle", [("alloc", 1, MIB, -1)])
    with pytest.raises(lab.LabError, match="fallible_group"):
        lab.compare(bad, [""])


def _unmarked_copy(trace, path):
    """The trace with every fallible mark removed: the workspaces as needed requests."""
    with open(trace, "rb") as f:
        snap = plain_pickle.load(f)
    for e in snap["device_traces"][0]:
        e.pop("fallible_group", None)
    path.write_bytes(pickle.dumps(snap, protocol=4))
    return path


def test_prediction_fits_when_the_workspace_falls_back(tmp_path, monkeypatch):
    """The two-convolution step with a table that gives the first
    convolution's forward a 64 MiB workspace, on a 32 MiB GPU: the
    workspace OOMs in the first step (fallback counted), the second step's
    call asks for none, and the step fits. The same trace with the
    workspaces unmarked (needed requests of the same sizes) OOMs at the
    same limit; without a limit both give the same peaks."""
    from cachealloc import predict
    conv1 = "in=2,3,16,16|w=8,3,3,3|s=1,1|p=0,0|d=1,1|op=0,0|g=1|t=0|float32|fmt=contiguous"
    table = tmp_path / "t.json"
    table.write_text(json.dumps({
        "format": "cachealloc-cudnn-workspaces/1", "torch": "2.11.0", "cudnn": 91300,
        "source": "test", "gpu": {"name": "NVIDIA H200", "capability": [9, 0]},
        "entries": {f"fwd|{conv1}|bias=1|flags=0,0,1": {"workspaces": [[1, 64 * MIB]]},
                    f"bwd|{conv1}|mask=011|flags=0,0,1": {"workspaces": [[0, 3000]]}}}))
    monkeypatch.setenv("CACHEALLOC_CUDNN_TABLE", str(table))
    gpu = predict.resolve_gpu(None, 32 * MIB, (9, 0), 0)
    rec = predict.record(f"{STEPS}:convolution", gpu, size=2, steps=2, workdir=tmp_path)
    assert rec.summary["cudnn"]["workspaces"] == 4
    limit = gpu.usable(None)
    got = predict.measure(rec.trace, limit)
    for name, c in got.items():
        # One fallback (first step), the second step's forward without a
        # workspace; the backward's 3000 B workspaces fit and are made.
        assert (c["fits"], c["fallbacks"], c["fallback_skips"]) == (True, 1, 1), name
    unmarked = _unmarked_copy(rec.trace, tmp_path / "unmarked.pickle")
    want = predict.measure(unmarked, limit)
    for name, c in want.items():
        assert (c["fits"], c["fallbacks"]) == (False, 0), name
        assert c["min_memory"] > limit
        assert (c["peak_allocated"], c["peak_reserved"]) == (
            got[name]["peak_allocated"], got[name]["peak_reserved"])
    rows = lab.compare(unmarked, ["", "expandable_segments:True"], memory_limit=limit)
    assert all(r["ooms"] == 2 for r in rows)      # the 64 MiB workspace of each step, needed
    lines = predict.answer.search.fallback_lines(rec.summary, {n: (2, c) for n, c in got.items()})
    assert lines and "classic (size 2) 1 (+1 later call(s) without)" in lines[0]
