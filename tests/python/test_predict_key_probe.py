"""The key-level cuDNN probe (kernels/key_probe.py) and cudnn.benchmark's
empty cache: keys rebuilt into the very calls they name, one call's history
classified (workspaces, own allocations, the cache emptied), a table's
empty cache placed in the step and replayed as empty_cache(), and the keys
file `cachealloc predict --cudnn-keys` writes."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
STEPS = pathlib.Path(__file__).with_name("predict_steps") / "steps.py"

torch = pytest.importorskip("torch")

from cachealloc.predict.kernels import cudnn_key, key_probe  # noqa: E402
from test_predict_cudnn import _table  # noqa: E402


def _calls():
    """(func, args) of convolutions of every kind a key can name: 1-, 2- and
    3-d, channels_last and strided inputs, grouped, depthwise, transposed,
    dilated, with and without bias, backward with each mask."""
    aten = torch.ops.aten
    cl = torch.channels_last
    x = torch.randn(2, 8, 9, 7)
    w = torch.randn(4, 8, 3, 3)
    out = []
    out.append((aten.convolution.default, (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)))
    out.append((aten.convolution.default, (x.contiguous(memory_format=cl), w.contiguous(memory_format=cl),
                                           torch.randn(4), [2, 1], [1, 1], [1, 2], False, [0, 0], 1)))
    out.append((aten.convolution.default, (x.transpose(-1, -2), torch.randn(8, 2, 3, 3), None, [1, 1],
                                           [1, 1], [1, 1], False, [0, 0], 4)))       # strided, grouped
    out.append((aten.convolution.default, (x, torch.randn(8, 1, 5, 5), None, [1, 1], [2, 2], [1, 1],
                                           False, [0, 0], 8)))                      # depthwise
    out.append((aten.convolution.default, (x, torch.randn(8, 3, 2, 2), torch.randn(6), [2, 2], [0, 0],
                                           [1, 1], True, [1, 1], 2)))                # transposed
    out.append((aten.convolution.default, (torch.randn(2, 4, 11), torch.randn(6, 4, 3), None, [1], [1],
                                           [1], False, [0], 1)))                     # 1-d
    out.append((aten.convolution.default, (torch.randn(1, 2, 4, 5, 6), torch.randn(3, 2, 1, 2, 3), None,
                                           [1, 1, 1], [0, 0, 0], [1, 1, 1], False, [0, 0, 0], 1)))
    go = torch.randn(2, 4, 7, 5)
    for mask in ([True, True, True], [False, True, False], [True, False, False]):
        out.append((aten.convolution_backward.default, (go, x, w, [4] if mask[2] else None, [1, 1],
                                                        [0, 0], [1, 1], False, [0, 0], 1, mask)))
    return out


@pytest.mark.parametrize("bench", [False, True])
def test_keys_rebuild_into_the_calls_they_name(bench):
    """Every key, parsed and rebuilt into tensors (here on the CPU), gives
    the same key again: shapes, strides, memory format, dtype, flags and
    the call's own arguments all survive the trip."""
    old = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = bench
        for dtype in (torch.float32, torch.bfloat16):
            for func, args in _calls():
                args = tuple(a.to(dtype) if isinstance(a, torch.Tensor) else a for a in args)
                key = cudnn_key.conv_key(func, args)
                k = key_probe.parse_key(key)
                assert k["flags"][0] == int(bench)
                f2, a2 = key_probe.build_call(k, device="cpu")
                torch.backends.cudnn.benchmark = bench
                assert cudnn_key.conv_key(f2, a2) == key
    finally:
        torch.backends.cudnn.benchmark = old


def test_bad_keys_are_refused(tmp_path):
    with pytest.raises(key_probe.KeyError_, match="13 '|'-separated"):
        key_probe.parse_key("fwd|in=1,2,3,3")
    good = cudnn_key.conv_key(*_calls()[0])
    with pytest.raises(key_probe.KeyError_, match="invalid literal"):
        key_probe.parse_key(good.replace("g=1", "g=x"))
    f = tmp_path / "k.json"
    f.write_text(json.dumps({"format": key_probe.KEYS_FORMAT, "sizes": {"2": [good, 3]}}))
    with pytest.raises(ValueError, match="size 2: not a list of key strings"):
        key_probe.load_keys(f)
    f.write_text(json.dumps({"sizes": {}}))
    with pytest.raises(ValueError, match="not a cachealloc-cudnn-keys/1 file"):
        key_probe.load_keys(f)


def test_one_calls_history_is_classified():
    """A benchmark first call as torch's find path makes it: the output, the
    timing workspace (allocated, freed), the cache emptied (a run of segment
    releases), the chosen plan's workspace. The release run is one empty
    cache, placed after one workspace and the one own allocation."""
    trace = [{"action": "alloc", "addr": 1, "size": 100},            # output
             {"action": "alloc", "addr": 2, "size": 5 << 20},       # find's workspace
             {"action": "free_requested", "addr": 2, "size": 5 << 20},
             {"action": "free_completed", "addr": 2, "size": 5 << 20},
             {"action": "segment_free", "addr": 9, "size": 20 << 20},
             {"action": "segment_free", "addr": 10, "size": 2 << 20},
             {"action": "alloc", "addr": 3, "size": 1 << 20},       # the plan's workspace
             {"action": "free_requested", "addr": 3, "size": 1 << 20}]
    ws, own, empties = key_probe.classify(key_probe.call_events(trace))
    assert ws == [[1, 5 << 20], [1, 1 << 20]]
    assert own == [100]
    assert empties == [[1, 1]]


def test_benchmark_empty_cache_is_replayed(tmp_path, monkeypatch):
    """A table entry whose first call emptied the cache: the step's trace has
    one empty cache there (first call only), and the replay releases the
    cached segments at it: the 30 MiB timing workspace's segment is given
    back (one more device free than without the mark), so the next step's
    requests open segments of their own."""
    from cachealloc import lab, predict
    gpu = predict.resolve_gpu("H200-141GB")
    conv1 = "in=2,3,16,16|w=8,3,3,3|s=1,1|p=0,0|d=1,1|op=0,0|g=1|t=0|float32|fmt=contiguous"
    entry = {"workspaces": [[1, 1000]], "first": [[1, 30 << 20], [1, 1000]]}
    frees = {}
    for marked in (False, True):
        e = dict(entry, **({"first_empty_cache": [[1, 1]]} if marked else {}))
        table = _table(tmp_path / f"t{marked}.json", {f"fwd|{conv1}|bias=1|flags=0,0,1": e})
        monkeypatch.setenv("CACHEALLOC_CUDNN_TABLE", str(table))
        rec = predict.record(f"{STEPS}:convolution", gpu, size=2, steps=2,
                             workdir=tmp_path / str(marked))
        assert rec.summary["empty_caches_replayed"] == int(marked)
        assert rec.summary["cudnn"]["empty_caches"] == int(marked)
        row = lab.compare(str(rec.trace), [""])[0]
        frees[marked] = row["device_frees"]
        if marked:
            # The timing workspace has a fallback group of its own; the
            # plan's workspace shares its group with the later calls'.
            from cachealloc.predict.request_stream import load_device_trace
            ws = [e for e in load_device_trace(rec.trace)
                  if e["action"] == "alloc" and "fallible_group" in e]
            assert [e["size"] for e in ws[:3]] == [30 << 20, 1000, 1000]
            assert ws[0]["fallible_group"] != ws[1]["fallible_group"] == ws[2]["fallible_group"]
    assert frees[True] == frees[False] + 1


def test_predict_writes_the_missing_keys(tmp_path):
    """--cudnn-keys: the keys the table lacks, per size, in first-call
    order, in the format key_probe reads."""
    out = tmp_path / "keys.json"
    env = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))
    proc = subprocess.run([sys.executable, "-m", "cachealloc.predict.answer.cli", "--gpu", "H200-141GB",
                           "--cudnn-table", "none", "--builder", f"{STEPS}:convolution", "--size", "2",
                           "--cudnn-keys", str(out), "--no-advise"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode in (0, 1, 3), proc.stderr
    sizes = key_probe.load_keys(out)
    keys = sizes["2"]
    assert keys[0].startswith("fwd|in=2,3,16,16|w=8,3,3,3|")
    assert sum(k.startswith("bwd|") for k in keys) == 2 and len(keys) == 4
    assert "4 convolution key(s)" in proc.stderr


def test_scripts_empty_cache_is_replayed(tmp_path):
    """torch.cuda.empty_cache() in the step: counted, and replayed where it
    was called: the 40 MiB block's segment is released before the 50 MiB
    request, so the replay frees a segment and peak reserved is 50 MiB,
    not the 90 MiB of both segments kept."""
    from cachealloc import lab, predict
    gpu = predict.resolve_gpu("H200-141GB")
    rec = predict.record(f"{STEPS}:empty_cache_between", gpu, size=1, steps=1,
                         no_optimizer_step=True, workdir=tmp_path)
    assert rec.summary["empty_cache_calls"] == 1 and rec.summary["empty_caches_replayed"] == 1
    row = lab.compare(str(rec.trace), [""])[0]
    assert row["device_frees"] >= 1
    assert row["peak_reserved"] == 50 << 20


def test_timing_workspaces_bound_no_plan():
    """workspace_bound's class ratios use the plans' workspaces only: a
    cudnn.benchmark first call's timing workspace (the one before each
    empty cache) takes what the largest plan asks and would blow every
    bound of its class up (seen: 4.8 GB on one RegNetY key)."""
    from cachealloc.predict.kernels import workspace_bound
    e = {"workspaces": [[2, 131]], "first": [[2, 5 << 30], [2, 131], [3, 7 << 20], [3, 4096]],
         "first_empty_cache": [[2, 1], [3, 3]]}
    assert workspace_bound.largest_workspace(e) == 4096
    assert workspace_bound.largest_workspace({"workspaces": [[0, 10]], "first": [[0, 99]]}) == 99
    assert key_probe.find_marks(e["first"], [[2, 131], [3, 4096]]) == [[2, 1], [3, 3]]


def test_find_marks_with_a_timing_workspace_the_size_of_its_plan():
    """The timing workspace comes before its plan's: when both have the
    same size the mark still follows the first of them (review, session 25:
    8 of 576 probed keys)."""
    assert key_probe.find_marks([[1, 65544339], [1, 65544339]], [[1, 65544339]]) == [[1, 1]]
    assert key_probe.find_marks([[1, 7], [1, 7], [2, 9], [2, 3]], [[1, 7], [2, 3]]) == [[1, 1], [2, 3]]


def test_cudnn_table_option_goes_before_the_bundled_tables(tmp_path, monkeypatch):
    """`--cudnn-table FILE` (CACHEALLOC_CUDNN_TABLE=+FILE): the file's keys
    first, the bundled tables' for the keys it lacks, so a probe of only the
    keys a prediction lacked loses none the bundled tables had; a plain
    path is that table alone."""
    from cachealloc import predict
    from cachealloc.predict.kernels import cudnn_workspace
    gpu = predict.resolve_gpu("H100-80GB")
    bundled, _ = cudnn_workspace.choose_table(gpu, "2.11.0", env={})
    some = next(iter(bundled["entries"]))
    mine = tmp_path / "mine.json.gz"
    import gzip
    with gzip.open(mine, "wt") as f:
        json.dump({"format": "cachealloc-cudnn-workspaces/1", "torch": "2.11.0", "cudnn": 1,
                   "gpu": {"name": gpu.product, "capability": [9, 0]},
                   "entries": {"fwd|mine|flags=0,0,1": {"workspaces": [[0, 5]]},
                               some: {"workspaces": [[0, 77]]}}}, f)
    t, why = cudnn_workspace.choose_table(gpu, "2.11.0", env={cudnn_workspace.ENV: f"+{mine}"})
    assert t["entries"]["fwd|mine|flags=0,0,1"] == {"workspaces": [[0, 5]]}
    assert t["entries"][some] == {"workspaces": [[0, 77]]}
    assert len(t["entries"]) == len(bundled["entries"]) + 1 and "first" in why
    alone, _ = cudnn_workspace.choose_table(gpu, "2.11.0", env={cudnn_workspace.ENV: str(mine)})
    assert len(alone["entries"]) == 2


def test_probe_with_no_keys_writes_an_empty_table(tmp_path, monkeypatch):
    """A keys file with nothing to measure still gives a table (no GPU
    call is made for it; the GPU's name is faked here)."""
    keys = tmp_path / "k.json"
    keys.write_text(json.dumps({"format": key_probe.KEYS_FORMAT, "sizes": {}}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(key_probe, "gpu_header", lambda torch, source: {
        "format": key_probe.TABLE_FORMAT, "gpu": {"name": "x", "capability": [9, 0]}, "entries": {}})
    out = tmp_path / "t.json"
    assert key_probe.main([str(keys), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["entries"] == {}


def test_history_alignment_skips_the_empty_cache():
    """cudnn_history's walk of the fake run against a GPU history: the fake
    run's EMPTY (a script's torch.cuda.empty_cache()) has no GPU request."""
    from cachealloc.predict.device.recorder import ALLOC, EMPTY, FREE, NO_ID
    from cachealloc.predict.kernels import cudnn_history
    fake = [(ALLOC, 1, 100, 0), (FREE, 1, 0, 0), (EMPTY, NO_ID, 0, 0), (ALLOC, 2, 200, 0)]
    gpu = [("a", 10, 100), ("f", 10, 100), ("a", 11, 200)]
    found, matched = cudnn_history.workspaces_by_call(gpu, fake, [])
    assert found == {} and matched == 3


def test_keys_file_bounds(tmp_path, monkeypatch):
    """A size that is not a whole number and a file over the byte bound are
    refused with the problem named (never read whole into memory)."""
    good = cudnn_key.conv_key(*_calls()[0])
    f = tmp_path / "k.json"
    f.write_text(json.dumps({"format": key_probe.KEYS_FORMAT, "sizes": {"--x": [good]}}))
    with pytest.raises(ValueError, match="size '--x' is not a whole number"):
        key_probe.load_keys(f)
    monkeypatch.setattr(key_probe, "MAX_BYTES", 100)
    f.write_text(json.dumps({"format": key_probe.KEYS_FORMAT, "sizes": {"2": [good] * 5}}))
    with pytest.raises(ValueError, match="larger than 100 bytes"):
        key_probe.load_keys(f)


def test_a_key_that_does_not_rebuild_is_not_measured(monkeypatch):
    """A strided key whose last dimension is 1 cannot be rebuilt strided:
    the probe marks it unstable (not modelled) instead of measuring another
    call under its name. Run on the CPU here: such a key never reaches the
    GPU calls."""
    x = torch.randn(2, 8, 1, 9)[:, :, :, ::2]          # neither contiguous nor channels_last
    w = torch.randn(4, 8, 1, 1)
    key = cudnn_key.conv_key(torch.ops.aten.convolution.default,
                             (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1))
    assert "fmt=strided" in key
    build = key_probe.build_call
    monkeypatch.setattr(key_probe, "build_call", lambda k, device="cpu": build(k, device="cpu"))
    e = key_probe.probe_keys([key])[key]
    assert e["unstable"] is True and e["workspaces"] == []
    assert e["not_rebuilt"] != key and "fmt=contiguous" in e["not_rebuilt"]


def test_the_key_names_the_format_cudnn_runs_in():
    """A convolution's key says the memory format cuDNN runs it in, which is
    torch's choice (cudnn_conv_suggest_memory_format): channels_last when
    the weight is a 1 x 1 kernel with channels_last strides (those strides
    are contiguous ones too) and the input has spatial extent, and for a
    channel slice of a channels_last tensor; its input is then copied to
    channels_last (conv_input.py). Holdout 32's CSPResNet-50 had NCHW keys
    there, whose probed workspaces (36.75 MiB at b64) the H100 never took."""
    conv = torch.ops.aten.convolution.default
    cl = torch.channels_last

    def fmt(x, w):
        return cudnn_key.conv_key(conv, (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
                                  ).split("|fmt=")[1].split("|")[0]
    w1 = torch.empty(16, 32, 1, 1).to(memory_format=cl)
    assert w1.is_contiguous() and w1.is_contiguous(memory_format=cl)
    assert fmt(torch.empty(4, 32, 14, 14), w1) == "channels_last"
    assert fmt(torch.empty(4, 32, 1, 1), w1) == "contiguous"      # one layout either way
    assert fmt(torch.empty(4, 32, 14, 14), torch.empty(16, 32, 1, 1)) == "contiguous"
    sliced = torch.empty(4, 64, 14, 14).to(memory_format=cl)[:, :32]
    assert fmt(sliced, torch.empty(16, 32, 3, 3)) == "channels_last"
    assert fmt(torch.empty(4, 64, 14, 14)[:, :32], torch.empty(16, 32, 3, 3)) == "strided"
