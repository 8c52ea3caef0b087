"""Records a memory trace of a workload, under PyTorch's native allocator or
under cachealloc, in the format of ../shared/traces: a snapshot pickle
(torch.cuda.memory._dump_snapshot's format) and a .json beside it with the
config, memory fraction and final memory_stats. Needs a GPU.

    python examples/record_trace.py --workload transformer --allocator native --out /tmp/t
    python examples/record_trace.py --workload transformer --allocator cachealloc --out /tmp/t

Each run should be a fresh process (the allocator cannot be swapped once
CUDA memory exists). The result replays with `cachealloc replay`.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bindings" / "python"))


def main() -> int:
    from workloads import WORKLOADS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    p.add_argument("--allocator", choices=["native", "cachealloc"], default="native")
    p.add_argument("--steps", type=int, default=None, help="workload steps (default: the workload's)")
    p.add_argument("--seed", type=int, default=None,
                   help="the random and fuzz workloads' seed (default: the workload's)")
    p.add_argument("--conf", default="", help="PYTORCH_CUDA_ALLOC_CONF for the run")
    p.add_argument("--memory-fraction", type=float, default=None)
    p.add_argument("--out", required=True, help="output path without extension")
    args = p.parse_args()

    if args.conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.conf
    import torch

    if not torch.cuda.is_available():
        print("record_trace: no CUDA device", file=sys.stderr)
        return 2
    if args.allocator == "cachealloc":
        import cachealloc as mem

        mem.install(conf=args.conf)
        record = lambda: mem.record_memory_history(max_entries=10**7)
        snap, stats = mem.snapshot, mem.memory_stats
        set_fraction = mem.set_per_process_memory_fraction
    else:
        record = lambda: torch.cuda.memory._record_memory_history(max_entries=10**7)
        snap, stats = torch.cuda.memory._snapshot, torch.cuda.memory_stats
        set_fraction = torch.cuda.set_per_process_memory_fraction
    if args.memory_fraction is not None:
        torch.cuda.init()
        set_fraction(args.memory_fraction, 0)
    record()
    kwargs = {} if args.steps is None else {"steps": args.steps}
    if args.seed is not None:
        kwargs["seed"] = args.seed
    losses = WORKLOADS[args.workload]("cuda", **kwargs)
    torch.cuda.synchronize()
    s = snap()
    out = pathlib.Path(args.out)
    import pickle

    with gzip.open(str(out) + ".pickle.gz", "wb") as f:
        pickle.dump(s, f, protocol=4)
    meta = {
        "name": out.name, "workload": args.workload, "allocator": args.allocator,
        "conf": args.conf, "memory_fraction": args.memory_fraction, "seed": args.seed,
        "device": torch.cuda.get_device_name(0),
        "device_total_memory": torch.cuda.get_device_properties(0).total_memory,
        "torch": torch.__version__, "n_events": len(s["device_traces"][0]),
        "losses": losses, "final_memory_stats": dict(stats(0)),
    }
    pathlib.Path(str(out) + ".json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    print(f"wrote {out}.pickle.gz ({meta['n_events']} events) and {out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
