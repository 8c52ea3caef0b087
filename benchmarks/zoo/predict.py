"""Predicts every zoo row of a GPU truth (record.py) on this CPU with
cachealloc.predict: the peaks at each measured batch (both native configs
come from one recording) and the largest batch at the truth's memory
fraction, on the truth's card (its name and total memory as measured).

    PYTHONPATH=bindings/python python3 benchmarks/zoo/predict.py \\
        --truth DIR/zoo_truth_H100_80GB_HBM3.json --out DIR/zoo_pred.json \\
        [--setups a,b | --half validation] [--jobs 2] [--timeout 600] [--no-largest]

Each prediction runs in a child process of its own under --timeout (a hang
is killed with its worker and reported, not waited for). The libraries'
versions are compared with the truth's: a transformers or timm release can
change a model's code, and so its memory (transformers 5.24 changed Llama's
rotary embedding), so a row predicted with other versions is marked.
compare.py makes the tables."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "predict"))
BUILDER = os.path.join(HERE, "setups.py")


def _keep(answer: dict) -> dict:
    """What the tables need of a predict answer (the recording summary is big)."""
    rec = answer.get("recording") or {}
    return {"configs": answer.get("configs"), "largest": answer.get("largest"),
            "largest_within_band": answer.get("largest_within_band"),
            "largest_fitting": answer.get("largest_fitting"),
            "passed_over_missing_keys": answer.get("passed_over_missing_keys"),
            "limit": answer.get("limit"), "steps": answer.get("steps", rec.get("steps")),
            "seconds": answer.get("seconds"), "record_seconds": answer.get("record_seconds"),
            "torch": rec.get("torch"),
            "band_items": [{k: it.get(k) for k in ("what", "allocated", "reserved", "need")}
                           for it in (answer.get("band") or {}).get("items") or []],
            "not_modelled": [m for m in answer.get("modelled", []) if "NOT MODELLED" in m]}


def task(args) -> None:
    """One prediction (the child process): prints RESULT <json>."""
    from cachealloc import predict
    from predict_all import truth_gpu
    truth = json.load(open(args.truth))
    gpu = truth_gpu(truth)
    target = f"{BUILDER}:{args.setup}"
    if args.kind == "fits":
        a = predict.fits(target, gpu, size=args.batch, steps=truth["steps"], advise=False,
                         mode=args.mode)
    elif args.kind == "peaks":  # the peaks alone: no min-memory search, no replay at a limit
        from cachealloc import lab
        from cachealloc.predict.answer.search import NATIVE_CONFIGS, PLACEMENT
        rec = predict.record(target, gpu, steps=truth["steps"], size=args.batch)
        rows = lab.compare(rec.trace, list(NATIVE_CONFIGS.values()), placement=PLACEMENT)
        a = {"configs": {name: {"peak_allocated": r["peak_allocated"], "peak_reserved": r["peak_reserved"]}
                         for name, r in zip(NATIVE_CONFIGS, rows)},
             "recording": rec.summary, "modelled": rec.summary.get("modelled", []),
             "record_seconds": rec.summary.get("record_seconds")}
    else:
        a = predict.largest(target, gpu, memory_fraction=args.fraction, steps=truth["steps"],
                            start=max(1, args.batch // 2), mode=args.mode)
    print("RESULT " + json.dumps(_keep(a), default=str), flush=True)


def run_task(truth_path: str, setup: str, kind: str, batch: int, fraction, timeout: float,
             env=None) -> dict:
    """One prediction in a child process (env: its environment, default
    ours); {"error": ...} when it fails or is still running at `timeout`."""
    cmd = [sys.executable, os.path.abspath(__file__), "task", "--truth", truth_path,
           "--setup", setup, "--kind", kind, "--batch", str(batch)]
    if fraction is not None:
        cmd += ["--fraction", repr(fraction)]
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return {"error": f"hang: killed after {timeout:.0f} s", "tail": err[-1500:]}
    lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        tail = [l for l in err.strip().splitlines() if l.strip()]
        return {"error": (tail[-1] if tail else f"exit {p.returncode}")[:500], "tail": err[-3000:]}
    r = json.loads(lines[-1][7:])
    r["wall_seconds"] = round(time.time() - t0, 1)
    return r


def library_mismatch(truth: dict) -> dict:
    """{library: (truth's version, installed)} where they differ."""
    from record_truth import library_versions
    mine = library_versions()
    return {k: (v, mine.get(k)) for k, v in (truth.get("libraries") or {}).items()
            if v != mine.get(k)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd")
    t = sub.add_parser("task")
    t.add_argument("--truth", required=True)
    t.add_argument("--setup", required=True)
    t.add_argument("--kind", choices=("fits", "peaks", "largest"), required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--fraction", type=float)
    t.add_argument("--mode", choices=("cpu-init", "fake"), default="cpu-init",
                   help="the fake device's mode (cachealloc predict --mode)")
    ap.add_argument("--truth")
    ap.add_argument("--out")
    ap.add_argument("--setups", help="comma-separated (default: every setup of the truth)")
    ap.add_argument("--half", choices=("tuning", "validation", "holdout", "all"), default="all")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per prediction")
    ap.add_argument("--no-largest", dest="largest", action="store_false")
    ap.add_argument("--no-peaks", dest="peaks", action="store_false",
                    help="the largest-batch searches alone")
    args = ap.parse_args()
    if args.cmd == "task":
        return task(args)
    if not (args.truth and args.out):
        ap.error("--truth and --out are required")
    import torch
    truth = json.load(open(args.truth))
    names = args.setups.split(",") if args.setups else [
        n for n, R in truth["setups"].items() if args.half in ("all", R["half"])]
    mismatch = library_mismatch(truth)
    for lib, (want, have) in mismatch.items():
        print(f"warning: the truth ran {lib} {want}, this machine has {have}: "
              f"a model's code may differ", file=sys.stderr)
    t0 = time.time()
    jobs = {}
    with ThreadPoolExecutor(args.jobs) as ex:
        for n in names:
            R = truth["setups"][n]
            for b in (sorted({int(b) for c in R["peaks"].values() for b in c}) if args.peaks else ()):
                jobs[(n, "fits", b)] = ex.submit(run_task, args.truth, n, "fits", b, None,
                                                 args.timeout)
            if args.largest and R.get("fraction"):
                jobs[(n, "largest", R["batch"])] = ex.submit(
                    run_task, args.truth, n, "largest", R["batch"], R["fraction"], args.timeout)
        out = {"torch": torch.__version__, "libraries_mismatch": mismatch,
               "truth": os.path.basename(args.truth), "gpu": truth["device"],
               "total_memory": truth["device_total_memory"], "setups": {}}
        for (n, kind, b), f in jobs.items():
            r = f.result()
            S = out["setups"].setdefault(n, {"fits": {}})
            if kind == "fits":
                S["fits"][str(b)] = r
            else:
                S["largest"] = r
            shown = r.get("error") or (r.get("largest") if kind == "largest" else {
                c: (v["peak_allocated"], v["peak_reserved"]) for c, v in r["configs"].items()})
            print(f"{n} {kind} {b}: {shown}", flush=True)
    out["seconds"] = round(time.time() - t0, 1)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, default=str)
    print("wrote", args.out, f"in {out['seconds']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
