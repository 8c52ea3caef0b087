"""Records a builder's requests on the real GPU, for a test to hold the fake
device's recording of the same builder against (tests/python/predict_steps/
steps.py builders, tests/data/predict/*_H100.pickle.gz).

    python3 benchmarks/predict/record_step_gpu.py FILE.py:FUNCTION SIZE OUT.pickle.gz [--steps N]

Memory history is on from before FUNCTION(size) builds the step (so what the
builder itself moves to the GPU is recorded) through N calls of the step
(default 1); the snapshot is written gzipped, with no Python frames kept
beyond torch's default. Needs a CUDA device and the native allocator."""
from __future__ import annotations

import argparse
import gzip
import importlib.util
import pickle
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("builder")
    ap.add_argument("size", type=int)
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=1)
    a = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        sys.exit("record_step_gpu.py: no CUDA device")
    path, func = a.builder.rsplit(":", 1)
    spec = importlib.util.spec_from_file_location("builder_module", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.cuda.init()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    step = getattr(mod, func)(a.size)
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with gzip.open(a.out, "wb") as f:
        pickle.dump(snap, f)
    print(f"wrote {a.out}: {sum(len(t) for t in snap['device_traces'])} events, "
          f"torch {torch.__version__}, {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
