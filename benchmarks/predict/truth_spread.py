"""The GPU's own run-to-run spread of the truth peaks, beside the prediction.

A classic peak can differ from one fresh process to the next for the same
step: among free blocks of equal size native picks by address, and the
driver's segment addresses differ between processes (docs/prediction.md,
"The classic residual is the driver's segment placement"). One truth run
per row can therefore sit at either end of that spread. This runs
record_truth.py's peak phase N times (fresh processes each time, MemTracker's
runs included: they are native runs of the same step too) and prints, per
workload, policy and batch, every measured peak allocated / reserved, their
range, and where the prediction falls in it.

On the GPU machine:
    python benchmarks/predict/truth_spread.py run --out DIR --workloads encoder --repeats 4
Anywhere (summary of such a DIR against a prediction file):
    python benchmarks/predict/truth_spread.py show DIR --pred benchmarks/results/predict_pred_H200_torch2.11.json
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
MIB = 1 << 20


def run(out: pathlib.Path, workloads: str, batches: str, repeats: int) -> None:
    for k in range(1, repeats + 1):
        subprocess.run([sys.executable, str(HERE / "record_truth.py"), "run", "--out", str(out / f"r{k}"),
                        "--workloads", workloads, "--batches", batches, "--no-largest", "--no-bundle"],
                       check=True)


def measured(out: pathlib.Path) -> dict:
    """{(workload, policy, batch): [(allocated, reserved, source), ...]} over every run.
    MemTracker's runs are classic only (they run under the default config)."""
    rows: dict = {}
    for f in sorted(out.glob("r*/predict_truth_*.json")):
        d = json.loads(f.read_text())
        for w, e in d["workloads"].items():
            for policy, per_batch in e.get("truth", {}).items():
                for b, r in per_batch.items():
                    if r.get("ok", True):
                        rows.setdefault((w, policy, b), []).append(
                            (r["max_memory_allocated"], r["max_memory_reserved"], f.parent.name))
            for b, r in e.get("memtracker", {}).items():
                if r.get("max_memory_allocated") and not r.get("alloc_conf"):
                    rows.setdefault((w, "classic", b), []).append(
                        (r["max_memory_allocated"], r["max_memory_reserved"], f.parent.name + " memtracker"))
    return rows


def predicted(pred_file: pathlib.Path) -> dict:
    """{(workload, policy, batch): (allocated, reserved)} from predict_all.py's output."""
    if not pred_file:
        return {}
    d = json.loads(pred_file.read_text())
    out = {}
    for w, e in d.get("workloads", {}).items():
        for b, fit in e.get("fits", {}).items():
            for policy, r in fit.get("configs", {}).items():
                out[(w, policy, str(b))] = (r["peak_allocated"], r["peak_reserved"])
    return out


def show(out: pathlib.Path, pred_file) -> None:
    pred = predicted(pred_file)
    print("| workload | policy | batch | runs | allocated MiB (GPU, every run) | reserved MiB (GPU, every run) "
          "| predicted allocated / reserved MiB | inside the GPU's range |")
    print("|---|---|---|---|---|---|---|---|")
    for (w, policy, b), runs in sorted(measured(out).items()):
        alloc = sorted(r[0] for r in runs)
        res = sorted(r[1] for r in runs)
        p = pred.get((w, policy, b))
        inside = "" if p is None else (
            f"allocated {'yes' if alloc[0] <= p[0] <= alloc[-1] else 'no'}, "
            f"reserved {'yes' if res[0] <= p[1] <= res[-1] else 'no'}")
        ptxt = "" if p is None else f"{p[0] / MIB:,.1f} / {p[1] / MIB:,.1f}"
        print(f"| {w} | {policy} | {b} | {len(runs)} | {', '.join(f'{a / MIB:,.1f}' for a in alloc)} | "
              f"{', '.join(f'{r / MIB:,.1f}' for r in res)} | {ptxt} | {inside} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--workloads", default="encoder")
    r.add_argument("--batches", default="2,4")
    r.add_argument("--repeats", type=int, default=4)
    s = sub.add_parser("show")
    s.add_argument("dir")
    s.add_argument("--pred", default=None)
    args = ap.parse_args()
    if args.cmd == "run":
        out = pathlib.Path(args.out)
        run(out, args.workloads, args.batches, args.repeats)
        show(out, None)
    else:
        show(pathlib.Path(args.dir), pathlib.Path(args.pred) if args.pred else None)


if __name__ == "__main__":
    main()
