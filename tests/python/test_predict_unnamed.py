"""cachealloc predict on workloads issue 33 does not name: what a user's
script does that the named workloads did not (docs/prediction.md,
"Workloads the issue does not name"). One fake-device worker per test
(a few seconds each)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from cachealloc import plain_pickle

REPO = pathlib.Path(__file__).resolve().parents[2]
torch = pytest.importorskip("torch")
STEPS = pathlib.Path(__file__).with_name("predict_steps")


@pytest.fixture(autouse=True)
def _tool(cli, monkeypatch):
    monkeypatch.setenv("CACHEALLOC_CLI", str(cli))


def _requests(path):
    with open(path, "rb") as f:
        snap = plain_pickle.load(f)
    return [(e["action"], e["size"]) for e in snap["device_traces"][0]
            if e["action"] in ("alloc", "free_requested")]


def test_amp_script_with_loader_streams_and_scaler_steps(tmp_path):
    """DataLoader(num_workers=2, pin_memory=True), record_stream, events,
    synchronize, the memory API (memory_stats, memory_summary, memory
    history, _dump_snapshot: the requests so far), NVTX ranges,
    nn.Linear(device="cuda") and a GradScaler
    all run on the fake device; the scaler takes every step (its found_inf
    read got a placeholder, which skipped each step: no optimizer state,
    and the script ran to its end) and so does the NaN guard (isnan/isfinite
    answer "finite"). The (1024, 512) fp32 weight's 2 MiB requests: the
    weight, its gradient in each of the 3 steps, one momentum buffer."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))
    proc = subprocess.run(
        [sys.executable, "-m", "cachealloc.predict.answer.cli", "--gpu", "H200-141GB", "--steps", "3",
         "--size", "8", "--batch-arg=--batch-size", "--json", "--no-advise", "--",
         "python", str(STEPS / "amp_train.py"), "--snapshot", str(tmp_path / "user.pickle")],
        capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    ans = json.loads(proc.stdout)
    assert ans["steps"] == 3
    sizes = [s for a, s in _requests(ans["trace"]) if a == "alloc"]
    assert sizes.count(1024 * 512 * 4) == 1 + 3 + 1
    # The snapshot the script dumped after its 2nd step: the requests so far.
    dumped = [s for a, s in _requests(tmp_path / "user.pickle") if a == "alloc"]
    assert 0 < len(dumped) < len(sizes) and dumped == sizes[:len(dumped)]


def test_attention_takes_the_cuda_dispatch_path(tmp_path):
    """steps.py:attention_variants on an H200: the kernel per call, and the
    bool mask's conversion (two 4-byte scalars, where's additive mask) before
    the memory-efficient kernel's output."""
    from cachealloc import predict
    gpu = predict.resolve_gpu("H200-141GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:attention_variants", gpu, size=128, steps=1,
                         workdir=tmp_path)
    assert rec.summary["attention_calls"] == {
        "memory-efficient: float32, head dim 64, mask": 1,
        "cuDNN: float16, head dim 64": 1,               # autocast cast fp32 inputs first
        "cuDNN: bfloat16, head dim 64, 8/2 query/key heads": 1,
        "memory-efficient: float32, head dim 36": 1,
        "math: float32, head dim 64": 1}
    assert rec.summary["unmodelled_calls"] == {"nn.LSTM (cuDNN RNN)": 1}
    req = _requests(rec.trace)
    setup = [s for _, s in req[:5]]
    assert setup == [2 * 4 * 128 * 64 * 4, 2 * 128 * 128, 2 * 8 * 128 * 64 * 2,
                     2 * 2 * 128 * 64 * 2, 2 * 4 * 128 * 36 * 4]
    # The LSTM's weights and biases (4 * 16 gates).
    assert [s for _, s in req[5:9]] == [64 * 36 * 4, 64 * 16 * 4, 64 * 4, 64 * 4]
    mask_f32, out = 2 * 128 * 128 * 4, 2 * 4 * 128 * 64 * 4
    assert req[9:15] == [("alloc", 4), ("alloc", 4), ("alloc", mask_f32), ("free_requested", 0),
                         ("free_requested", 0), ("alloc", out)]
    # Under autocast: q, k and v each cast to fp16 (one request each), then
    # cuDNN's Philox seed and offset, output and 256-byte workspace (no
    # fp32 stats: no gradient will need them).
    half = 2 * 4 * 128 * 64 * 2
    allocs = [s for a, s in req[15:] if a == "alloc"]
    assert allocs[:7] == [half, half, half, 8, 8, half, 256]


def test_sdp_backend_rules(monkeypatch):
    """gpu_model.choose_sdp_backend's filters (sdp_utils.cpp), on shapes
    alone, for flash, memory-efficient and math: with cuDNN attention put
    last (TORCH_CUDNN_SDPA_DEPRIORITIZED=1; test_predict_attention.py checks
    the cuDNN rules)."""
    from cachealloc.predict.kernels import gpu_model as g
    monkeypatch.setenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1")
    h200, rtx4090 = (9, 0), (8, 9)
    half = torch.empty(2, 4, 16, 64, dtype=torch.float16)
    assert g.choose_sdp_backend(h200, half, half, half, None, 0.0) == g.SDP_FLASH
    # causal over unequal query and key lengths: not flash
    k = torch.empty(2, 4, 32, 64, dtype=torch.float16)
    assert g.choose_sdp_backend(h200, half, k, k, None, 0.0, is_causal=True) == g.SDP_EFFICIENT
    # a last dimension of stride 2: math
    strided = torch.empty(2, 4, 16, 128, dtype=torch.float16)[..., ::2]
    assert g.choose_sdp_backend(h200, strided, strided, strided, None, 0.0) == g.SDP_MATH
    # head dim 256 with a gradient: flash on sm90, not on sm89
    big = torch.empty(2, 4, 16, 256, dtype=torch.float16, requires_grad=True)
    assert g.choose_sdp_backend(h200, big, big, big, None, 0.0) == g.SDP_FLASH
    assert g.choose_sdp_backend(rtx4090, big, big, big, None, 0.0) == g.SDP_EFFICIENT
    # fp32 views at an element offset that is not a multiple of 4: math
    packed = torch.empty(2, 16, 3 * 4 * 36 + 2)[..., 2:].unflatten(-1, (3, 4, 36))
    q = packed.permute(2, 0, 3, 1, 4)[0]
    assert q.storage_offset() % 4 and g.choose_sdp_backend(h200, q, q, q, None, 0.0) == g.SDP_MATH
