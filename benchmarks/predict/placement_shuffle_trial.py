#!/usr/bin/env python3
"""How far the order of segment addresses moves classic's predicted peaks,
beside the GPU's figure (issue 46: the band's placement spread).

The replay places each segment top down (search.PLACEMENT) and widens the
band toward first fit's figure (search.ALT_PLACEMENT). Neither is the CUDA
driver's rule, which is not known (docs/prediction.md, "Segment placement";
benchmarks/predict/segment_order_trial.py found none that reproduces the
H100's addresses). This records each zoo row of a truth once on the fake
device and replays classic under top down, first fit and K seeded random
orders (lab placement "shuffled:SEED"), printing each figure beside the
GPU's peak reserved: whether the GPU's figure lies inside the range the
orders span, and how wide that range is where the GPU agreed with top down.

    PYTHONPATH=bindings/python python3 benchmarks/predict/placement_shuffle_trial.py \\
        --truth tests/data/predict/zoo_truth.json --half validation --seeds 16 \\
        --out OUT.json [--setups a,b] [--jobs 2] [--min-memory]

CACHEALLOC_CUDNN_TABLE applies as in any prediction (a probed run)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
BUILDER = os.path.join(ROOT, "benchmarks", "zoo", "setups.py")
MiB = 1 << 20


def row(args) -> dict:
    """One (setup, batch): the recording's classic peaks (and minimum
    memory, with `min_memory`) under each placement, MiB."""
    truth_path, setup, batch, seeds, min_memory = args
    from cachealloc import lab, predict
    sys.path.insert(0, HERE)
    from predict_all import truth_gpu
    truth = json.load(open(truth_path))
    gpu = truth_gpu(truth)
    rec = predict.record(f"{BUILDER}:{setup}", gpu, steps=truth["steps"], size=batch)
    placements = ["top-down", "first-fit"] + [f"shuffled:{s}" for s in range(1, seeds + 1)]
    out = {"setup": setup, "batch": batch, "reserved": {}, "allocated": {}, "min_memory": {}}
    for p in placements:
        r = lab.compare(rec.trace, [""], placement=p)[0]
        out["reserved"][p] = r["peak_reserved"] / MiB
        out["allocated"][p] = r["peak_allocated"] / MiB
        if min_memory:
            out["min_memory"][p] = lab.min_memory(rec.trace, [""], placement=p)[""] / MiB
    g = truth["setups"][setup]["peaks"]["classic"].get(str(batch)) or {}
    out["gpu_reserved"] = (g.get("max_memory_reserved") or 0) / MiB or None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--half", default="validation")
    ap.add_argument("--setups")
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--min-memory", action="store_true")
    a = ap.parse_args()
    truth = json.load(open(a.truth))
    names = a.setups.split(",") if a.setups else [
        n for n, s in truth["setups"].items() if a.half == "all" or s.get("half") == a.half]
    tasks = [(a.truth, n, int(b), a.seeds, a.min_memory) for n in names
             for b in sorted(truth["setups"][n]["peaks"]["classic"], key=int)]
    with ProcessPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(row, tasks))
    json.dump({"truth": a.truth, "seeds": a.seeds, "rows": rows}, open(a.out, "w"), indent=1)
    print("| setup | batch | GPU reserved | top-down | first-fit | shuffled min-max | GPU inside |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        v = r["reserved"]
        sh = [x for p, x in v.items() if p.startswith("shuffled")]
        lo, hi = min(v.values()), max(v.values())
        g = r["gpu_reserved"]
        inside = "-" if g is None else ("yes" if lo <= g <= hi else "NO")
        print(f"| {r['setup']} | {r['batch']} | {g or '-'} | {v['top-down']:.0f} | {v['first-fit']:.0f} "
              f"| {min(sh):.0f}-{max(sh):.0f} | {inside} |")


if __name__ == "__main__":
    main()
