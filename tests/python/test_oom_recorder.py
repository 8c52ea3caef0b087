"""The OOM flight recorder (issue 35) on the simulated device: native's
message first, then a diagnosis whose every figure is checked; the fix
with history off, from the recorder's request ring (issue 46), which the
program's own snapshot never shows; the snapshot files (atomic, bounded,
named by rank and time); `cachealloc explain` on a bundled native trace."""
import os
import pickle
import re
import subprocess
import sys

import pytest

MiB, GiB = 1 << 20, 1 << 30

# Native's message (torch 2.11's DeviceCachingAllocator::malloc), with
# every number a placeholder: native's format_size, "N bytes" or "N.NN XiB".
SIZE = r"(?:\d+ bytes|\d+\.\d\d (?:KiB|MiB|GiB))"
NATIVE_OOM = re.compile(
    rf"CUDA out of memory\. Tried to allocate {SIZE}\. GPU \d+ has a total capacity of {SIZE} "
    rf"of which {SIZE} is free\. (?:(?:Including non-PyTorch memory, this process|Process \d+) "
    rf"has {SIZE} memory in use\. )*(?:{SIZE} allowed; )?Of the allocated memory {SIZE} is "
    rf"allocated by PyTorch, (?:with {SIZE} allocated in private pools \(e\.g\., CUDA Graphs\), )?"
    rf"and {SIZE} is reserved by PyTorch but unallocated\. If reserved but unallocated memory is "
    rf"large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation\.  "
    rf"See documentation for Memory Management  "
    rf"\(https://docs\.pytorch\.org/docs/stable/notes/cuda\.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf\)$")


_held = []


@pytest.fixture(autouse=True)
def free_held():
    """Frees what a test kept alive, also when it failed (the next test's
    re-initialization needs every block back)."""
    yield
    import cachealloc

    while _held:
        cachealloc._free(_held.pop())


@pytest.fixture
def recorder(ca, tmp_path):
    from cachealloc import oom_recorder

    oom_recorder.stop()
    rec = oom_recorder.start(str(tmp_path / "oom"), torch_observer=False)
    yield rec
    oom_recorder.stop()


@pytest.fixture
def ringless_recorder(ca, tmp_path):
    """The recorder without its request ring: the history alone, as for a
    snapshot native dumped."""
    from cachealloc import oom_recorder

    oom_recorder.stop()
    oom_recorder._recorder = rec = oom_recorder.FlightRecorder(str(tmp_path / "ringless"))
    yield rec
    oom_recorder.stop()


def fragment(ca):
    """Nine 100 MiB segments, each then holding a live 60 MiB block and a
    free 40 MiB one, under a 1 GiB limit: a 200 MiB request cannot fit."""
    ca.set_per_process_memory_fraction(0.125, 0)  # 1 GiB of the 8 GiB device
    big = [ca._malloc(100 * MiB) for _ in range(9)]
    for p in big:
        ca._free(p)
    _held.extend(ca._malloc(60 * MiB) for _ in range(9))  # the pinning site
    return []


def oom_of(ca, size):
    with pytest.raises(ca.OutOfMemoryError) as e:
        ca._malloc(size)
    return str(e.value)


def test_message_starts_with_natives_text_word_for_word(ca):
    keep = fragment(ca)
    first = oom_of(ca, 200 * MiB).split("\n")[0]
    assert NATIVE_OOM.fullmatch(first), first
    assert first.startswith("CUDA out of memory. Tried to allocate 200.00 MiB. GPU 0 has a total "
                            "capacity of 8.00 GiB of which "), first
    assert ("1024.00 MiB allowed; Of the allocated memory 540.00 MiB is allocated by PyTorch, and "
            "360.00 MiB is reserved by PyTorch but unallocated.") in first, first
    for p in keep:
        ca._free(p)


def test_diagnosis_states_every_figure_exactly(ca, recorder):
    ca.record_memory_history("all", stacks="python")
    keep = fragment(ca)
    text = oom_of(ca, 200 * MiB)
    lines = text.split("\n")
    assert NATIVE_OOM.fullmatch(lines[0]), lines[0]
    assert lines[1] == "cachealloc diagnosis (device 0):"
    # The request: 200 MiB is a multiple of 512 bytes and of 2 MiB.
    assert lines[2] == ("- the request: 200.00 MiB (209715200 bytes) asked, rounded to 200.00 MiB "
                        "(209715200 bytes), needing a new segment of 200.00 MiB (209715200 bytes); "
                        "1024.00 MiB (1073741824 bytes) allowed")
    # 9 segments of 100 MiB, 60 MiB live in each: 9 x 40 MiB free.
    assert lines[3] == ("- 360.00 MiB (377487360 bytes) reserved but unallocated, in 9 free blocks; "
                        "the largest free block is 40.00 MiB (41943040 bytes), smaller than the request")
    assert lines[4] == ("- the live blocks pin 9 of 9 segments (a segment is released only when all "
                        "its blocks are free); 9 of them are split, holding 360.00 MiB (377487360 "
                        "bytes) free in 9 blocks")
    assert lines[5].startswith("- allocation sites pinning the most free bytes")
    site_line = fragment.__code__.co_firstlineno + 7  # `return [ca._malloc(60 * MiB) ...]`
    assert lines[6] == (f"    360.00 MiB (377487360 bytes) in 9 segments, 540.00 MiB live from "
                        f"python/test_oom_recorder.py:{site_line} (<genexpr>)") or lines[6] == (
                        f"    360.00 MiB (377487360 bytes) in 9 segments, 540.00 MiB live from "
                        f"python/test_oom_recorder.py:{site_line} (fragment)"), lines[6]
    # What-if: the history is whole (recorded from the start). Expandable
    # segments map 9 x 100 MiB in one segment, the 60 MiB blocks then tile
    # 540 MiB of it and 360 MiB stay contiguous: the 200 MiB request fits,
    # at a peak of 900 MiB. The settings in force need 1100 MiB (900 MiB
    # reserved plus the 200 MiB segment).
    whatif = lines[7]
    assert whatif.startswith("- what-if (the recorded history, 28 requests, replayed in "), whatif
    assert "with expandable_segments:True this history peaks at 900.00 MiB (943718400 bytes) and fits" in whatif, whatif
    assert ("Under the settings in force (native's defaults) it needs 1.07 GiB (1153433600 bytes). "
            "Suggestion: PYTORCH_CUDA_ALLOC_CONF=") in whatif, whatif
    assert lines[8].startswith("- snapshot: " + recorder.directory), lines[8]
    assert len(lines) == 9, text
    # Usable after the OOM: the request fits once the blocks are freed.
    while _held:
        ca._free(_held.pop())
    ca._free(ca._malloc(200 * MiB))


def test_whatif_figures_match_the_lab_replays_of_the_written_snapshot(ca, recorder):
    ca.record_memory_history("all")
    keep = fragment(ca)
    text = oom_of(ca, 200 * MiB)
    m = re.search(r"with (\S+) this history peaks at [^(]+\((\d+) bytes\) and fits", text)
    assert m, text
    line, peak = m.group(1), int(m.group(2))
    # Replaying the written snapshot under that line and the 1 GiB limit
    # (the lab's what-if, another entry point of the same search) agrees.
    out = subprocess.run([str(CLI()), "compare", recorder.last_path, "--conf", line,
                          "--memory-limit", str(GiB), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    import json

    row = json.loads(out.stdout)["configs"][0]
    assert row["peak_reserved"] == peak and row["ooms"] == 0, (row, text)
    for p in keep:
        ca._free(p)


def CLI():
    # Not `from conftest import CLI`: with tests/gpu collected in the same
    # run, "conftest" may name that folder's module.
    import os
    import pathlib

    repo = pathlib.Path(__file__).resolve().parents[2]
    return pathlib.Path(os.environ.get("CACHEALLOC_BUILD", repo / "build")) / "tools" / "cachealloc"


def test_never_suggests_a_setting_already_on(ca, tmp_path):
    from cachealloc import oom_recorder

    ca.init("expandable_segments:True", "simulated:8589934592")
    oom_recorder.stop()
    oom_recorder.start(str(tmp_path / "o"), torch_observer=False)
    try:
        ca.record_memory_history("all")
        ca.set_per_process_memory_fraction(0.125, 0)
        _held.extend(ca._malloc(300 * MiB) for _ in range(3))
        keep = []
        text = oom_of(ca, 300 * MiB)
        assert "with expandable_segments:True this" not in text, text
        assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" not in text, text
        # 1.2 GiB of live blocks never fit in 1 GiB: no setting does.
        assert "no setting fits in 1024.00 MiB (1073741824 bytes): the least any needs is" in text, text
        for p in keep:
            ca._free(p)
    finally:
        oom_recorder.stop()


def test_no_setting_fits_says_by_how_much(ca, recorder):
    ca.record_memory_history("all")
    ca.set_per_process_memory_fraction(0.125, 0)
    _held.extend(ca._malloc(400 * MiB) for _ in range(2))
    keep = []
    text = oom_of(ca, 400 * MiB)
    # Three 400 MiB blocks alive at once need 1200 MiB under any setting:
    # 176 MiB more than the 1 GiB allowed.
    assert ("no setting fits in 1024.00 MiB (1073741824 bytes): the least any needs is 1.17 GiB "
            "(1258291200 bytes)") in text, text
    assert ", 176.00 MiB (184549376 bytes) more;" in text, text
    for p in keep:
        ca._free(p)


WHATIF = re.compile(r"- what-if \((the recorded history|the flight recorder's request ring), "
                    r"(\d+) requests, replayed in \d+ ms\): (.*)")


def whatif_of(text):
    """(source, requests, the verdict with its figures) of a diagnosis."""
    m = next((WHATIF.match(l) for l in text.split("\n") if WHATIF.match(l)), None)
    assert m, text
    return m.group(1), int(m.group(2)), m.group(3)


def test_history_off_the_request_ring_gives_the_fix(ca, recorder):
    # No _record_memory_history: the recorder's own ring holds the requests.
    keep = fragment(ca)
    text = oom_of(ca, 200 * MiB)
    source, requests, verdict = whatif_of(text)
    # The same figures as the history gives (test_diagnosis_states_every_figure_exactly).
    assert (source, requests) == ("the flight recorder's request ring", 28), text
    assert verdict.startswith("with expandable_segments:True this history peaks at 900.00 MiB "
                              "(943718400 bytes) and fits"), verdict
    assert verdict.endswith("Under the settings in force (native's defaults) it needs 1.07 GiB "
                            "(1153433600 bytes). Suggestion: PYTORCH_CUDA_ALLOC_CONF="
                            "expandable_segments:True"), verdict
    assert "history recording is off" not in text and "mid-run" not in text, text
    # The file carries the ring as its device_traces, and says so.
    snap = plain_load(recorder.last_path)
    assert snap["cachealloc_request_ring"] == {"bytes_per_device": 4 * MiB, "source": ["ring"],
                                               "wrapped": [False]}, snap["cachealloc_request_ring"]
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions.count("alloc") == 18 and actions[-1] == "oom", actions
    # The lab's replay of the written snapshot gives the same figures: its
    # what-if (`cachealloc explain`) and a plain replay under the
    # suggestion (`cachealloc compare`).
    out = subprocess.run([str(CLI()), "explain", recorder.last_path], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert whatif_of(out.stdout) == (source, requests, verdict), out.stdout
    out = subprocess.run([str(CLI()), "compare", recorder.last_path, "--conf",
                          "expandable_segments:True", "--memory-limit", str(GiB), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import json

    row = json.loads(out.stdout)["configs"][0]
    assert (row["peak_reserved"], row["ooms"]) == (943718400, 0), row
    for p in keep:
        ca._free(p)


def plain_load(path):
    from cachealloc import plain_pickle

    with open(path, "rb") as f:
        return plain_pickle.loads(f.read())


def test_ring_and_history_record_the_same_requests(ca, recorder):
    # History on from the same moment as the ring: the diagnosis keeps the
    # history (it reaches as far back, with frames), and the ring's entries
    # are the history's less its frames and "snapshot" entries.
    ca.record_memory_history("all", stacks="python")
    keep = fragment(ca)
    with_history = whatif_of(oom_of(ca, 200 * MiB))
    assert with_history[0] == "the recorded history", with_history
    snap = plain_load(recorder.last_path)
    assert snap["cachealloc_request_ring"]["source"] == ["history"]
    from cachealloc import oom_recorder

    fields = lambda t: [(e["action"], e.get("addr"), e["size"], e["stream"]) for e in t
                        if e["action"] != "snapshot"]
    ring = oom_recorder.request_rings()["device_traces"][0]
    assert fields(ring) == fields(snap["device_traces"][0]), (len(ring), len(snap["device_traces"][0]))
    assert not any("frames" in e for e in ring)
    # The same OOM diagnosed from the ring: the same figures.
    del snap["device_traces"][0][:]
    data = pickle.dumps(oom_recorder.with_request_ring(snap, oom_recorder.request_rings()))
    from_ring = whatif_of(oom_recorder.diagnose(data))
    assert from_ring[0] == "the flight recorder's request ring"
    assert from_ring[1:] == with_history[1:], (from_ring, with_history)
    for p in keep:
        ca._free(p)


def test_snapshot_shows_no_ring_entries_while_the_recorder_records(ca, recorder):
    from cachealloc import oom_recorder

    keep = fragment(ca)
    oom_of(ca, 200 * MiB)  # an OOM, recorded and diagnosed
    ca._free(ca._malloc(MiB))
    # The program's own snapshot stays native's: history off, no entry.
    for _ in range(2):
        assert ca.snapshot()["device_traces"] == [[]]
    assert len(oom_recorder.request_rings()["device_traces"][0]) > 30
    # History on: exactly its entries (one pair, then the first snapshot's).
    ca.record_memory_history("all")
    ca._free(ca._malloc(MiB))
    assert [e["action"] for e in ca.snapshot()["device_traces"][0]] == \
        ["alloc", "free_requested", "free_completed"]
    assert [e["action"] for e in ca.snapshot()["device_traces"][0]] == \
        ["alloc", "free_requested", "free_completed", "snapshot"]
    for p in keep:
        ca._free(p)


def test_a_wrapped_request_ring_starts_from_the_live_state(ca, tmp_path):
    # 7 records keep the OOM and the last six 60 MiB allocations: three
    # 60 MiB blocks were live before the oldest (as a history of 7 entries,
    # test_history_cut_by_its_ring_starts_from_the_live_state).
    from cachealloc import oom_recorder

    oom_recorder.stop()
    oom_recorder.start(str(tmp_path / "o"), torch_observer=False, ring_mb=7 * 32 / (1 << 20))
    try:
        keep = fragment(ca)
        text = oom_of(ca, 200 * MiB)
        assert ("(the request ring (224 bytes a device) wrapped and kept only the newest "
                "requests, so the replay starts mid-run: 3 blocks (180.00 MiB (188743680 bytes)) "
                "were live at its oldest entry; the replay allocates them first") in text, text
        # 3 blocks live at the cut, 6 allocations, the failed request.
        source, requests, verdict = whatif_of(text)
        assert (source, requests) == ("the flight recorder's request ring", 10), text
        # From the cut the settings in force need only 740 MiB: the replay
        # misses the OOM, so nothing is suggested from it.
        assert verdict.startswith("the replay does not reproduce this OOM: under the settings in "
                                  "force (native's defaults) it needs 740.00 MiB (775946240 bytes), "
                                  "within the 1024.00 MiB (1073741824 bytes) allowed, so it "
                                  "suggests nothing"), verdict
        assert "Suggestion" not in text, text
        snap = plain_load(oom_recorder.recorder().last_path)
        assert snap["cachealloc_request_ring"]["wrapped"] == [True]
        assert len(snap["device_traces"][0]) == 7
        for p in keep:
            ca._free(p)
    finally:
        oom_recorder.stop()


def test_the_ring_wins_only_where_it_holds_more_requests():
    from cachealloc.oom_recorder import RING_KEY, with_request_ring

    a = {"action": "alloc", "addr": 1, "size": 8, "stream": 0}
    f = {"action": "free_requested", "addr": 1, "size": 8, "stream": 0}
    s = {"action": "snapshot", "addr": 0, "size": 8, "stream": 0}
    rings = {"records": 4, "record_bytes": 32, "wrapped": [False, True, False],
             "device_traces": [[a, f], [a, f], [a]]}
    snap = {"device_traces": [[s, s, s], [a, f, {"frames": []} | a], []]}
    out = with_request_ring(snap, rings)
    assert out[RING_KEY] == {"bytes_per_device": 128, "source": ["ring", "history", "ring"],
                             "wrapped": [False, True, False]}
    assert out["device_traces"][0] == [a, f] and out["device_traces"][2] == [a]
    assert len(out["device_traces"][1]) == 3
    # The ring off: the snapshot as it was.
    plain = {"device_traces": [[]]}
    assert with_request_ring(plain, {"records": 0, "record_bytes": 32, "wrapped": [],
                                     "device_traces": [[]]}) == {"device_traces": [[]]}


def test_ring_size_and_budget_are_checked_and_stop_drops_the_ring(ca, tmp_path, monkeypatch):
    from cachealloc import oom_recorder

    for bad in (0, -1, True, "5", float("nan"), 16385):
        with pytest.raises(ValueError, match="ring_mb must be a number of MiB > 0 and at most 16384"):
            oom_recorder.ring_bytes(bad)
    monkeypatch.setenv(oom_recorder.RING_ENV, "lots")
    with pytest.raises(ValueError, match="CACHEALLOC_OOM_RING_MB must be a number of MiB > 0"):
        oom_recorder.FlightRecorder(str(tmp_path / "x"))
    monkeypatch.delenv(oom_recorder.RING_ENV)
    for bad in ("soon", "0", "-5"):
        monkeypatch.setenv(oom_recorder.BUDGET_ENV, bad)
        with pytest.raises(ValueError, match="CACHEALLOC_OOM_BUDGET_MS must be a whole number"):
            oom_recorder.FlightRecorder(str(tmp_path / "x"))
    monkeypatch.setenv(oom_recorder.BUDGET_ENV, "2000")
    assert oom_recorder.budget() == 2000 and oom_recorder.budget(7) == 7
    monkeypatch.delenv(oom_recorder.BUDGET_ENV)
    assert oom_recorder.budget() == oom_recorder.BUDGET_MS
    monkeypatch.setenv(oom_recorder.RING_ENV, "0.5")
    assert oom_recorder.ring_bytes() == 512 * 1024
    oom_recorder.stop()
    oom_recorder.start(str(tmp_path / "y"), torch_observer=False)
    assert oom_recorder.request_rings()["records"] == 512 * 1024 // 32
    oom_recorder.stop()
    assert oom_recorder.request_rings()["records"] == 0
    assert oom_recorder.recorder() is None


def test_history_off_without_the_ring_says_so(ca, ringless_recorder):
    # A recorder without its ring (as a snapshot native dumped with history
    # off): nothing to replay, and the text names the setting.
    keep = fragment(ca)
    text = oom_of(ca, 200 * MiB)
    assert ("- what-if: history recording is off, so there is no history to replay; turn it on "
            "with torch.cuda.memory._record_memory_history(max_entries=100000)") in text, text
    assert "no frames were recorded" in text, text
    for p in keep:
        ca._free(p)


def test_history_cut_by_its_ring_starts_from_the_live_state(ca, ringless_recorder):
    # 7 entries keep only the OOM and the last six 60 MiB allocations: the
    # nine 100 MiB blocks' allocation and free are gone, and three 60 MiB
    # blocks were allocated before the oldest kept entry. (A recorder
    # without its request ring, which would hold the whole run.)
    ca.record_memory_history("all", max_entries=7)
    keep = fragment(ca)
    text = oom_of(ca, 200 * MiB)
    assert "the history starts mid-run: 3 blocks (180.00 MiB (188743680 bytes)) were live at " \
           "its oldest entry; the replay allocates them first" in text, text
    assert whatif_of(text)[2].startswith("the replay does not reproduce this OOM"), text
    for p in keep:
        ca._free(p)


def test_the_ring_replays_the_whole_run_where_the_history_is_cut(ca, recorder):
    ca.record_memory_history("all", max_entries=7)
    keep = fragment(ca)
    text = oom_of(ca, 200 * MiB)
    assert whatif_of(text)[:2] == ("the flight recorder's request ring", 28), text
    assert "mid-run" not in text and "Suggestion: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text
    for p in keep:
        ca._free(p)


def test_snapshot_files_are_atomic_bounded_and_named_by_rank_and_time(ca, tmp_path):
    from cachealloc import oom_recorder

    oom_recorder.stop()
    rec = oom_recorder.FlightRecorder(str(tmp_path / "d"), keep=2)
    oom_recorder._recorder = rec
    try:
        ca.record_memory_history("all")
        keep = fragment(ca)
        paths = []
        for _ in range(3):
            oom_of(ca, 200 * MiB)
            paths.append(rec.last_path)
        names = sorted(os.listdir(rec.directory))
        # The oldest is gone; no temporary file is left.
        assert names == sorted(os.path.basename(p) for p in paths[1:]), names
        for n in names:
            assert re.fullmatch(r"oom_rank0000_\d{8}T\d{6}\.\d{6}Z_pid\d+\.pickle", n), n
        with open(paths[-1], "rb") as f:
            snap = pickle.load(f)
        assert {"segments", "device_traces", "cachealloc_oom"} <= set(snap), snap.keys()
        assert snap["cachealloc_oom"]["rounded"] == 200 * MiB
        assert snap["device_traces"][0][-1]["action"] == "oom"
        for p in keep:
            ca._free(p)
    finally:
        oom_recorder.stop()


def test_rank_file_names(monkeypatch):
    from cachealloc.rank_files import current_rank, rank_file_name

    monkeypatch.setenv("RANK", "12")
    assert current_rank() == 12
    assert rank_file_name("oom", ".pickle", when=0.25, pid=7) == \
        "oom_rank0012_19700101T000000.250000Z_pid7.pickle"
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK"):
        current_rank()
    with pytest.raises(ValueError, match="plain word"):
        rank_file_name("../x", ".pickle")


def test_bad_directory_is_refused(ca, tmp_path):
    from cachealloc import oom_recorder

    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises((OSError, ValueError)):
        oom_recorder.FlightRecorder(str(f / "sub"))


def test_explain_on_a_native_snapshot_with_oom_events(cli, traces_dir):
    # oom_frac: native 2.11 on an H100 under a 5 % memory fraction, 61
    # OOMs caught by the program; the snapshot holds the history.
    out = subprocess.run([str(cli), "explain", str(traces_dir / "oom_frac.pickle.gz"),
                          "--memory-limit", str(int(0.05 * 85017493504))],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "cachealloc diagnosis (device 0):", out.stdout
    assert lines[1] == ("- the request: rounded to 884.76 MiB (927735296 bytes), needing a new "
                        "segment of 886.00 MiB (929038336 bytes); 3.96 GiB (4250874675 bytes) allowed"), out.stdout
    # The program went on after its OOMs and freed everything before the
    # snapshot: the text says the segments are not the state at the failure.
    assert lines[2].startswith("- this snapshot was taken "), out.stdout
    assert any("reserved but unallocated" in l for l in lines), out.stdout
    assert any(l.startswith("- what-if (the recorded history, ") for l in lines), out.stdout


def test_diagnose_from_python_equals_explain_on_a_native_snapshot(ca, traces_dir):
    import gzip
    from cachealloc import oom_recorder

    data = gzip.open(traces_dir / "oom_frac.pickle.gz").read()
    text = oom_recorder.diagnose(data, memory_limit=int(0.05 * 85017493504))
    assert text.startswith("cachealloc diagnosis (device 0):\n- the request: rounded to 884.76 MiB"), text
    assert "no setting fits in 3.96 GiB (4250874675 bytes): the least any needs is" in text, text


def test_explain_refuses_a_file_that_is_not_a_snapshot(cli, tmp_path):
    bad = tmp_path / "x.pickle"
    bad.write_bytes(pickle.dumps([1, 2, 3]))
    out = subprocess.run([str(cli), "explain", str(bad)], capture_output=True, text=True)
    assert out.returncode == 2 and "expected a dict" in out.stderr, (out.stdout, out.stderr)
