"""Runs one workload in this (fresh) process under one allocator and prints
a JSON object: losses, memory_stats, snapshot segment sizes. Used by the GPU
tests and benchmarks to compare native and cachealloc run for run.

    python tests/gpu/run_workload.py ALLOCATOR WORKLOAD [--conf C] [--backend B]
"""
import argparse
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "bindings" / "python"))

# Deterministic kernels, so two processes compute bit-identical losses.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("allocator", choices=["native", "cachealloc"])
    p.add_argument("workload")
    p.add_argument("--conf", default="")
    p.add_argument("--backend", default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--plain", action="store_true", help="plain C entry points, no PyTorch glue")
    p.add_argument("--sequence-out", default=None,
                   help="record history (no frames) and write device 0's allocator calls here, "
                        "one 'action size address' line each")
    p.add_argument("--dump-snapshot", default=None,
                   help="record history (no frames) and dump the snapshot pickle here (a trace "
                        "that `cachealloc replay` reads)")
    args = p.parse_args()
    if args.conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.conf
    import torch

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)
    from workloads import WORKLOADS

    if args.allocator == "cachealloc":
        import cachealloc as mem

        mem.install(conf=args.conf, backend=args.backend, torch_glue=not args.plain)
        # What this run claims to test: the glue unless --plain (no quiet
        # fallback to plain mode), on the backend asked for.
        want_mode = "plain" if args.plain else "torch-extension"
        assert mem.mode() == want_mode, (mem.mode(), want_mode)
        want_backend = args.backend or ("async" if "cudaMallocAsync" in (args.conf or "")
                                        else "cuda")
        assert mem.backend() == want_backend, (mem.backend(), want_backend)
        if mem.mode() == "torch-extension":  # PyTorch's own API, unchanged
            stats, snap = torch.cuda.memory_stats, torch.cuda.memory._snapshot
        else:
            stats, snap = mem.memory_stats, mem.snapshot
    else:
        stats, snap = torch.cuda.memory_stats, torch.cuda.memory._snapshot
    record = bool(args.sequence_out or args.dump_snapshot)
    if record:
        if snap is torch.cuda.memory._snapshot:
            torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
        else:
            mem.record_memory_history(enabled="all", context=None)
    kwargs = {} if args.steps is None else {"steps": args.steps}
    losses = WORKLOADS[args.workload]("cuda", **kwargs)
    torch.cuda.synchronize()
    s = snap()
    if args.dump_snapshot:
        if snap is torch.cuda.memory._snapshot:
            torch.cuda.memory._dump_snapshot(args.dump_snapshot)
        else:
            mem.dump_snapshot(args.dump_snapshot)
    if args.sequence_out:
        with open(args.sequence_out, "w") as f:
            for e in s["device_traces"][0]:
                f.write(f"{e['action']} {e['size']} {e['addr']}\n")
    print(json.dumps({
        "losses": losses,
        "memory_stats": dict(stats(0)),
        "segment_sizes": sorted(seg["total_size"] for seg in s["segments"]),
        "segment_addresses": sorted(seg["address"] for seg in s["segments"]),
        "mode": mem.mode() if args.allocator == "cachealloc" else "native",
    }))


if __name__ == "__main__":
    main()
