"""Usage (any CPU, from the repo root):
    python benchmarks/predict/cudnn_from_history.py OUT.json \
        --history resnet50:4:benchmarks/results/predict_history_H200/resnet50_classic_b4.pickle.gz \
        --history vit:4:benchmarks/results/predict_history_H200/vit_classic_b4.pickle.gz \
        [--gpu H200-141GB] [--torch 2.11.0+cu130] [--steps 3]

A cuDNN workspace table (cudnn_workspace.py's format, the probe's) read off
recorded GPU histories instead of measured by cudnn_probe.py: each workload
is run on the fake device with no table, its request stream is walked beside
the GPU's (cudnn_history.py), and the workspaces the GPU added inside each
convolution become that convolution key's entry. The histories must come
from benchmarks/predict/record_truth.py (history from before the model is
built, the same workload, batch and steps). The GPU's torch and cuDNN
versions are not in a history: --torch says which torch recorded it; cuDNN
is left unrecorded.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PREDICT = ROOT / "bindings" / "python" / "cachealloc" / "predict"


def _load_guard():
    """The fake CUDA guard, loaded before torch, as the predictor's worker
    loads it (worker.py, run by path: it imports nothing of the package)."""
    spec = importlib.util.spec_from_file_location("_cachealloc_predict_worker", PREDICT / "worker.py")
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    return worker._load_guard()


def derive(workload: str, batch: int, history: str, gpu, steps: int) -> tuple:
    """(entries, GPU requests matched, GPU requests, workspaces found) for one history."""
    import workloads
    from cachealloc.predict.kernels import cudnn_history
    from cachealloc.predict.device.fake_device import FakeCudaDevice
    from cachealloc.report.rank_peak import load_snapshot
    dev = FakeCudaDevice(gpu)
    with dev:
        step = workloads.WORKLOADS[workload](batch)
        for _ in range(steps):
            step()
        del step
    rec = dev.recording
    gpu_reqs = cudnn_history.gpu_requests(load_snapshot(history)["device_traces"][0])
    found, matched = cudnn_history.workspaces_by_call(gpu_reqs, rec.events, rec.conv_calls)
    return (cudnn_history.entries(rec.conv_calls, found), matched, len(gpu_reqs),
            sum(len(v) for v in found.values()))


def main() -> int:
    ap = argparse.ArgumentParser(description="cuDNN workspace table from recorded GPU histories")
    ap.add_argument("out")
    ap.add_argument("--history", action="append", required=True, help="WORKLOAD:BATCH:PATH")
    ap.add_argument("--gpu", default="H200-141GB")
    ap.add_argument("--torch", default="2.11.0+cu130", help="the torch that recorded the histories")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    os.environ["CACHEALLOC_CUDNN_TABLE"] = "none"     # the fake run must add no workspace
    guard = _load_guard()
    sys.path[:0] = [str(ROOT / "bindings" / "python"), str(HERE)]
    import torch  # noqa: F401  (after the guard)
    guard.after_torch_import()
    from cachealloc.predict import gpus
    from cachealloc.predict.kernels import cudnn_workspace
    gpu = gpus.resolve(args.gpu)
    table = {"format": cudnn_workspace.FORMAT,
             "gpu": {"name": gpu.product, "capability": list(gpu.capability),
                     "sms": gpu.multi_processor_count, "total_memory": gpu.total_memory},
             "torch": args.torch, "cudnn": None,
             "source": "benchmarks/predict/cudnn_from_history.py " + " ".join(
                 f"--history {h.split(':')[0]}:{h.split(':')[1]}:{os.path.basename(h.split(':', 2)[2])}"
                 for h in args.history),
             "workloads": {}, "entries": {}}
    for spec in args.history:
        workload, batch, path = spec.split(":", 2)
        entries, matched, total, n = derive(workload, int(batch), path, gpu, args.steps)
        table["entries"].update(entries)
        table["workloads"].setdefault(workload, []).append(int(batch))
        print(f"{workload} batch {batch}: {total} GPU requests walked, {n} workspaces in "
              f"{sum(1 for e in entries.values() if e['workspaces'] or e.get('first'))} of "
              f"{len(entries)} convolution keys", flush=True)
    with open(args.out, "w") as f:
        f.write(cudnn_workspace.dumps_table(table))
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
