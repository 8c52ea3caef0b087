"""Issue 48's memory rule, measured in one run: each strand workload at its
physical size (from earlier runs' strand.json) under a cap of twice the
limit ("open"), one fresh process per allocator: native classic, native
expandable, the advised config where it differs, and our policies. All on
the same GPU in the same run, so the peaks compare directly.

    python3 benchmarks/strand/open_peaks.py --reuse RUN1.json,RUN2.json \\
        --out open.json [--workloads a,b] [--policies rescue] [--jobs 5]

Prints a table: peak reserved per allocator (MiB), native's best (the
lowest of the native kinds), and each policy's ratio to it."""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent


def plan(reuse: str, names):
    """workload -> (physical size, limit bytes, advised conf or None); the
    later file wins."""
    out = {}
    for path in reuse.split(","):
        for n, W in json.loads(pathlib.Path(path).read_text()).get("workloads", {}).items():
            size = (W.get("physical") or {}).get("value")
            if size is None or (names and n not in names):
                continue
            conf = None if W.get("advised_same_as") else (W.get("kinds", {}).get("advised") or {}).get("conf")
            out[n] = (size, W["limit"], conf or None)
    return out


def run(name, kind, size, cap, conf, steps, timeout, device="cuda"):
    cmd = [sys.executable, str(HERE / "child.py"), "--workload", name, "--kind", kind,
           "--size", str(size), "--steps", str(steps), "--limit", str(cap), "--device", device]
    if conf:
        cmd += ["--conf", conf]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        last = (p.stdout.strip().splitlines() or ["{}"])[-1]
        o = json.loads(last)
    except (subprocess.TimeoutExpired, json.JSONDecodeError) as e:
        o = {"outcome": "error", "message": f"{type(e).__name__}: {e}"}
    keep = ("outcome", "message", "peak_allocated", "peak_reserved", "device_allocs", "seconds")
    return {k: o[k] for k in keep if k in o} | {"size": size, "cap": cap}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reuse", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workloads", default="")
    ap.add_argument("--policies", default="rescue")
    ap.add_argument("--jobs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a dry run at tiny sizes (child.py's CPU mode)")
    a = ap.parse_args()
    P = plan(a.reuse, set(filter(None, a.workloads.split(","))))
    jobs = {}
    res = {"workloads": {}}
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for n, (size, limit, conf) in P.items():
            kinds = [("classic", None), ("expandable", None)]
            if conf:
                kinds.append(("advised", conf))
            kinds += [("policy:" + p, None) for p in a.policies.split(",") if p]
            for kind, c in kinds:
                jobs[(n, kind)] = ex.submit(run, n, kind, size, 2 * limit, c, a.steps, a.timeout, a.device)
        for (n, kind), f in jobs.items():
            res["workloads"].setdefault(n, {})[kind] = f.result()
            pathlib.Path(a.out).write_text(json.dumps(res, indent=1))
    pols = [p for p in a.policies.split(",") if p]
    print("| workload | size | " + " | ".join(["classic", "expandable", "advised", "native's best"]
                                                + [f"policy:{p}" for p in pols]
                                                + [f"policy:{p} / native's best" for p in pols]) + " |")
    print("|---" * (6 + 2 * len(pols)) + "|")
    for n, K in res["workloads"].items():
        mib = {k: (v.get("peak_reserved") or 0) / 2**20 if v.get("outcome") == "ok" else None
               for k, v in K.items()}
        native = [mib[k] for k in ("classic", "expandable", "advised") if mib.get(k)]
        best = min(native) if native else None
        cells = [f"{mib[k]:,.0f}" if mib.get(k) else "-" for k in ("classic", "expandable", "advised")]
        pol = [f"{mib[k]:,.0f}" if mib.get(k) else str(K[k].get("outcome"))
               for k in K if k.startswith("policy:")]
        ratio = [f"{mib[k] / best:.3f}" if mib.get(k) and best else "-" for k in K if k.startswith("policy:")]
        print(f"| {n} | {next(iter(K.values()))['size']:,} | " + " | ".join(
            cells + [f"{best:,.0f}" if best else "-"] + pol + ratio) + " |")


if __name__ == "__main__":
    main()
