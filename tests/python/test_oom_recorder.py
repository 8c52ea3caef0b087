"""The OOM flight recorder (issue 35) on the simulated device: native's
message first, then a diagnosis whose every figure is checked; the
snapshot files (atomic, bounded, named by rank and time); `cachealloc
explain` on a bundled native trace."""
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

    oom_recorder._recorder = None
    rec = oom_recorder.start(str(tmp_path / "oom"), torch_observer=False)
    yield rec
    oom_recorder._recorder = None


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
    oom_recorder._recorder = None
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
        oom_recorder._recorder = None


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


def test_history_off_is_said_with_the_setting_that_turns_it_on(ca, recorder):
    keep = fragment(ca)
    text = oom_of(ca, 200 * MiB)
    assert ("- what-if: history recording is off, so there is no history to replay; turn it on "
            "with torch.cuda.memory._record_memory_history(max_entries=100000)") in text, text
    assert "no frames were recorded" in text, text
    for p in keep:
        ca._free(p)


def test_history_cut_by_its_ring_starts_from_the_live_state(ca, recorder):
    # 12 entries keep only the 60 MiB allocations and the OOM: the nine
    # 100 MiB blocks' allocation and free are gone, and three 60 MiB blocks
    # were allocated before the oldest kept entry.
    ca.record_memory_history("all", max_entries=7)
    keep = fragment(ca)
    text = oom_of(ca, 200 * MiB)
    assert "the history starts mid-run: 3 blocks (180.00 MiB (188743680 bytes)) were live at its " \
           "oldest entry; the replay allocates them first" in text, text
    for p in keep:
        ca._free(p)


def test_snapshot_files_are_atomic_bounded_and_named_by_rank_and_time(ca, tmp_path):
    from cachealloc import oom_recorder

    oom_recorder._recorder = None
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
        oom_recorder._recorder = None


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
