"""cachealloc predict: a training step recorded on the fake CUDA device (no
GPU, CPU torch) and replayed on the engine. Each recording is one fresh
worker process (a few seconds: torch's import dominates)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from cachealloc.predict.request_stream import load_device_trace, request_stream, requests

# Not `from conftest import ...`: with tests/gpu collected in the same run,
# "conftest" may name that folder's module.
REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CACHEALLOC_BUILD", REPO / "build"))

torch = pytest.importorskip("torch")
STEPS = pathlib.Path(__file__).with_name("predict_steps")
DATA = REPO / "tests" / "data" / "predict"


@pytest.fixture(autouse=True)
def _tool(cli, monkeypatch):
    monkeypatch.setenv("CACHEALLOC_CLI", str(cli))


def _predict_cmd(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))
    return subprocess.run([sys.executable, "-m", "cachealloc.predict.answer.cli", *args],
                          capture_output=True, text=True, env=env)


def _events(path):
    return requests(load_device_trace(path))


def test_program_order_and_sizes(tmp_path):
    from cachealloc import predict
    gpu = predict.resolve_gpu("H100-80GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:program_order", gpu, size=1000, steps=2,
                         workdir=tmp_path)
    got = [(e["action"], e["size"]) for e in _events(rec.trace)]
    one = [("alloc", 4000), ("alloc", 4000), ("free_requested", 0), ("alloc", 4),
           ("free_requested", 0), ("free_requested", 0)]
    assert got == one * 2
    # Each free names the allocation it frees, in program order: x, then y, then z.
    ev = _events(rec.trace)
    assert [ev[i]["addr"] for i in (2, 4, 5)] == [ev[0]["addr"], ev[1]["addr"], ev[3]["addr"]]


def test_host_data_on_the_fake_device(tmp_path):
    """torch.tensor/as_tensor(data, device="cuda") work with no GPU and are
    recorded at the data's size, like torch.full and torch.arange."""
    from cachealloc import predict
    gpu = predict.resolve_gpu("H100-80GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:host_data", gpu, size=1000, steps=1,
                         workdir=tmp_path)
    got = [(e["action"], e["size"]) for e in _events(rec.trace)]
    assert got == [("alloc", 4), ("alloc", 12), ("alloc", 8), ("alloc", 4000), ("alloc", 8000)] + \
        [("free_requested", 0)] * 5


def test_tied_weights_stay_one_parameter(tmp_path):
    """A parameter shared by two modules is converted once by .to("cuda"),
    as natively: one 2000 * size byte request, not two."""
    from cachealloc import predict
    gpu = predict.resolve_gpu("H100-80GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:tied", gpu, size=64, steps=1, workdir=tmp_path)
    allocs = [e["size"] for e in _events(rec.trace) if e["action"] == "alloc"]
    assert allocs == [2000 * 64]


def test_largest_is_exact_on_a_known_step(tmp_path):
    from cachealloc import predict
    gpu = predict.resolve_gpu(None, memory=64 << 20, context_bytes=0)
    ans = predict.largest(f"{STEPS / 'steps.py'}:blocks", gpu, steps=2, start=8, max_size=64,
                          workdir=tmp_path)
    # peak allocated = 2 * size MiB: 32 MiB twice fills 64 MiB exactly.
    assert ans["largest"]["physical"] == 32
    # Classic: each block is its own 32 MiB segment (large requests round to
    # 2 MiB); the temporary's segment is cached and reused: also 32.
    assert ans["largest"]["classic"] == 32
    # The answer is the largest size within the band (its figures:
    # test_predict_honest.py, with a pinned band).
    assert 0 < ans["largest_fitting"] < 32 and ans["verdict"] == "fits"


def test_largest_recorded_ahead_is_the_sequential_answer(tmp_path):
    """A second worker recording the likely next size (largest.Ahead)
    changes the time, not the answer: the same sizes probed, the same
    figures, as one worker recording them one after another."""
    from cachealloc import predict
    gpu = predict.resolve_gpu(None, memory=64 << 20, context_bytes=0)
    answers = [predict.largest(f"{STEPS / 'steps.py'}:blocks", gpu, steps=2, start=5, max_size=64,
                               workdir=tmp_path / str(ahead), ahead=ahead)
               for ahead in (False, True)]
    keys = ("verdict", "largest", "largest_within_band", "largest_fitting", "probes",
            "shown_size", "settings", "at_least", "band", "mode")
    sequential, ahead = ({k: a[k] for k in keys} for a in answers)
    assert sequential == ahead and sequential["largest"]["physical"] == 32
    # Each worker kept its own folder (its log and traces).
    assert (tmp_path / "True" / "worker1" / "worker.log").exists()


def test_unmodified_script_through_the_command(tmp_path):
    page = tmp_path / "answer.html"
    proc = _predict_cmd("--gpu", "A100-40GB", "--steps", "2", "--size", "64", "--batch-arg=--batch-size",
                        "--json", "--html", str(page), "--no-advise", "--",
                        "python", str(STEPS / "tiny_train.py"), "--steps", "1000")
    assert proc.returncode == 0, proc.stderr
    ans = json.loads(proc.stdout)
    assert ans["fits"] and ans["steps"] == 2
    # The loss's .item() after the first step got a placeholder (the second
    # step's print comes after the recording stops; cpu-init mode reads the
    # initialisation's CPU values for real, so those are no placeholders).
    assert ans["recording"]["item_placeholders"] >= 1
    assert ans["mode"] == "cpu-init"
    # Adam's moments, parameters and gradients are all there: >= 4 x params.
    params = (256 * 1024 + 1024 + 1024 * 256 + 256) * 4
    assert ans["configs"]["classic"]["peak_allocated"] >= 4 * params
    assert page.read_text().startswith("<!doctype html>") and "FITS" in page.read_text()


def test_bad_input_exit_2():
    proc = _predict_cmd("--gpu", "H1000", "--builder", "x.py:f", "--size", "1")
    assert proc.returncode == 2 and "H100-80GB" in proc.stderr and "--gpu-memory" in proc.stderr
    proc = _predict_cmd("--gpu-memory", "12 parsecs", "--builder", "x.py:f", "--size", "1")
    assert proc.returncode == 2 and "byte size" in proc.stderr


def test_refusals_name_the_problem(tmp_path):
    """A step the fake device refuses could not be predicted: exit 4."""
    proc = _predict_cmd("--gpu", "H100-80GB", "--builder", f"{STEPS / 'steps.py'}:compiled",
                        "--size", "8")
    assert proc.returncode == 4 and "torch.compile" in proc.stderr
    assert "steps.py:29" in proc.stderr     # the line that called torch.compile
    proc = _predict_cmd("--gpu", "H100-80GB", "--builder", f"{STEPS / 'steps.py'}:data_dependent",
                        "--size", "8")
    assert proc.returncode == 4 and "nonzero" in proc.stderr and "steps.py:" in proc.stderr


def _gpu_recording():
    return (DATA / "encoder_small.json").exists()


@pytest.mark.skipif(not _gpu_recording(), reason="no GPU recording bundled in tests/data/predict")
def test_prediction_matches_gpu_recording(tmp_path):
    """The GPU recording (tests/data/predict/encoder_small.*: native
    allocator, H200, torch 2.11, history started before the model was built)
    against the fake device's recording of the same step: every request of
    the step, allocations and frees, equal in size, order and pairing."""
    from cachealloc import lab, predict
    meta = json.loads((DATA / "encoder_small.json").read_text())
    gpu = predict.resolve_gpu("H200-141GB", memory=meta["device_total_memory"])
    rec = predict.record(str(REPO / meta['builder']), gpu, size=meta["batch"],
                         steps=meta["steps"], workdir=tmp_path)
    for name in ("encoder_small", "encoder_small_expandable"):
        want = request_stream(load_device_trace(DATA / f"{name}.pickle.gz"))
        got = request_stream(load_device_trace(rec.trace))
        assert sum(1 for e in want if e[0] == "alloc") == meta["final_memory_stats"]["allocation.all.allocated"]
        # Exact: the fake device sees every allocation of this step (cuBLAS
        # and cuBLASLt workspaces, dropout, memory-efficient attention and its
        # backward's temporaries modelled as torch 2.11's CUDA kernels make them).
        assert got[:len(want)] == want
        # The GPU's history was snapshotted with the model, optimizer state and
        # workspaces still alive; the fake run goes on to free what the step
        # owned when it is dropped: only frees, and every live allocation but
        # the never-freed workspaces (2 cuBLAS, 1 cuBLASLt).
        rest = got[len(want):]
        assert all(kind == "free" for kind, _ in rest)
        live = meta["final_memory_stats"]["allocation.all.current"]
        assert len(rest) == live - 3
    # ...so the replayed peaks are the GPU's, under both policies.
    for conf, name in (("", "encoder_small"), ("expandable_segments:True", "encoder_small_expandable")):
        truth = json.loads((DATA / f"{name}.json").read_text())
        row = lab.compare(rec.trace, [conf])[0]
        assert row["peak_allocated"] == truth["max_memory_allocated"]
        assert row["peak_reserved"] == truth["max_memory_reserved"]


def test_workspace_models():
    """cuBLASLt workspace: CUBLASLT_WORKSPACE_SIZE KiB (1 MiB default), capped
    at the cuBLAS workspace, none when unified; the memory-efficient backward
    workspace as measured on the H200 (fp32, head dim 64, B * H = 16, M = 128)."""
    from cachealloc.predict.kernels import cuda_kernels
    from cachealloc.predict.kernels import gpu_model
    assert gpu_model.cublaslt_workspace_bytes((9, 0), env={}) == 1 << 20
    assert gpu_model.cublaslt_workspace_bytes((9, 0), env={"CUBLASLT_WORKSPACE_SIZE": "4096"}) == 4 << 20
    assert gpu_model.cublaslt_workspace_bytes(
        (9, 0), env={"CUBLASLT_WORKSPACE_SIZE": "65536", "CUBLAS_WORKSPACE_CONFIG": ":4096:2"}) == 8 << 20
    assert gpu_model.cublaslt_workspace_bytes((9, 0), env={"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "1"}) == 0
    assert cuda_kernels._efficient_backward_workspace(4, 4, 128, 64, torch.float32) == 524800


def test_reduction_buffers():
    """The CUDA reduction's global-memory staging buffer and semaphores, as
    the H200 recording of the full encoder shows them for a Linear layer's
    bias gradient (grad.sum(0) of (2048, 512) fp32: 8 MiB + 16 B); none for a
    reduction that one thread block per output finishes."""
    from cachealloc.predict.kernels import cuda_reduce
    assert cuda_reduce.buffers(torch.empty(2048, 512), [0], 4, 132, 2048) == (8388608, 16)
    assert cuda_reduce.buffers(torch.empty(4, 512, 512), [0, 1], 4, 132, 2048) == (8388608, 16)
    assert cuda_reduce.buffers(torch.empty(512, 256), [0], 4, 132, 2048) == (0, 0)
    assert cuda_reduce.buffers(torch.empty(8, 4096), [1], 4, 132, 2048) == (0, 0)


def test_embedding_backward_matches_gpu_recording(tmp_path):
    """GPT-2's token-embedding backward as the H200 recorded it (torch 2.11,
    tests/data/predict/gpt2_embedding_backward_H200.json): sorted and
    original indices, the arange, CUB's radix-sort storage, grad_weight, the
    segment buffers, unique-by-key and scan storage, the fp32 partial sums,
    in order, sizes and pairing."""
    from cachealloc import predict
    want = json.loads((DATA / "gpt2_embedding_backward_H200.json").read_text())["requests"]
    gpu = predict.resolve_gpu("H200-141GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:embedding_backward", gpu, size=4, steps=1,
                         workdir=tmp_path)
    ev = _events(rec.trace)
    # Set-up: table, ids, incoming gradient; the step: the lookup's output,
    # then the backward, from the next request on.
    outputs = [i for i, e in enumerate(ev) if e["action"] == "alloc" and e["size"] == 4 * 1024 * 768 * 2]
    start = outputs[1] + 1
    assert request_stream(ev, start)[:len(want)] == [tuple(r) for r in want]


def test_batch_norm_channels_last_matches_gpu_recording(tmp_path):
    """torch's native batch norm (bf16, so not cuDNN's) on a channels-last
    input as the H100 recorded it in RegNet-Y-1.6GF (torch 2.11,
    tests/data/predict/batch_norm_channels_last_H100.json): the forward's
    statistics staging buffer (4 x 336 x 49 fp32) and semaphores after
    output, save_mean and save_invstd; the backward's fp32 sums, grad_weight
    and grad_bias, its staging buffer (2 x 336 x 49 fp32) and semaphores,
    then grad_input. The grid's 49 rows: flexible_launch_configs at a
    reduction of 64 x 14 x 14 = 12,544 values per channel."""
    from cachealloc import predict
    from cachealloc.predict.kernels import cuda_batch_norm
    assert cuda_batch_norm.grid(12544, 336) == (11, 49)
    assert cuda_batch_norm.grid(50176, 336) == (11, 128)     # 28 x 28: 688,128 B on the GPU
    assert cuda_batch_norm.grid(3136, 888) == (28, 13)       # 7 x 7: 184,704 B
    assert cuda_batch_norm.grid(392, 888)[1] == 1            # too few rows: no staging
    want = json.loads((DATA / "batch_norm_channels_last_H100.json").read_text())
    gpu = predict.resolve_gpu("H100-80GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:batch_norm_channels_last", gpu, size=64, steps=1,
                         workdir=tmp_path)
    ev = _events(rec.trace)
    out = next(i for i, e in enumerate(ev) if e["action"] == "alloc" and e["size"] == 8429568
               and ev[i + 1]["size"] == 1344)
    assert request_stream(ev, out)[:len(want["forward"])] == [tuple(r) for r in want["forward"]]
    back = next(i for i in range(out + len(want["forward"]), len(ev))
                if ev[i]["action"] == "alloc" and ev[i]["size"] == 1344)
    assert request_stream(ev, back)[:len(want["backward"])] == [tuple(r) for r in want["backward"]]


def test_bert_token_type_embedding_matches_gpu_recording(tmp_path):
    """BERT's token-type embedding as the H200 recorded it (torch 2.11,
    transformers 5.17, batch 16: tests/data/predict/
    bert_token_type_embedding_H200.json). Forward: the expanded ids cannot
    be flattened as a view, so embedding copies them (reshape(-1)) around
    index_select. Backward: with 2 distinct rows the per-segment sum would
    run on 2 thread blocks, so torch 2.11 adds the partial sums into
    grad_weight atomically: partial_to_segment_idx (821 x 8 B), not 821 x
    768 fp32 partial sums."""
    from cachealloc import predict
    want = json.loads((DATA / "bert_token_type_embedding_H200.json").read_text())
    gpu = predict.resolve_gpu("H200-141GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:token_type_embedding", gpu, size=16, steps=1,
                         workdir=tmp_path)
    ev = _events(rec.trace)
    start = next(i for i, e in enumerate(ev) if e["action"] == "alloc" and e["size"] == 16 * 512 * 8)
    assert request_stream(ev, start)[:3] == [tuple(r) for r in want["forward"]]
    assert request_stream(ev, start + 3)[:len(want["backward"])] == [tuple(r) for r in want["backward"]]


def test_library_value_checks_answered_as_on_a_gpu(tmp_path, monkeypatch):
    """A library asking "is this a FakeTensor?" (transformers' is_tracing) is
    told no, as on the GPU, where the tensors are plain, when the value is
    known: torch.ones_like is all ones (the mask is skipped), zeros_like is
    not. A tensor written into (padded[:, 6:] = 0) is no longer known: still
    "traced", so the library takes its data-independent path (mask built)
    and no placeholder is read. The stand-in module below has transformers
    5's rule; transformers itself is not a CI dependency."""
    from cachealloc import predict
    pkg = tmp_path / "lib" / "transformers" / "utils"
    pkg.mkdir(parents=True)
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "import_utils.py").write_text(
        "import torch\n\n\ndef is_fake_tensor(x):\n"
        "    return isinstance(x, torch._subclasses.FakeTensor)\n\n\n"
        "def is_tracing(tensor=None):\n    return tensor is not None and is_fake_tensor(tensor)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path / "lib")] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    gpu = predict.resolve_gpu("H200-141GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:value_checks", gpu, size=4, steps=1,
                         workdir=tmp_path)
    markers = [e["size"] for e in _events(rec.trace) if e["action"] == "alloc" and e["size"] > 500]
    assert markers == [1000, 2001, 3001]
    assert rec.summary["item_placeholders"] == 0


def test_cub_storage_sizes():
    """CUB's temp_storage_bytes as the H200 recording shows them for 4,096
    int64 keys (SortPairs with 8-byte values, UniqueByKey, ExclusiveSum),
    and the rules they follow: one byte for a single-tile sort, more
    look-back rows for more thread blocks."""
    from cachealloc.predict.kernels import cub_storage
    assert cub_storage.radix_sort_pairs_bytes(4096, 8, 8, (9, 0)) == 83455
    assert cub_storage.unique_by_key_bytes(4096, 8) == 1279
    assert cub_storage.exclusive_sum_bytes(4096, 8) == 1279
    assert cub_storage.radix_sort_pairs_bytes(2000, 8, 8, (9, 0)) == 1
    # 8 passes x 256 bins x 8 B, 3 blocks x 256 x 4 B, keys, values, counters.
    n = 10000
    assert cub_storage.radix_sort_pairs_bytes(n, 8, 8, (9, 0)) == (
        16384 + 3072 + 80128 + 80128 + 256 + 255)


def test_silu_backward_is_the_fused_kernel(tmp_path):
    """A GPU backward runs silu_backward (one request: grad_input); the fake
    run on a CPU build of torch took its composite formula (five
    more temporaries). Per step: x * 2, silu, then in the backward
    silu_backward's output and MulBackward's x.grad: four requests of the
    activation's size."""
    from cachealloc import predict
    gpu = predict.resolve_gpu("H200-141GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:silu_backward", gpu, size=64, steps=2,
                         workdir=tmp_path)
    sizes = [e["size"] for e in _events(rec.trace) if e["action"] == "alloc"]
    assert sizes.count(64 * 1024 * 4) == 2 + 4 * 2


def test_inplace_silu_backward_is_the_fused_kernel(tmp_path):
    """EfficientNet's in-place SiLU: x * 2, autograd's clone of it, silu_
    (in place: no request), then silu_backward's output and x.grad: four
    requests of the activation's size per step. A CPU build of torch used to
    run silu_backward's composite formula here (five more temporaries):
    timm's EfficientNet-B2 predicted +63 % on torch 2.13's CPU build."""
    from cachealloc import predict
    gpu = predict.resolve_gpu("H200-141GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:silu_inplace_backward", gpu, size=64, steps=2,
                         workdir=tmp_path)
    sizes = [e["size"] for e in _events(rec.trace) if e["action"] == "alloc"]
    assert sizes.count(64 * 1024 * 4) == 2 + 4 * 2


def test_cpu_build_gets_the_cuda_builds_dispatch():
    """backend_kernels: on a CPU build, the composite ops with backend
    kernels get a CUDA entry while installed, and lose it when removed."""
    import torch
    from cachealloc.predict.device import backend_kernels
    if torch.backends.cuda.is_built():
        pytest.skip("a CUDA build has the CUDA kernels itself")
    ops = backend_kernels.composite_ops_with_backend_kernels()
    assert "aten::silu_backward" in ops
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    d = backend_kernels.CudaBuildDispatch()
    d.install()
    try:
        assert "aten::silu_backward" in d.ops
        assert "aten::native_channel_shuffle" not in d.ops   # no CUDA kernel on a CUDA build
        assert all(has(op, "CUDA") for op in d.ops)
    finally:
        d.remove()
    assert not has("aten::silu_backward", "CUDA")


def test_host_copies_and_a_sliced_convolution_match_gpu_recording(tmp_path):
    """Copies between the host and the GPU that are not one run go through a
    contiguous GPU temporary (kernels/cuda_copy.py: a channels_last weight
    moved from contiguous host memory, a non-blocking copy converted on the
    GPU, a channel slice copied to the host), a dense transposed host tensor
    is one memcpy, and cuDNN convolves a copy of a channel slice of a
    channels_last input (kernels/conv_input.py). The H100's requests of the
    same builder (torch 2.11, benchmarks/predict/record_step_gpu.py,
    host_copies_H100.pickle.gz), request for request; the fake run then
    drops the step's tensors (its closing frees)."""
    from cachealloc import predict
    want = request_stream(load_device_trace(DATA / "host_copies_H100.pickle.gz"))
    gpu = predict.resolve_gpu("H100-80GB")
    rec = predict.record(f"{STEPS / 'steps.py'}:host_copies", gpu, size=1, steps=1,
                         no_optimizer_step=True, workdir=tmp_path)
    got = request_stream(load_device_trace(rec.trace))
    assert got[:len(want)] == want
    assert all(kind == "free" for kind, _ in got[len(want):])
    # 15 requests, six of them the rules' temporaries (each freed at once):
    # the two channels_last twins, the fp32 twin, the slice's copy to the
    # host, the conv weight's twin and the convolution's input copy.
    allocs = [size for kind, size in want if kind == "alloc"]
    assert len(allocs) == 15
    assert allocs.count(921600) == 2 and 4000000 in allocs and allocs.count(18432) == 2
