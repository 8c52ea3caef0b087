"""Runs scenarios under expandable_segments:True in this (fresh) process,
under one allocator, and prints one JSON object: per scenario, its losses,
all memory_stats, the segments' shapes (block offsets from each segment's
base), the history's (action, size) sequence, and whether the snapshot
renders in torch.cuda._memory_viz.

    python tests/gpu/expandable_script.py native|cachealloc SCENARIO...

Scenarios run one after another; between two, every tensor is gone, the
cache is emptied and the statistics and history are reset, in both
processes alike, so each scenario's numbers are its own. Scenarios:
resnet18, transformer, decoder (batch and length vary), fuzz (three
streams, record_stream, empty_cache; settled, so that GPU timing decides
nothing), oom_fraction (OOMs under a memory
fraction), empty_cache (unmapping on empty_cache and growing back).
"""
import collections
import inspect
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "bindings" / "python"))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
CONF = os.environ.get("CACHEALLOC_EXPANDABLE_CONF", "expandable_segments:True")
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = CONF


def oom_fraction():
    """Fills a 5 % memory fraction with 96 MiB tensors until an OOM, twice
    (the second after freeing half), then trains a small model in what is
    left; returns [OOMs caught, tensors held at the first OOM]."""
    import torch

    from workloads import mlp

    torch.cuda.set_per_process_memory_fraction(0.05, 0)
    held, ooms, first = [], 0, 0
    try:
        for _ in range(2):
            try:
                while True:
                    held.append(torch.empty(96 << 20, dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError:
                ooms += 1
                first = first or len(held)
                del held[::2]
        losses = mlp("cuda", steps=3, batch=64)
    finally:
        held.clear()
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
    return [float(ooms), float(first)] + losses


def empty_cache():
    """Grows both pools, frees all but a few blocks spread over the segments,
    empties the cache (free pages are unmapped), grows again and empties
    once more with nothing live; returns reserved bytes after each step."""
    import torch

    sizes = [(i % 7 + 1) * (3 << 20) + 4096 * i for i in range(40)] + [1000 * (i + 1) for i in range(200)]
    live = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in sizes]
    reserved = [torch.cuda.memory_reserved(0)]
    keep = live[::9]
    live.clear()
    torch.cuda.empty_cache()
    reserved.append(torch.cuda.memory_reserved(0))
    live = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in reversed(sizes)]
    reserved.append(torch.cuda.memory_reserved(0))
    live.clear()
    keep.clear()
    torch.cuda.empty_cache()
    reserved.append(torch.cuda.memory_reserved(0))
    return [float(r) for r in reserved]


def scenario(name):
    from workloads import WORKLOADS

    if name == "oom_fraction":
        return oom_fraction
    if name == "empty_cache":
        return empty_cache
    if name == "fuzz":  # settled: no decision depends on GPU timing
        return lambda: WORKLOADS["fuzz"]("cuda", steps=1500, settle=True)
    steps = {"resnet18": 5, "transformer": 5, "decoder": 12}[name]
    return lambda: WORKLOADS[name]("cuda", steps=steps)


def segment_shapes(snapshot):
    """Segments by shape: type, expandable flag, size and each block's
    (offset from the segment's base, size, state); sorted, so the order in
    which two processes list them does not matter."""
    out = []
    for s in snapshot["segments"]:
        blocks, offset = [], 0
        for b in s["blocks"]:
            blocks.append([offset, b["size"], b["state"]])
            offset += b["size"]
        out.append([s["segment_type"], bool(s.get("is_expandable")), s["total_size"], blocks])
    return sorted(out)


def renders(snapshot):
    """Each of _memory_viz's views on the snapshot: its output's length, or
    the error it raised (flame graphs as folded text: no download)."""
    from torch.cuda import _memory_viz

    folded = lambda text: text
    views = {"segments": lambda s: _memory_viz.segments(s, format_flamegraph=folded),
             "memory": lambda s: _memory_viz.memory(s, format_flamegraph=folded),
             "trace_plot": _memory_viz.trace_plot, "segment_plot": _memory_viz.segment_plot}
    out = {}
    for name, view in views.items():
        try:
            out[name] = len(view(snapshot))
        except Exception as e:  # reported, and the test fails on it
            out[name] = f"{type(e).__name__}: {e}"
    return out


def start_history(torch):
    kwargs = {"max_entries": 1_000_000, "context": "all", "stacks": "python"}
    if "clear_history" in inspect.signature(torch.cuda.memory._record_memory_history).parameters:
        kwargs["clear_history"] = True
    torch.cuda.memory._record_memory_history("all", **kwargs)


def main():
    allocator, names = sys.argv[1], sys.argv[2:]
    import torch

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)
    if allocator == "cachealloc":
        import cachealloc

        cachealloc.install()  # conf from PYTORCH_CUDA_ALLOC_CONF
        assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    # Native raises "Invalid device argument" from reset_peak_memory_stats
    # until its allocator has served a first request; one tiny tensor, in
    # both runs alike, gets both allocators there.
    del_me = torch.zeros(1, device="cuda")
    del del_me
    results = {}
    for name in names:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(0)
        torch.cuda.reset_accumulated_memory_stats(0)
        start_history(torch)
        losses = scenario(name)()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        trace = snap["device_traces"][0]
        results[name] = {
            "losses": losses,
            "memory_stats": dict(torch.cuda.memory_stats(0)),
            "shapes": segment_shapes(snap),
            "expandable_setting": snap.get("allocator_settings", {}).get("expandable_segments"),
            "actions": [[e["action"], e["size"]] for e in trace],
            "action_counts": dict(collections.Counter(e["action"] for e in trace)),
            "renders": renders(snap),
        }
        torch.cuda.memory._record_memory_history(None)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
