"""Runs every zoo setup through `cachealloc predict` on this CPU, as a user
would (the command, not the Python API), at one batch, each under a wall
clock limit, and says which ones answer, fail, refuse or hang, and why.

    PYTHONPATH=bindings/python python3 benchmarks/zoo/cpu_check.py --out DIR \\
        [--setups a,b] [--timeout 300] [--jobs 1] [--gpu H100-80GB]

Writes DIR/cpu_check.json (per setup: exit status, seconds, outcome, the
answer's peaks or the error's last lines) and DIR/cpu_check.md. A hang is a
run killed at --timeout (its whole process group: the predictor's worker
too). Each row is kept in DIR/rows/ as it ends; a second run with the same
DIR reuses them (--again runs them anew)."""
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
REPO = os.path.dirname(os.path.dirname(HERE))

from zoo import setups as S  # noqa: E402

# What the command's own exit status means (docs/prediction.md).
OUTCOME = {0: "fits", 1: "does not fit", 2: "refused or failed"}


def command(name: str, batch: int, gpu: str) -> list:
    entry = "import sys; from cachealloc.cli import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", entry, "predict", "--gpu", gpu, "--builder",
            os.path.join(HERE, "setups.py") + ":" + name, "--size", str(batch), "--json",
            "--no-advise"]


def check(name: str, batch: int, gpu: str, timeout: float) -> dict:
    t0 = time.time()
    # A session of its own: on a timeout the predictor's worker dies with it.
    p = subprocess.Popen(command(name, batch, gpu), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, cwd=REPO)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return {"setup": name, "batch": batch, "outcome": "hang", "status": None,
                "seconds": round(time.time() - t0, 1),
                "detail": f"killed after {timeout:.0f} s; last output: " + (err or out)[-1500:]}
    r = {"setup": name, "batch": batch, "status": p.returncode,
         "seconds": round(time.time() - t0, 1)}
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and answer.get("configs"):
        r["outcome"] = OUTCOME.get(p.returncode, f"exit {p.returncode}")
        r["peaks"] = {c: {"allocated": v["peak_allocated"], "reserved": v["peak_reserved"]}
                      for c, v in answer["configs"].items()}
        rec = answer.get("recording") or {}
        r["steps"] = rec.get("steps")
        r["record_seconds"] = rec.get("record_seconds")
        r["not_modelled"] = [m for m in answer.get("modelled", []) if "NOT MODELLED" in m]
    else:
        text = (err or "") + (out or "")
        refused = "refus" in text.lower()
        r["outcome"] = "refused" if refused else "failed"
        r["detail"] = text[-2500:]
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--setups", help="comma-separated (default: all)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--gpu", default="H100-80GB")
    ap.add_argument("--again", action="store_true", help="ignore the rows kept in DIR/rows/")
    args = ap.parse_args()
    names = args.setups.split(",") if args.setups else list(S.SETUPS)
    os.makedirs(os.path.join(args.out, "rows"), exist_ok=True)

    def one(name):
        path = os.path.join(args.out, "rows", name + ".json")
        if os.path.exists(path) and not args.again:
            with open(path) as f:
                return json.load(f)
        r = check(name, S.SETUPS[name].batch, args.gpu, args.timeout)
        with open(path, "w") as f:
            json.dump(r, f, indent=1)
        return r

    with ThreadPoolExecutor(args.jobs) as ex:
        futs = [ex.submit(one, n) for n in names]
        rows = []
        for f in futs:
            r = f.result()
            rows.append(r)
            print(f"{r['setup']:42} {r['outcome']:14} {r['seconds']:7.1f} s", flush=True)
    import torch
    doc = {"torch": torch.__version__, "gpu": args.gpu, "timeout": args.timeout,
           "versions": _versions(), "rows": rows}
    with open(os.path.join(args.out, "cpu_check.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(args.out, "cpu_check.md"), "w") as f:
        f.write(table(doc))
    print(table(doc))


def _versions() -> dict:
    from zoo import libs
    return libs.versions()


def table(doc: dict) -> str:
    lines = [f"`cachealloc predict --builder benchmarks/zoo/setups.py:NAME --size BATCH --gpu "
             f"{doc['gpu']}` on this CPU (torch {doc['torch']}, {doc['versions']}), "
             f"limit {doc['timeout']:.0f} s each.", "",
             "| setup | half | batch | outcome | s | peak allocated / reserved (classic), MiB | why |",
             "|---|---|---|---|---|---|---|"]
    halves = S.split()
    for r in doc["rows"]:
        peaks = r.get("peaks", {}).get("classic")
        cell = f"{peaks['allocated'] / 2**20:,.0f} / {peaks['reserved'] / 2**20:,.0f}" if peaks else "—"
        why = ""
        if r.get("detail"):
            lines_ = [l for l in r["detail"].strip().splitlines() if l.strip()]
            why = (lines_[-1] if lines_ else "")[:200].replace("|", "\\|")
        elif r.get("not_modelled"):
            why = f"{len(r['not_modelled'])} NOT MODELLED line(s)"
        lines.append(f"| {r['setup']} | {halves[r['setup']]} | {r['batch']} | {r['outcome']} | "
                     f"{r['seconds']:.0f} | {cell} | {why} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
