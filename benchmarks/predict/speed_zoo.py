"""Prediction speed on the zoo (issue 46's target: at most 10 s per size
and 60 s per largest-batch search on 2 cores), against a reference
predictor measured in the same run.

    PYTHONPATH=bindings/python python3 benchmarks/predict/speed_zoo.py \\
        [--setups llama_fp32_bf16ac_default,bert_base_mlm_fp32_sdpa,...] \\
        [--baseline GIT_REV] [--repeat 2] [--no-largest] [--out DIR]

Each figure is the wall-clock seconds of one `benchmarks/zoo/predict.py
task` child process, as a user waits for it: Python's start, the import of
cachealloc, the worker (its torch import, the model's build, the steps),
the replays. "size": --kind fits at the truth's batch (the recording and the
replays, as `cachealloc predict --size` less the advisor's search, which
takes 0.1-0.3 s); "largest": --kind largest at the truth's fraction.

--baseline REV: the predictor of git revision REV (its bindings/python and
benchmarks, unpacked with `git archive` into a temporary folder) runs the
same tasks, interleaved with this checkout's, and each line gives
new / baseline. The two must predict the same figures (peaks, largest
sizes): a line whose figures differ says so. Without --baseline the
reference is `python -c "import torch"` (a worker's fixed cost).
Machines shared with other work give noisy figures: take the medians of
--repeat runs and read the load average printed at the start and end.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRUTH = os.path.join(REPO, "tests", "data", "predict", "zoo_truth.json")
SETUPS = "llama_fp32_bf16ac_default,bert_base_mlm_fp32_sdpa,tv_convnext_tiny_fp32,timm_resnet50d_ckpt_bf16w_fused"


def unpack(rev: str) -> str:
    """REV's predictor in a temporary folder (bindings/python, benchmarks)."""
    out = tempfile.mkdtemp(prefix="cachealloc-speed-base-")
    archive = subprocess.run(["git", "-C", REPO, "archive", rev, "bindings/python", "benchmarks"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", out], input=archive, check=True)
    return out


def run(tree: str, setup: str, kind: str, batch: int, fraction, ahead: bool = False,
        mode: str = "cpu-init") -> dict:
    """One task of tree's benchmarks/zoo/predict.py: {"wall", "figures"} or {"error"}."""
    cmd = [sys.executable, os.path.join(tree, "benchmarks", "zoo", "predict.py"), "task",
           "--truth", TRUTH, "--setup", setup, "--kind", kind, "--batch", str(batch)]
    if mode != "cpu-init":      # (a baseline older than --mode knows the default only)
        cmd += ["--mode", mode]
    if fraction is not None:
        cmd += ["--fraction", repr(fraction)]
    env = dict(os.environ, PYTHONPATH=os.path.join(tree, "bindings", "python"),
               CACHEALLOC_PREDICT_AHEAD="1" if ahead else "0")
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    r = json.loads(lines[-1][7:])
    figures = {"configs": {c: {k: v[k] for k in ("peak_allocated", "peak_reserved")}
                           for c, v in (r.get("configs") or {}).items()},
               "largest": r.get("largest"), "largest_within_band": r.get("largest_within_band"),
               "largest_fitting": r.get("largest_fitting")}
    return {"wall": wall, "figures": figures}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setups", default=SETUPS)
    ap.add_argument("--baseline", help="git revision whose predictor is the reference")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-largest", dest="largest", action="store_false")
    ap.add_argument("--out", help="also write the figures to OUT/speed_zoo.json")
    ap.add_argument("--ahead", action="store_true",
                    help="this checkout's searches with a second worker recording ahead "
                         "(CACHEALLOC_PREDICT_AHEAD=1: on when a core is idle at the start)")
    ap.add_argument("--mode", choices=("cpu-init", "fake"), default="cpu-init",
                    help="the fake device's mode for every task (the issue's speed target "
                         "covers both); fake needs a --baseline that has predict.py --mode")
    args = ap.parse_args()
    truth = json.load(open(TRUTH))
    print(f"cores: {os.cpu_count()}; load average (1, 5, 15 min) at start: "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    trees = {"new": REPO}
    if args.baseline:
        trees["base"] = unpack(args.baseline)
    else:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        print(f"reference: python + import torch: {time.perf_counter() - t:.1f} s", flush=True)
    rows = []
    print(f"{'setup':40} {'kind':8} {'batch':>5} " + " ".join(f"{n + ' s':>8}" for n in trees)
          + ("   new/base  figures" if args.baseline else ""), flush=True)
    for setup in args.setups.split(","):
        R = truth["setups"][setup]
        tasks = [("size", "fits", R["batch"], None)]
        if args.largest and R.get("fraction"):
            tasks.append(("largest", "largest", R["batch"], R["fraction"]))
        for label, kind, batch, fraction in tasks:
            got = {n: [] for n in trees}
            for _ in range(args.repeat):
                for name, tree in trees.items():       # interleaved: load drifts hit both
                    got[name].append(run(tree, setup, kind, batch, fraction,
                                         args.ahead and name == "new", args.mode))
            errors = [r["error"] for rs in got.values() for r in rs if "error" in r]
            if errors:
                print(f"{setup:40} {label:8} {batch:5d} error: {errors[0]}", flush=True)
                continue
            med = {n: statistics.median(r["wall"] for r in rs) for n, rs in got.items()}
            figures = {json.dumps(r["figures"], sort_keys=True) for rs in got.values() for r in rs}
            row = {"setup": setup, "kind": label, "batch": batch, "seconds": med,
                   "runs": {n: [round(r["wall"], 2) for r in rs] for n, rs in got.items()},
                   "same_figures": len(figures) == 1, "figures": got["new"][0]["figures"]}
            rows.append(row)
            line = f"{setup:40} {label:8} {batch:5d} " + " ".join(f"{med[n]:8.1f}" for n in trees)
            if args.baseline:
                line += f"   {med['new'] / med['base']:7.2f}  " + (
                    "identical" if row["same_figures"] else "DIFFER")
            print(line, flush=True)
    print(f"load average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "speed_zoo.json"), "w") as f:
            json.dump({"baseline": args.baseline, "mode": args.mode, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
