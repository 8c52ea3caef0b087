"""The convolution keys of zoo setups at given batches, written by the
command a user runs (`cachealloc predict --builder ... --cudnn-table none
--cudnn-keys FILE`), one keys file per setup with every batch in it, for
the key-level probe on the GPU (cachealloc.predict.kernels.key_probe).

    PYTHONPATH=bindings/python python3 benchmarks/zoo/cudnn_keys.py OUTDIR \\
        NAME:B1,B2 [NAME:B ...] [--range NAME:LO-HI ...] [--jobs 2] [--gpu H100-80GB]

No table is used (every convolution is "missing"), so each file lists all
of the step's keys in the order it first called them. --range adds every
batch of a range by the batch rule (expand()), for a largest-batch search."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def one(name: str, batch: int, gpu: str, tmp: str) -> tuple:
    out = os.path.join(tmp, f"{name}.{batch}.json")
    cmd = [sys.executable, "-m", "cachealloc.cli", "predict", "--gpu", gpu,
           "--builder", os.path.join(HERE, "setups.py") + ":" + name, "--size", str(batch),
           "--cudnn-table", "none", "--cudnn-keys", out, "--no-advise", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if not os.path.exists(out):
        raise RuntimeError(f"{name} batch {batch}: no keys written (exit {r.returncode}):\n"
                           + r.stderr[-2000:])
    with open(out) as f:
        return name, batch, json.load(f)


def _at(keys, old: str, new: int) -> list:
    return [re.sub(r"\|in=%s," % old, f"|in={new},", k, count=1) for k in keys]


def expand(sizes: dict, batches) -> dict:
    """The keys of other batches without recording them: in an image model
    the batch is the leading dimension of every convolution's input, so a
    batch's keys are another's with in=N replaced. Checked first on the two
    recorded batches (ValueError when the rule does not hold); recorded
    batches keep their own keys."""
    got = sorted(sizes, key=int)
    if len(got) < 2:
        raise ValueError("the batch rule needs two recorded batches to be checked on")
    lo, hi = got[0], got[-1]
    for k in sizes[lo]:
        if f"|in={lo}," not in k:
            raise ValueError(f"batch rule: key {k!r} does not lead with the batch {lo}")
    if _at(sizes[lo], lo, int(hi)) != sizes[hi]:
        raise ValueError(f"batch rule: batch {hi}'s keys are not batch {lo}'s with the batch replaced")
    out = dict(sizes)
    for b in batches:
        out.setdefault(str(b), _at(sizes[lo], lo, b))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("rows", nargs="+", help="NAME:B1,B2")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--gpu", default="H100-80GB")
    ap.add_argument("--range", action="append", default=[], metavar="NAME:LO-HI",
                    help="also every batch LO..HI, by the batch rule (expand())")
    a = ap.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    work = [(n, int(b)) for row in a.rows for n, bs in [row.split(":")] for b in bs.split(",")]
    files = {}
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(a.jobs) as ex:
        for name, batch, doc in ex.map(lambda w: one(*w, a.gpu, tmp), work):
            f = files.setdefault(name, {"format": doc["format"], "gpu": doc.get("gpu"), "sizes": {}})
            f["sizes"].update(doc["sizes"])
            print(f"{name} batch {batch}: {sum(len(k) for k in doc['sizes'].values())} keys", flush=True)
    for spec in a.range:
        name, _, rng = spec.partition(":")
        lo, _, hi = rng.partition("-")
        files[name]["sizes"] = expand(files[name]["sizes"], range(int(lo), int(hi) + 1))
        print(f"{name}: batches {lo}-{hi} by the batch rule, "
              f"{sum(len(k) for k in files[name]['sizes'].values())} keys in all", flush=True)
    for name, doc in files.items():
        with open(os.path.join(a.outdir, f"{name}.keys.json"), "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
