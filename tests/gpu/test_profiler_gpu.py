"""cachealloc.profiler on a real GPU: one transformer training step (the
model of benchmarks/workloads.py: 6 encoder layers, d_model 512, batch 32,
sequence 256) profiled per layer under cachealloc. The per-layer peaks must
be consistent with the step's: no layer's peak above the step's, forward's
peak the highest of its own and its layers', and the step's peak equal to
max_memory_allocated() after a peak reset at the step's start.

Each mode runs in a fresh process (cachealloc must be installed before CUDA
starts): this file is also the script that process runs.

    python tests/gpu/test_profiler_gpu.py [--plain]   # prints the table and a JSON line
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve()
ROOT = HERE.parents[2]
LAYERS = 6


def profile_one_step(plain: bool) -> dict:
    sys.path.insert(0, str(ROOT / "bindings" / "python"))
    import torch

    import cachealloc
    from cachealloc.profiler import MemoryProfiler

    cachealloc.install(torch_glue=not plain)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=LAYERS).to("cuda")
    head = torch.nn.Linear(512, 1000).to("cuda")
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    x = torch.randn(32, 256, 512, device="cuda")
    y = torch.randint(0, 1000, (32, 256), device="cuda")
    prof = MemoryProfiler("cuda:0", track_tensors=True)

    for i, block in enumerate(model.layers):  # each layer's forward is a scope
        def forward(*args, _orig=block.forward, _name=f"layer{i}", **kwargs):
            with prof.profile_context(_name):
                return _orig(*args, **kwargs)
        block.forward = forward

    def step():
        opt.zero_grad(set_to_none=True)
        with prof.profile_context("forward"):
            out = head(model(x))
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, 1000), y.reshape(-1))
        with prof.profile_context("backward"):
            loss.backward()
        with prof.profile_context("optimizer"):
            opt.step()
        return loss.item()

    step()  # warm-up: the optimizer's state is allocated here
    torch.cuda.synchronize()
    prof.clear_results()
    cachealloc.reset_peak_memory_stats(0)
    with prof.profile_context("step"):
        step()
    global_peak = cachealloc.max_memory_allocated(0)
    torch_peak = torch.cuda.max_memory_allocated(0) if cachealloc.mode() == "torch-extension" else None
    print(prof.format_results())
    fields = ("name", "depth", "peak_allocated", "peak_above_start", "self_peak_allocated",
              "bytes_allocated", "bytes_freed", "net_change", "allocations", "frees", "exact")
    return {"mode": cachealloc.mode(), "max_memory_allocated": global_peak,
            "torch_max_memory_allocated": torch_peak,
            "results": [{f: getattr(r, f) for f in fields} for r in prof.results]}


def run_mode(plain: bool) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(HERE)] + (["--plain"] if plain else []),
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(proc.stdout)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("plain", [False, True], ids=["glue", "plain"])
def test_layer_peaks_are_consistent_with_the_step_peak(plain):
    # The glue mode's run installs the glue, compiling it for the running
    # torch when no prebuilt one fits (torch_glue.py).
    out = run_mode(plain)
    # The mode this case claims: glue never quietly falls back to plain.
    assert out["mode"] == ("plain" if plain else "torch-extension"), out["mode"]
    by_name = {r["name"]: r for r in out["results"]}
    assert all(r["exact"] for r in out["results"])
    layers = [by_name[f"layer{i}"] for i in range(LAYERS)]
    step, forward = by_name["step"], by_name["forward"]
    assert step["depth"] == 0 and forward["depth"] == 1
    assert all(r["depth"] == 2 for r in layers)  # step > forward > layer
    # The step's exact peak is what PyTorch's own counter says after a reset.
    assert step["peak_allocated"] == out["max_memory_allocated"]
    for r in layers:
        assert 0 < r["peak_above_start"] and r["peak_allocated"] <= step["peak_allocated"]
        assert r["allocations"] > 0
    assert max(r["peak_allocated"] for r in layers) <= forward["peak_allocated"]
    assert forward["peak_allocated"] == max(
        [forward["self_peak_allocated"]] + [r["peak_allocated"] for r in layers])
    assert step["peak_allocated"] == max([step["self_peak_allocated"]] + [
        by_name[n]["peak_allocated"] for n in ("forward", "backward", "optimizer")])
    if out["mode"] == "torch-extension":  # PyTorch's own counter agrees
        assert out["torch_max_memory_allocated"] == out["max_memory_allocated"]
    # Activations saved for backward: each layer leaves memory behind.
    assert all(r["net_change"] > 0 for r in layers)


if __name__ == "__main__":
    print(json.dumps(profile_one_step(plain="--plain" in sys.argv)))
