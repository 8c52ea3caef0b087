"""cachealloc predict's cuDNN convolution workspaces (cudnn_workspace.py):
the bundled H200 table against the bundled GPU recordings of ResNet-50 and
the ViT, workspaces put where a table says, and convolutions a table lacks
reported as not modelled."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "predict"
STEPS = pathlib.Path(__file__).with_name("predict_steps") / "steps.py"
WORKLOADS = REPO / "benchmarks" / "predict" / "workloads.py"

torch = pytest.importorskip("torch")

from cachealloc.predict.request_stream import load_device_trace, request_stream  # noqa: E402


def _request_stream(path):
    return request_stream(load_device_trace(path))


@pytest.mark.parametrize("workload,convs,workspaces", [("resnet50", 106, 106), ("vit", 2, 1)])
def test_table_gives_the_gpu_request_stream(workload, convs, workspaces, tmp_path, monkeypatch):
    """One step of ResNet-50 / the ViT at batch 4, predicted with the bundled
    H200 table, against the H200's recording (torch 2.11, classic, history
    from before the model was built): every request of the step equal in
    size, order and pairing, workspaces included (ResNet-50: 106
    workspaces a step, 400 B to 19 MiB; ViT: the patch conv's backward)."""
    from cachealloc import predict
    monkeypatch.delenv("CACHEALLOC_CUDNN_TABLE", raising=False)
    gpu = predict.resolve_gpu("H200-141GB")
    want = _request_stream(DATA / f"{workload}_classic_b4_H200.pickle.gz")
    rec = predict.record(f"{WORKLOADS}:{workload}", gpu, size=4, steps=1, workdir=tmp_path)
    got = _request_stream(rec.trace)
    # Up to the step's last allocation (then the fake run drops the model).
    n = max(i for i, e in enumerate(got) if e[0] == "alloc") + 1
    assert got[:n] == want[:n]
    c = rec.summary["cudnn"]
    assert c["not_modelled_calls"] == 0 and c["modelled_calls"] == convs
    assert c["workspaces"] == workspaces
    assert any("cudnn_H200_torch2.11" in line for line in rec.summary["modelled"])



def _table(path, entries, product="NVIDIA H200", capability=(9, 0)):
    """A cuDNN workspace table file of `entries` measured on `product`
    (also used by test_predict_key_probe.py)."""
    path.write_text(json.dumps({"format": "cachealloc-cudnn-workspaces/1", "torch": "2.11.0",
                                "cudnn": 91300, "source": "test",
                                "gpu": {"name": product, "capability": list(capability)},
                                "entries": entries}))
    return path


def test_workspaces_go_where_the_table_says(tmp_path, monkeypatch):
    """A table holding the test step's first convolution: its forward's
    workspace after the output (position 1; the first call its own 5,000 B),
    its backward's before grad_weight (position 0) and after grad_bias
    (position 2, the end), each allocated and freed at once. The second
    convolution is not in the table: no workspace, and reported (calls,
    keys, an example) in the summary and the 'modelled' lines that every
    answer prints. A GPU with no table at all gets the same report."""
    from cachealloc import predict
    from cachealloc.predict.kernels import cudnn_workspace
    gpu = predict.resolve_gpu("H200-141GB")
    # cudnn_key.py's format; torch's default flags: no benchmark, not
    # deterministic, TF32 allowed.
    conv1 = "in=2,3,16,16|w=8,3,3,3|s=1,1|p=0,0|d=1,1|op=0,0|g=1|t=0|float32|fmt=contiguous"
    table = _table(tmp_path / "t.json", {
        f"fwd|{conv1}|bias=1|flags=0,0,1": {"workspaces": [[1, 1000]], "first": [[1, 5000]]},
        f"bwd|{conv1}|mask=011|flags=0,0,1": {"workspaces": [[0, 3000], [2, 7000]]}})
    monkeypatch.setenv("CACHEALLOC_CUDNN_TABLE", str(table))
    rec = predict.record(f"{STEPS}:convolution", gpu, size=2, steps=2, workdir=tmp_path)
    got = _request_stream(rec.trace)
    allocs = [e[1] for e in got if e[0] == "alloc"]
    out1, out2 = 2 * 8 * 14 * 14 * 4, 2 * 4 * 14 * 14 * 4
    # per step: conv1 out, [ws], conv2 out, conv2 grad_input, grad_weight,
    # [ws], conv1 grad_weight, grad_bias, [ws]
    assert allocs[-18:] == [out1, 5000, out2, out1, 128, 3000, 864, 32, 7000,
                            out1, 1000, out2, out1, 128, 3000, 864, 32, 7000]
    n = -1                                 # the allocation's number in the stream
    for i, e in enumerate(got):            # each workspace freed by the very next request
        if e[0] == "alloc":
            n += 1
            if e[1] in (1000, 3000, 5000, 7000):
                assert got[i + 1] == ("free", n)
    c = rec.summary["cudnn"]
    assert (c["modelled_calls"], c["workspaces"], c["workspace_bytes"]) == (4, 6, 26000)
    assert (c["not_modelled_calls"], c["not_modelled_keys"]) == (4, 2)
    assert c["not_modelled_example"].startswith("fwd|in=2,8,14,14|w=4,8,1,1|")
    line = next(m for m in rec.summary["modelled"] if m.startswith("cuDNN"))
    assert "table t.json measured on NVIDIA H200 (sm90), torch 2.11.0, cuDNN 91300" in line
    assert "NOT MODELLED: 4 call(s) of 2 convolution(s)" in line
    # No table for an A100: every convolution is reported so.
    table, why = cudnn_workspace.choose_table(predict.resolve_gpu("A100-80GB"), torch.__version__, env={})
    assert table is None and why == "no bundled table for compute capability 8.0"
    ws = cudnn_workspace.CudnnWorkspaces(table, why, torch.__version__)
    assert ws.plan("fwd|any") is None
    assert "no table (no bundled table" in ws.describe() and "NOT MODELLED: 1 call(s)" in ws.describe()


def test_bad_table_is_refused(tmp_path):
    """--cudnn-table that is not a table: exit 2 naming the file and the problem."""
    from cachealloc.predict.kernels import cudnn_workspace
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "cachealloc-cudnn-workspaces/1", "gpu": {},
                               "entries": {"k": {"workspaces": [[1]]}}}))
    with pytest.raises(cudnn_workspace.TableError, match="entry 'k'"):
        cudnn_workspace.load_table(bad)
    env = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))
    proc = subprocess.run([sys.executable, "-m", "cachealloc.predict.answer.cli", "--gpu", "H200-141GB",
                           "--cudnn-table", str(tmp_path / "missing.json"), "--builder",
                           f"{STEPS}:convolution", "--size", "2"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "missing.json" in proc.stderr


def test_workspaces_read_off_a_history():
    """cudnn_history: the GPU's stream walked beside the fake run's; an
    allocation the fake run lacks, freed by the next request, inside a
    convolution's span, is that call's workspace at its position; the first
    call's own list kept when it differs; anything else is refused naming
    the request."""
    from cachealloc.predict.kernels import cudnn_history as h
    A, F = h.ALLOC, h.FREE
    # fake: conv k (out 1, grad 2), other op (3), conv k again (out 4)
    fake = [(A, 1, 100, 0), (A, 2, 200, 0), (A, 3, 300, 0), (F, 3, 0, 0), (A, 4, 100, 0)]
    calls = [["k", 0, 2], ["j", 2, 4], ["k", 4, 5]]
    gpu = [("a", 10, 100), ("a", 11, 7), ("f", 11), ("a", 12, 200), ("a", 13, 300), ("f", 13),
           ("a", 14, 100), ("a", 15, 9), ("f", 15)]
    found, matched = h.workspaces_by_call(gpu, fake, calls)
    assert matched == len(gpu) and found == {0: [[1, 7]], 2: [[1, 9]]}
    assert h.entries(calls, found) == {"k": {"workspaces": [[1, 9]], "first": [[1, 7]], "calls": 2},
                                       "j": {"workspaces": [], "calls": 1}}
    with pytest.raises(h.AlignmentError, match="GPU request 1"):
        h.workspaces_by_call([("a", 10, 100), ("a", 11, 50)], fake, calls)


def test_convolution_outputs_take_cudnns_memory_format():
    """FakeTensorMode picks a non-cuDNN backend for the fake device's
    tensors, whose output is contiguous; cuDNN's is channels_last when the
    input or the weight is (kernels/conv_format.py)."""
    from cachealloc.predict.kernels import conv_format
    cl = torch.zeros(2, 16, 8, 8).contiguous(memory_format=torch.channels_last)
    plain = torch.zeros(2, 16, 8, 8)
    w_cl = torch.zeros(16, 16, 3, 3).contiguous(memory_format=torch.channels_last)
    w = torch.zeros(16, 16, 3, 3)
    w_dw = torch.zeros(16, 1, 3, 3)      # contiguous strides (ambiguous): suggests contiguous
    assert conv_format.cudnn_format(cl, w) == torch.channels_last
    assert conv_format.cudnn_format(plain, w_cl) == torch.channels_last
    assert conv_format.cudnn_format(cl, w_dw) == torch.channels_last
    assert conv_format.cudnn_format(plain, w) is None
    assert conv_format.cudnn_format(plain, w_dw) is None
    assert conv_format.cudnn_format(cl.double(), w.double()) is None
    # torch's own rule: a channel slice of a channels_last tensor, and an
    # N x C x 1 x 1 one with channels_last strides, suggest channels_last
    assert conv_format.cudnn_format(cl[:, :8], torch.zeros(16, 8, 3, 3)) == torch.channels_last
    pooled = torch.nn.functional.adaptive_avg_pool2d(cl, 1)
    assert conv_format.cudnn_format(pooled, torch.zeros(4, 16, 1, 1)) == torch.channels_last
    five = torch.zeros(2, 4, 3, 8, 8).contiguous(memory_format=torch.channels_last_3d)
    assert conv_format.cudnn_format(five, torch.zeros(4, 4, 1, 1, 1)) == torch.channels_last_3d
    aten = torch.ops.aten
    out = conv_format.restride(aten.convolution.default, (cl, w), {}, torch.zeros(2, 16, 8, 8))
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    gi, gw, gb = conv_format.restride(aten.convolution_backward.default,
                                      (torch.zeros(2, 16, 8, 8), cl, w), {},
                                      (torch.zeros(2, 16, 8, 8), torch.zeros(16, 16, 3, 3), None))
    assert not gi.is_contiguous() and not gw.is_contiguous() and gb is None


def test_channels_last_block_makes_no_copy(tmp_path):
    """The layer norm after a channels_last convolution and a permute to
    NHWC gets a contiguous input, as on the GPU: the step's requests are the
    convolution's output, the norm's output, mean and rstd, and no copy
    (ConvNeXt in channels_last: the op probe on an H100 showed the GPU made
    none, and the fake device's copies put its peak reserved 3.4 % high)."""
    from cachealloc import predict
    gpu = predict.resolve_gpu("H100-80GB")
    rec = predict.record(f"{STEPS}:channels_last_block", gpu, size=4, steps=1, workdir=tmp_path)
    act, stat = 4 * 16 * 8 * 8 * 4, 4 * 8 * 8 * 4
    allocs = [v for kind, v in _request_stream(rec.trace) if kind == "alloc"]
    # x (zeros, then its channels_last copy), the convolution's output, the norm's
    assert allocs.count(act) == 4, allocs
    assert allocs.count(stat) == 2, allocs


def test_tables_of_one_capability_are_merged(tmp_path, monkeypatch):
    """The bundled tables of the target's compute capability are merged: the
    best-ranked (same product first) gives each key it has, the others add
    only keys it lacks; a key measured on another product is marked
    other_gpu, counted as such, and its workspace still used."""
    from cachealloc import predict
    from cachealloc.predict.kernels import cudnn_workspace
    gpu = predict.resolve_gpu("H100-80GB")
    a, b = "fwd|a|flags=0,0,1", "fwd|b|flags=0,0,1"
    _table(tmp_path / "cudnn_here.json", {a: {"workspaces": [[0, 100]]}}, gpu.product)
    _table(tmp_path / "cudnn_there.json", {a: {"workspaces": [[0, 999]]},
                                           b: {"workspaces": [[1, 200]]}})
    _table(tmp_path / "cudnn_other_cap.json", {b: {"workspaces": [[0, 5]]}}, "NVIDIA A100", (8, 0))
    monkeypatch.setattr(cudnn_workspace, "DATA", tmp_path)
    t, why = cudnn_workspace.choose_table(gpu, "2.11.0", env={})
    assert t["entries"][a] == {"workspaces": [[0, 100]]}
    assert t["entries"][b] == {"workspaces": [[1, 200]], "other_gpu": "NVIDIA H200"}
    assert t["path"].endswith("cudnn_here.json + 1 keys of cudnn_there.json")
    ws = cudnn_workspace.CudnnWorkspaces(t, why, "2.11.0")
    assert ws.plan(a) == [[0, 100]] and ws.plan(b) == [[1, 200]]
    assert ws.borrowed_keys == {b: 1} and ws.stats()["other_gpu_keys"] == 1


def test_convolutions_without_cudnn_take_no_key_and_are_listed(tmp_path):
    """cuDNN off (torch.backends.cudnn.enabled False, or aten._convolution's
    own cudnn_enabled False): torch's native CUDA kernels run the call, so
    it has no cuDNN key (no workspace, not a missing key) and no cuDNN
    memory format, and the answer names the calls as not modelled, with a
    finite band."""
    from cachealloc import predict
    from cachealloc.predict.kernels import conv_format, cudnn_key
    aten = torch.ops.aten
    x, w = torch.zeros(2, 8, 4, 4), torch.zeros(4, 8, 1, 1)
    cl = x.contiguous(memory_format=torch.channels_last)
    args = [x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, True, False, True, False]
    key = cudnn_key.conv_key(aten._convolution.default, args)
    assert key.startswith("fwd|in=2,8,4,4|w=4,8,1,1|") and key.endswith("flags=1,0,0")  # its own
    off = list(args)
    off[11] = False
    assert cudnn_key.conv_key(aten._convolution.default, off) is None
    off[0] = cl
    out = conv_format.restride(aten._convolution.default, off, {}, torch.zeros(2, 4, 4, 4))
    assert out.is_contiguous()                        # native kernels keep the fake output
    with torch.backends.cudnn.flags(enabled=False):
        assert cudnn_key.conv_key(aten.convolution.default, args[:9]) is None
    assert cudnn_key.conv_key(aten.convolution.default, args[:9]) is not None

    r = predict.fits(f"{STEPS}:convolution_without_cudnn", predict.resolve_gpu("H100-80GB"),
                     size=2, steps=2, advise=False, no_optimizer_step=True, workdir=tmp_path)
    c = r["recording"]["cudnn"]
    assert c["modelled_calls"] == 0 and c["not_modelled_calls"] == 0, c
    assert r["recording"]["unmodelled_calls"] == {
        "convolutions without cuDNN (torch's native CUDA kernels)": 8}   # 2 steps x (2 fwd + 2 bwd)
    items = [i["what"] for i in r["band"]["items"]]
    assert "convolutions without cuDNN (torch's native CUDA kernels)" in items, items
    for conf in r["configs"].values():
        assert conf["band"]["peak_allocated"][1] is not None
    # Checked (and modelled) only with cuDNN: here the meta function's outputs.
    assert set(r["coverage"]["meta_only"]) >= {"aten.convolution.default",
                                               "aten._convolution.default",
                                               "aten.convolution_backward.default"}
    assert not {"aten.convolution.default", "aten.convolution_backward.default"} & (
        set(r["coverage"]["gpu_checked"]) | set(r["coverage"]["kernel_model"]))
