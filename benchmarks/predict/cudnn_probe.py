"""Usage (on the GPU, from the repo root):
    python benchmarks/predict/cudnn_probe.py OUT.json [--workloads resnet50,vit] [--batches 1-16]
        [--dtypes float32] [--steps 2] [--benchmark] [--deterministic] [--no-tf32]

Records, on a real GPU, the cuDNN workspace requests of every convolution
forward and backward call of the given workloads (benchmarks/predict/
workloads.py) over a batch range, as the table the predictor reads
(cachealloc/predict/kernels/cudnn_workspace.py; key: cachealloc/predict/kernels/cudnn_key.py).

Method (exact, no timing or guessing): the caching allocator's own history
(torch.cuda.memory._record_memory_history, no stacks) records every alloc
and free; a TorchDispatchMode reads the allocator's cumulative allocation
and free counters before and after each aten.convolution /
aten.convolution_backward call, which slices the history into the requests
made inside that call. Inside a call, an allocation whose own free is the
very next request is a workspace (cuDNN's Conv_v8 allocates the plan's
workspace, runs it and drops it); every other allocation is the op's own
(output, grad_input, grad_weight, the grad_output copy, ...). A workspace's
position is the number of the op's own allocations made before it.

The table (JSON):
  {"format": "cachealloc-cudnn-workspaces/1", "gpu": {name, capability, sms,
   total_memory}, "torch", "cuda", "cudnn", "source", "entries": {KEY: {
   "workspaces": [[position, bytes], ...]   (steady state: calls after the first)
   "first": [[position, bytes], ...]        (only when the first call differed)
   "own": N                                 (the op's own allocations, workspaces aside)
   "calls": N, "unstable": true             (only when later calls disagreed)}}}
The file is rewritten after each (workload, dtype, batch), so a run cut short
keeps what it measured. Runs in ~1 min for resnet50,vit over 1-16 on an H200.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _load_kernel_module(name: str):
    """A module of cachealloc/predict/kernels by path: the cachealloc
    package (and its native library) need not be built on the GPU machine."""
    path = os.path.join(ROOT, "bindings", "python", "cachealloc", "predict", "kernels", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cudnn_key = _load_kernel_module("cudnn_key")
key_probe = _load_kernel_module("key_probe")   # the workspace classifier and the table's header


def _counters():
    """Cumulative (allocations, frees) of device 0's caching allocator."""
    s = torch._C._cuda_memoryStats(0)["allocation"]["all"]
    return int(s["allocated"]), int(s["freed"])


class ConvSlicer(TorchDispatchMode):
    """Notes (key, counters before, counters after, grad_bias bytes) for each
    convolution call."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        key = cudnn_key.conv_key(func, args, kwargs)
        if key is None:
            return func(*args, **kwargs)
        bias_bytes = 0
        if func in cudnn_key.BACKWARD_OPS:
            mask = args[10] if len(args) > 10 else kwargs["output_mask"]
            if mask[2]:                                       # grad_bias wanted
                bias_bytes = args[0].element_size()
                for n in (args[3] if len(args) > 3 else kwargs["bias_sizes"]):
                    bias_bytes *= int(n)
        before = _counters()
        out = func(*args, **kwargs)
        self.calls.append((key, before, _counters(), bias_bytes))
        return out


def _history_requests(trace, base):
    """The trace's allocs and frees as (kind, addr, size, alloc number or free
    number), numbered from the counters `base` had when recording began."""
    a, f = base
    out = []
    for e in trace:
        if e["action"] == "alloc":
            out.append(("a", e["addr"], e["size"], a))
            a += 1
        elif e["action"] == "free_requested":
            out.append(("f", e["addr"], e["size"], f))
            f += 1
    return out, (a, f)


def _slice_call(reqs, index, before, after):
    """The requests made inside one call: allocs numbered [before.a, after.a)
    and frees numbered [before.f, after.f), in trace order. `index` maps
    ('a', n) / ('f', n) to positions in reqs."""
    positions = sorted([index[("a", n)] for n in range(before[0], after[0])]
                       + [index[("f", n)] for n in range(before[1], after[1])])
    return [reqs[p] for p in positions]


def _zoo_step(name: str, batch: int):
    """A zoo setup's step (benchmarks/zoo/setups.py) at `batch`, with
    cudnn.benchmark off whatever its regime says: the table holds the
    heuristics' plans (benchmark mode's workspaces depend on free memory)."""
    sys.path.insert(0, os.path.dirname(HERE))
    from zoo import setups
    step = setups.WORKLOADS[name](batch, device="cuda")
    torch.backends.cudnn.benchmark = False
    return step


def probe(workload: str, batch: int, dtype, steps: int, entries: dict, zoo: bool = False) -> int:
    sys.path.insert(0, HERE)
    if zoo:
        step = _zoo_step(workload, batch)
    else:
        import workloads
        step = workloads.WORKLOADS[workload](batch, device="cuda", dtype=dtype)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", stacks="python",
                                             max_entries=2_000_000, clear_history=True)
    base = _counters()
    slicer = ConvSlicer()
    with slicer:
        for _ in range(steps):
            step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap["device_traces"][0]
    reqs, end = _history_requests(trace, base)
    if end != _counters():
        raise RuntimeError(f"history holds {end} requests, the counters say {_counters()}: "
                           "the trace buffer wrapped or missed requests")
    index = {(r[0], r[3]): i for i, r in enumerate(reqs)}
    seen = {}
    for key, before, after, bias_bytes in slicer.calls:
        seen.setdefault(key, []).append(
            key_probe.classify(_slice_call(reqs, index, before, after), bias_bytes)[:2])
    for key, results in seen.items():
        e = entries.setdefault(key, {"calls": 0})
        steady = results[1:] or results
        e["workspaces"] = steady[-1][0]
        e["own"] = len(steady[-1][1])
        if results[0][0] != steady[-1][0]:
            e["first"] = results[0][0]
        if any(r[0] != steady[-1][0] for r in steady):
            e["unstable"] = True
        e["calls"] += len(results)
    del step
    return len(slicer.calls)


def compare_bundled(table: dict) -> None:
    """Prints how the measured entries agree with the bundled tables of the
    same GPU (e.g. the one read off recorded histories)."""
    import glob
    for path in sorted(glob.glob(os.path.join(ROOT, "bindings", "python", "cachealloc", "predict",
                                              "kernels", "data", "cudnn_*.json"))):
        with open(path) as f:
            other = json.load(f)
        if other.get("gpu", {}).get("capability") != table["gpu"]["capability"]:
            continue
        common = set(other["entries"]) & set(table["entries"])
        same = [k for k in common
                if other["entries"][k]["workspaces"] == table["entries"][k]["workspaces"]]
        print(f"against {os.path.basename(path)}: {len(common)} keys in both, {len(same)} equal")
        for k in sorted(common - set(same))[:5]:
            print(f"  differs: {k}: {other['entries'][k]['workspaces']} there, "
                  f"{table['entries'][k]['workspaces']} here")


def _batches(text: str):
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="cuDNN workspace table for cachealloc predict")
    ap.add_argument("out")
    ap.add_argument("--workloads", default="resnet50,vit")
    ap.add_argument("--batches", default="1-16", help="e.g. 1-16 or 1,2,4,8")
    ap.add_argument("--dtypes", default="float32", help="e.g. float32,bfloat16")
    ap.add_argument("--steps", type=int, default=2, help="steps per batch (>= 2: first and steady)")
    ap.add_argument("--benchmark", action="store_true", help="torch.backends.cudnn.benchmark=True")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--no-tf32", action="store_true", help="torch.backends.cudnn.allow_tf32=False")
    ap.add_argument("--zoo", action="store_true",
                    help="--workloads names zoo setups (benchmarks/zoo/setups.py), each with its own "
                         "dtype and layout (--dtypes ignored), cudnn.benchmark forced off; "
                         "--batches may be NAME:BATCHES;NAME:BATCHES")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("cudnn_probe.py needs a CUDA GPU")
    torch.backends.cudnn.benchmark = args.benchmark
    torch.backends.cudnn.deterministic = args.deterministic
    torch.backends.cudnn.allow_tf32 = not args.no_tf32
    # The table's header is key_probe's (the same GPU, torch and cuDNN facts).
    table = key_probe.gpu_header(torch, "benchmarks/predict/cudnn_probe.py " + " ".join(sys.argv[1:]))
    table["workloads"] = {}
    t0 = time.time()
    # Per-workload batches ("NAME:1,2;NAME2:4-8"), or one range for all.
    per = dict(part.split(":", 1) for part in args.batches.split(";") if ":" in part)
    if per and set(args.workloads.split(",")) - set(per):
        sys.exit(f"--batches names no batches for {sorted(set(args.workloads.split(',')) - set(per))}")
    for w in args.workloads.split(","):
        for dt in (["zoo"] if args.zoo else args.dtypes.split(",")):
            dtype = None if args.zoo else getattr(torch, dt)
            for b in _batches(per[w] if per else args.batches):
                n = probe(w, b, dtype, args.steps, table["entries"], zoo=args.zoo)
                table["workloads"].setdefault(f"{w}/{dt}", []).append(b)
                torch.cuda.empty_cache()
                table["seconds"] = round(time.time() - t0, 1)
                tmp = args.out + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(table, f, indent=0, sort_keys=True)
                os.replace(tmp, args.out)
                print(f"{w} {dt} batch {b}: {n} conv calls, {len(table['entries'])} keys, "
                      f"{time.time() - t0:.1f} s", flush=True)
    ws = sum(1 for e in table["entries"].values() if e["workspaces"])
    print(f"wrote {args.out}: {len(table['entries'])} keys, {ws} with a workspace, "
          f"cuDNN {table['cudnn']}, {table['gpu']['name']}, torch {torch.__version__}")
    compare_bundled(table)


if __name__ == "__main__":
    main()
