"""cachealloc predict's attention on an H100-class target (issue 46): torch
2.11 with cuDNN 9.19 runs scaled_dot_product_attention on cuDNN's kernel
for fp16/bf16, and the fake device records that kernel's requests. Checked
against the GPU's own requests for the same call, from the op probes of the
zoo's tuning half (benchmarks/results/op_probe_H100/, recorded on an H100
with torch 2.11): the forward's and the backward's requests, in order and
size. Also: the kernel choice rules, and exact values of device tensors
that do not depend on the GPU's data (device/shadow_values.py)."""
import gzip
import json
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PROBES = REPO / "benchmarks" / "results" / "op_probe_H100"
STEPS = pathlib.Path(__file__).with_name("predict_steps") / "attention_steps.py"

torch = pytest.importorskip("torch")

from cachealloc.predict.request_stream import load_device_trace, request_stream  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks" / "predict"))
import op_probe  # noqa: E402

FWD = "aten._scaled_dot_product_cudnn_attention.default"
BWD = "aten._scaled_dot_product_cudnn_attention_backward.default"


@pytest.fixture(autouse=True)
def _tool(cli, monkeypatch):
    monkeypatch.setenv("CACHEALLOC_CLI", str(cli))


def _tokens(stream):
    return op_probe._tokens_of_stream(stream)   # the op probe's own form of a stream


def _gpu_call(probe: str, label: str, q_bytes: int, k_bytes: int):
    """The requests of the first call of `label` in the probe whose output
    (forward) or first gradient (backward) is q_bytes (and, backward, whose
    second is k_bytes)."""
    reqs = json.load(gzip.open(PROBES / probe, "rt"))["requests"]
    i = 0
    while i < len(reqs):
        lab = reqs[i][2] or ""
        if not lab.startswith(label + " "):
            i += 1
            continue
        j = i
        while j < len(reqs) and (reqs[j][2] or "").startswith(label + " "):
            j += 1
        call = [(k, b) for k, b, _ in reqs[i:j]]
        allocs = [b for k, b in call if k == "a"]
        if (label == FWD and len(allocs) > 2 and allocs[2] == q_bytes) or \
                (label == BWD and allocs[:2] == [q_bytes, k_bytes]):
            return call
        i = j
    raise AssertionError(f"no {label} call with output {q_bytes} B in {probe}")


def _contains(seq, sub) -> bool:
    return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


@pytest.mark.parametrize("step,probe,shape", [
    ("llama_gqa", "llama_fp32_bf16ac_default_b2.json.gz", (2, 16, 8, 2048, 2048, 64, 2)),
    ("gpt2_medium", "gpt2_medium_bf16ac_b4.json.gz", (4, 16, 16, 1024, 1024, 64, 2)),
    ("bart_cross", "bart_base_fp16_sdpa_b16.json.gz", (16, 12, 12, 128, 512, 64, 2)),
])
def test_cudnn_attention_requests_equal_the_gpus(step, probe, shape, tmp_path):
    from cachealloc import predict
    B, H, Hk, M, N, D, el = shape
    q_bytes, k_bytes = B * H * M * D * el, B * Hk * N * D * el
    gpu = predict.resolve_gpu("H100-80GB")
    rec = predict.record(f"{STEPS}:{step}", gpu, size=1, steps=1, workdir=tmp_path,
                         no_optimizer_step=True)
    assert list(rec.summary["attention_calls"])[0].startswith("cuDNN:")
    fake = _tokens(request_stream(load_device_trace(rec.trace)))
    fwd = _gpu_call(probe, FWD, q_bytes, k_bytes)
    bwd = _gpu_call(probe, BWD, q_bytes, k_bytes)
    # The forward: seed, offset (8 B each), output, fp32 stats, a 256-byte
    # workspace and its free; the backward: dq, dk, dv, one scratch block.
    assert [b for k, b in fwd if k == "a"][:2] == [8, 8]
    assert _contains(fake, fwd), (fwd, fake[:40])
    assert _contains(fake, bwd), (bwd, fake[-40:])


def test_safe_softmax_requests_equal_the_gpus(tmp_path):
    """The math kernel's _safe_softmax, as the H100 ran it in T5-base b8
    (session 27's op probe): after the output, a bool mask of the input's
    size, the all() of its rows and a 4-byte scalar, freed last first. Before
    this model the fake run lacked the three, and T5-base's classic peak
    reserved came out 128 MiB under the GPU's."""
    from cachealloc import predict
    probe = REPO / "benchmarks" / "results" / "session27_H100" / "t5_base_fp32_sdpa_classic_b8.json.gz"
    reqs = json.load(gzip.open(probe, "rt"))["requests"]
    label = "aten._safe_softmax.default float32"
    first = next(i for i, r in enumerate(reqs) if r[2] == label)
    call = [(k, b) for k, b, lab in reqs[first:first + 7]]
    assert all(lab == label for _, _, lab in reqs[first:first + 7])
    out = 8 * 12 * 512 * 512 * 4
    assert call == [("a", out), ("a", out // 4), ("a", out // 4 // 512), ("a", 4),
                    ("f", 4), ("f", out // 4 // 512), ("f", out // 4)]
    rec = predict.record(f"{STEPS}:t5_math", predict.resolve_gpu("H100-80GB"), size=1, steps=1,
                         workdir=tmp_path, no_optimizer_step=True)
    assert list(rec.summary["attention_calls"])[0].startswith("math:")
    fake = _tokens(request_stream(load_device_trace(rec.trace)))
    assert _contains(fake, call), fake[:60]


def test_kernel_choice_follows_the_target_and_the_inputs(monkeypatch):
    from cachealloc.predict.kernels import gpu_model as G

    def t(*shape, dtype=torch.bfloat16):
        return torch.empty(*shape, dtype=dtype, device="meta")
    q, kv = t(2, 16, 128, 64), t(2, 8, 128, 64)
    assert G.choose_sdp_backend((9, 0), q, kv, kv, None, 0.0, True, True) == G.SDP_CUDNN
    # sm80 (A100): torch keeps flash first
    assert G.choose_sdp_backend((8, 0), q, kv, kv, None, 0.0, True, True) == G.SDP_FLASH
    # head dim above cuDNN 9.19's 128, a dropout not a multiple of 1/16, fp32
    big = t(2, 16, 128, 256)
    assert G.choose_sdp_backend((9, 0), big, big, big, None, 0.0) == G.SDP_FLASH
    same = t(2, 16, 128, 64)
    assert G.choose_sdp_backend((9, 0), same, same, same, None, 0.1) == G.SDP_FLASH
    assert G.choose_sdp_backend((9, 0), same, same, same, None, 0.125) == G.SDP_CUDNN
    f32 = t(2, 16, 128, 64, dtype=torch.float32)
    assert G.choose_sdp_backend((9, 0), f32, f32, f32, None, 0.0) == G.SDP_EFFICIENT
    # grouped heads without enable_gqa: neither fused kernel
    assert G.choose_sdp_backend((9, 0), q, kv, kv, None, 0.0, False) == G.SDP_MATH
    # a mask: 4-D (B or 1, H or 1, M, N) passes; one autograd tracks (a
    # learned position bias) or of another shape sends it elsewhere
    mask = t(2, 1, 128, 128)
    assert G.choose_sdp_backend((9, 0), same, same, same, mask, 0.0) == G.SDP_CUDNN
    bias = t(2, 16, 128, 128).requires_grad_()
    assert G.choose_sdp_backend((9, 0), same, same, same, bias, 0.0) != G.SDP_CUDNN
    assert G.choose_sdp_backend((9, 0), same, same, same, t(16, 128, 128), 0.0) != G.SDP_CUDNN
    # torch reads the variable as set only when it is "1"
    monkeypatch.setenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", "true")
    assert G.choose_sdp_backend((9, 0), same, same, same, None, 0.0) == G.SDP_CUDNN
    monkeypatch.setenv("TORCH_CUDNN_SDPA_DEPRIORITIZED", "1")
    assert G.choose_sdp_backend((9, 0), same, same, same, None, 0.0) == G.SDP_FLASH


@pytest.mark.parametrize("step,branch,other", [("packed_check", 1 << 20, 64 << 20),
                                               ("random_check", 2 << 20, 32 << 20)])
def test_branches_on_device_values(step, branch, other, tmp_path):
    """arange-made values are known exactly (the GPU's branch); a random
    draw's are not (the placeholder's branch, True)."""
    from cachealloc import predict
    gpu = predict.resolve_gpu("H100-80GB")
    rec = predict.record(f"{STEPS}:{step}", gpu, size=1, steps=1, workdir=tmp_path,
                         no_optimizer_step=True)
    sizes = [b for k, b in _tokens(request_stream(load_device_trace(rec.trace))) if k == "a"]
    assert branch in sizes and other not in sizes, sizes


def test_shadows_are_integers_not_parameters_and_forget_list_writes():
    """shadow_values' rule on fake tensors directly: an arange and what is
    computed from it are known; a float result, a parameter moved from the
    host and a tensor written by a foreach op (the optimizers') are not."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from cachealloc.predict.device.known_values import KnownValues
    aten = torch.ops.aten
    known = KnownValues()
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        def run(func, *args, real=None, **kwargs):
            out = func(*args, **kwargs)
            known.propagate(func, args, out, kwargs, real_inputs=real)
            return out
        pos = run(aten.arange.default, 8, device="cuda", dtype=torch.int64)
        ok = run(aten.all.default, run(aten.ge.Scalar, pos, 0))
        assert known.get(ok) is True and known.is_known(pos)
        half = run(aten.div.Scalar, run(aten._to_copy.default, pos, dtype=torch.float32), 2)
        assert not known.is_known(half)                          # a float: not exact
        w = torch.nn.Parameter(torch.zeros(4))
        moved = run(aten._to_copy.default, mode.from_tensor(w.detach()), device="cuda",
                    real=((w,), {"device": "cuda"}))
        assert not known.is_known(moved)                         # model state
        counts = run(aten._to_copy.default, pos, dtype=torch.int32)
        assert known.is_known(counts)
        run(aten._foreach_add_.Scalar, [counts], 1)
        assert not known.is_known(counts)                        # written by a list op
