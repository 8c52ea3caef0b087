"""Snapshots written by `cachealloc replay --snapshot` have the structure
and kinds of a native snapshot, use only the pickle opcodes PyTorch's
viewer accepts, and go through torch.cuda._memory_viz."""
import gzip
import pickle
import pickletools
import subprocess

import pytest

from cachealloc import plain_pickle

# What the viewer's own unpickler understands (see shared/reference/NOTES.md).
VIEWER_OPCODES = {
    "PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "SETITEM", "SETITEMS", "EMPTY_LIST",
    "APPEND", "APPENDS", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "SHORT_BINUNICODE", "BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1",
    "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE", "MEMOIZE", "BINPUT", "LONG_BINPUT",
    "BINGET", "LONG_BINGET",
}


load_plain = plain_pickle.loads


def shape(v):
    """The structure of a value: dict keys and element kinds, recursively
    (first element of each list stands for all)."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [shape(v[0])] if v else []
    if isinstance(v, tuple):
        return tuple(shape(x) for x in v)
    return type(v).__name__


# A classic recording, and expandable ones: segment_map/segment_unmap
# entries, one segment per mapped range, is_expandable.
@pytest.fixture(scope="module", params=["traces/mlp", "traces_expandable/x_mlp",
                                        "traces_expandable/x_emptycache"])
def replayed(request, cli, traces_dir, tmp_path_factory):
    trace = traces_dir.parent / f"{request.param}.pickle.gz"
    out = tmp_path_factory.mktemp("snap") / "replayed.pickle"
    proc = subprocess.run([str(cli), "replay", str(trace), "--snapshot", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    native = plain_pickle.loads(gzip.open(trace).read())
    return out.read_bytes(), native


def test_snapshot_uses_only_viewer_opcodes_at_protocol_4(replayed):
    data, _ = replayed
    ops = [op.name for op, _, _ in pickletools.genops(data)]
    assert data[:2] == b"\x80\x04"
    assert set(ops) <= VIEWER_OPCODES, set(ops) - VIEWER_OPCODES


def test_snapshot_has_native_structure_and_kinds(replayed):
    data, native = replayed
    ours = load_plain(data)
    # A segment keeps the frames of the call that reserved it after its
    # first block is split off; native loses them then (docs/design.md,
    # "Where we differ from native on purpose"), which an expandable
    # segment's first growth always does. So segment frames are compared
    # by the frames' own shape, not by whether the list is empty.
    without_frames = lambda segs: [{k: v for k, v in s.items() if k != "frames"} for s in segs]
    assert shape(without_frames(ours["segments"])) == shape(without_frames(native["segments"]))
    frame_shape = {"name": "str", "filename": "str", "line": "int"}
    assert all(shape(f) == frame_shape for s in ours["segments"] for f in s["frames"])
    assert shape(ours["allocator_settings"]) == shape(native["allocator_settings"])
    assert shape(ours["device_traces"]) == shape(native["device_traces"])
    assert ours["allocator_settings"] == native["allocator_settings"]


def test_snapshot_replays_the_recorded_history(replayed):
    data, native = replayed
    ours = load_plain(data)
    strip = lambda e: {k: e[k] for k in ("action", "addr", "size", "stream", "time_us")}
    assert [strip(e) for e in ours["device_traces"][0]] == [strip(e) for e in native["device_traces"][0]]
    layout = lambda s: (s["address"], s["total_size"], s["is_expandable"], s["segment_type"],
                        s["stream"], [(b["address"], b["size"], b["state"]) for b in s["blocks"]])
    assert [layout(s) for s in ours["segments"]] == [layout(s) for s in native["segments"]]
    # Frames recorded with the trace come back with the replayed entries.
    first = native["device_traces"][0][0]
    assert ours["device_traces"][0][0].get("frames") == first.get("frames")


def test_snapshot_goes_through_memory_viz(replayed):
    _memory_viz = pytest.importorskip("torch.cuda._memory_viz",
                                      reason="PyTorch not installed: memory_viz check skipped")
    data, _ = replayed
    snap = load_plain(data)
    folded = lambda text: text  # flamegraph.pl would be downloaded; take the folded stacks
    assert "seg_" in _memory_viz.segments(snap, format_flamegraph=folded)
    assert _memory_viz.memory(snap, format_flamegraph=folded)
    for view in (_memory_viz.trace_plot, _memory_viz.segment_plot):
        html = view(snap)
        assert "snapshot.pickle" in html and len(html) > 2000


# ---- a snapshot that cannot be written ---------------------------------------

def tiny_trace(tmp_path):
    d = {"device_traces": [[{"action": "segment_alloc", "addr": 1 << 21, "size": 2 << 20, "stream": 0},
                            {"action": "alloc", "addr": 1 << 21, "size": 512, "stream": 0}]],
         "segments": []}
    t = tmp_path / "tiny.pickle"
    t.write_bytes(pickle.dumps(d, protocol=4))
    return t


def test_replay_snapshot_write_failure_is_reported(cli, tmp_path):
    r = subprocess.run([cli, "replay", "--snapshot", "/dev/full", tiny_trace(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2, "ENOSPC on the snapshot was ignored (exit 0)"
    assert "/dev/full" in r.stderr and "No space left on device" in r.stderr, r.stderr


def _file_size_limit(limit_bytes):
    """preexec_fn: writes past limit_bytes fail with EFBIG (SIGXFSZ ignored,
    as exec keeps it) instead of killing the process."""
    import resource
    import signal

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return apply


def test_failed_snapshot_write_leaves_the_old_file_and_no_temporary(cli, traces_dir, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "snap.pickle"
    target.write_bytes(b"the previous snapshot")
    r = subprocess.run([cli, "replay", "--snapshot", target, traces_dir / "mlp.pickle.gz"],
                       capture_output=True, text=True, preexec_fn=_file_size_limit(4096))
    assert r.returncode == 2 and str(target) in r.stderr, r.stderr
    assert target.read_bytes() == b"the previous snapshot"  # not truncated
    assert [p.name for p in out_dir.iterdir()] == ["snap.pickle"]  # temporary removed
    r = subprocess.run([cli, "replay", "--snapshot", target, traces_dir / "mlp.pickle.gz"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and load_plain(target.read_bytes())["device_traces"]
