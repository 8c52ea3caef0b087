"""Predicts, on a CPU, what record_truth.py measured on the GPU: for each
workload, the peaks at the truth's base batches (both native policies) and
the largest batch at the truth's memory fraction, with cachealloc.predict
(fake CUDA device + cachealloc's engine). The target GPU is the one in the
truth file (its measured total memory), so the two compare like for like.

    PYTHONPATH=bindings/python CACHEALLOC_CLI=build/tools/cachealloc \\
      python benchmarks/predict/predict_all.py \\
        --truth benchmarks/results/predict_truth_H200.json --out predictions.json

On the GPU machine run it with CUDA_VISIBLE_DEVICES= (no GPU visible), so
the prediction uses the same torch as the truth. compare.py makes the table.
Both, writing to $OUT: `bash scripts/gpu_session.sh predict` (with .carry
from scripts/carry_build.sh, for the cachealloc tool)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))


def truth_gpu(truth: dict):
    """The measured card as the predictor's target: its name and total
    memory as CUDA reported them, the rest from the known GPU of that size."""
    from cachealloc import predict
    base = predict.resolve_gpu(memory=truth["device_total_memory"])
    return predict.Gpu(truth["device"], truth["device_total_memory"], base.capability,
                       base.multi_processor_count, base.context_bytes, truth["device"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workloads", help="comma-separated (default: all in the truth file)")
    ap.add_argument("--jobs", type=int, default=8, help="predictions run at once")
    ap.add_argument("--no-largest", dest="largest", action="store_false")
    args = ap.parse_args()

    import torch
    from cachealloc import predict

    truth = json.load(open(args.truth))
    names = args.workloads.split(",") if args.workloads else list(truth["workloads"])
    gpu = truth_gpu(truth)
    builder = os.path.join(HERE, "workloads.py")
    sys.path.insert(0, HERE)
    import workloads
    steps = truth["steps"]
    t0 = time.time()

    def guarded(fn, *a, **k):
        try:
            return fn(*a, **k)
        except Exception as e:  # one workload's failure is reported, not fatal
            return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}

    jobs = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for w in names:
            # A builder, or an unmodified script with the size as its --batch-size.
            target, how = f"{builder}:{w}", {}
            if w in workloads.SCRIPTS:
                script, script_args, batch_arg = workloads.SCRIPTS[w]
                target = [sys.executable, workloads.script_path(w)] + list(script_args)
                how = {"batch_arg": batch_arg}
            for b in truth["base_batches"]:
                jobs[(w, "fits", b)] = ex.submit(guarded, predict.fits, target, gpu, size=b,
                                                 steps=steps, advise=False, **how)
            R = truth["workloads"][w]
            if args.largest and "fraction" in R:
                jobs[(w, "largest", None)] = ex.submit(
                    guarded, predict.largest, target, gpu, memory_fraction=R["fraction"],
                    steps=steps, start=8, **how)
        out = {"torch": torch.__version__, "host": platform.node(), "gpu": gpu.name,
               "total_memory": gpu.total_memory, "truth": os.path.basename(args.truth),
               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
               "workloads": {}}
        for (w, kind, b), f in jobs.items():
            W = out["workloads"].setdefault(w, {"fits": {}})
            r = f.result()
            if kind == "fits":
                W["fits"][str(b)] = r
            else:
                W["largest"] = r
            print(f"{w} {kind} {b or ''}: "
                  f"{r.get('error') or r.get('largest') or {k: v['peak_allocated'] for k, v in r['configs'].items()}}",
                  flush=True)
    out["seconds"] = round(time.time() - t0, 1)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, default=str)
    print("wrote", args.out, f"in {out['seconds']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
