"""The need's own error, from the GPU's largest-batch brackets (issue 46).

The answer to --largest compares the predicted need (the smallest memory
limit under which the replay of the step runs, "min_memory") with the
limit. The peaks' band was made from peaks measured without a limit; the
need is a different figure, so its error is measured on its own here.

The GPU gives a bracket, not the need itself: under the truth's memory
fraction the step trains at L and fails at F (the smallest failing batch
probed above L, normally L + 1). So the true need at L is at most the
limit, and the true need at F is above it. A prediction contradicts the
bracket when its need at L is above the limit (it would call a batch
that trains too big: over) or its need at F is at most the limit (it
would call a batch that fails fitting: under). Each contradiction is a
lower bound on the need's error there, in % of the predicted need: the
same share the band widens the need by (band.widen).

A bracket the prediction agrees with counts as 0, though it only shows the
error is smaller than the bracket's width (the need's step from L to F:
3,158 MiB, 22 %, for a Llama at batch 4 to 5), so rows made from it are
lower bounds on the need's error, not an estimate of it.

Outside what the answer already widens by: the other segment placements'
need (band.placement_spread: first fit, classic's random orders) and the unmodelled items' need bounds, as for
the peaks (band.residual_pct). Tuning half only by default: the band may be
made from it; validation rows are read only to report.

    PYTHONPATH=bindings/python python3 benchmarks/zoo/need_brackets.py \\
        --truth tests/data/predict/zoo_truth.json --out OUT.json [--half tuning] [--jobs 2]

OUT.json: {"rows": [{setup, class, conf, L, F, limit, need_L, need_F,
alt_L, alt_F, items_L, items_F, over_pct, under_pct, error_pct}]};
error_pct is signed like the peaks' (+ over, - under, 0 inside)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bindings", "python"))

from predict import run_task  # noqa: E402  (benchmarks/zoo/predict.py)
from cachealloc.predict.answer import band  # noqa: E402

CONFS = ("classic", "expandable")


def bracket(R: dict, conf: str):
    """(L, F): the GPU's largest batch that trained under the fraction and
    the smallest probed batch above it that failed; None where the truth
    has no such pair (no largest, or no failing probe above it)."""
    L = (R.get("largest") or {}).get(conf)
    probes = (R.get("probes") or {}).get(conf) or {}
    if not L:
        return None
    failed = sorted(int(b) for b, p in probes.items() if int(b) > L and not p.get("ok"))
    return (L, failed[0]) if failed else None


def need_error(need_L, alt_L, items_L, need_F, alt_F, items_F, limit) -> dict:
    """The bracket's contradiction beyond the answer's own widening, bytes
    and % of the predicted need (see the module note)."""
    lo_L = min(need_L, alt_L if alt_L is not None else need_L) - items_L[0]
    hi_F = None if items_F[1] is None else max(need_F, alt_F if alt_F is not None else need_F) + items_F[1]
    over = max(0, lo_L - limit)                       # says "too big" where the GPU trained
    under = 0 if hi_F is None else max(0, limit - hi_F + 1)  # says "fits" where the GPU failed
    over_pct, under_pct = 100.0 * over / need_L, 100.0 * under / need_F
    return {"over_bytes": over, "under_bytes": under, "over_pct": round(over_pct, 4),
            "under_pct": round(under_pct, 4),
            "error_pct": round(over_pct if over_pct >= under_pct else -under_pct, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--half", default="tuning", choices=("tuning", "validation", "holdout", "all"))
    ap.add_argument("--setups", help="comma-separated (default: every setup of the half)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    truth = json.load(open(args.truth))
    names = args.setups.split(",") if args.setups else [
        n for n, R in truth["setups"].items() if args.half in ("all", R["half"])]
    t0 = time.time()
    jobs, want = {}, []
    with ThreadPoolExecutor(args.jobs) as ex:
        for n in names:
            R = truth["setups"][n]
            for conf in CONFS:
                br = bracket(R, conf)
                if br is None:
                    continue
                want.append((n, conf, br))
                for b in br:
                    if (n, b) not in jobs:
                        jobs[(n, b)] = ex.submit(run_task, args.truth, n, "fits", b, None, args.timeout)
        rows = []
        for n, conf, (L, F) in want:
            R = truth["setups"][n]
            aL, aF = jobs[(n, L)].result(), jobs[(n, F)].result()
            row = {"setup": n, "class": R["class"], "half": R["half"], "conf": conf, "L": L, "F": F,
                   "limit": R["limit_bytes"]}
            if "error" in aL or "error" in aF:
                row["error"] = aL.get("error") or aF.get("error")
                rows.append(row)
                print(n, conf, "error:", row["error"], flush=True)
                continue
            cL, cF = aL["configs"][conf], aF["configs"][conf]
            if cL["min_memory"] is None or cF["min_memory"] is None:
                row["error"] = "no need predicted (the replay cannot run the step at any limit)"
                rows.append(row)
                print(n, conf, "error:", row["error"], flush=True)
                continue
            # The other placements' lowest need at L, highest at F (first
            # fit's, and classic's random orders': band.placement_spread).
            altL = cL["min_memory"] + band.placement_spread(cL)["min_memory"][0]
            altF = cF["min_memory"] + band.placement_spread(cF)["min_memory"][1]
            iL, iF = (band.item_bounds(a.get("band_items"), "need") for a in (aL, aF))
            row.update(need_L=cL["min_memory"], need_F=cF["min_memory"], alt_L=altL, alt_F=altF,
                       items_L=list(iL), items_F=list(iF))
            row.update(need_error(cL["min_memory"], altL, iL, cF["min_memory"], altF, iF,
                                  R["limit_bytes"]))
            rows.append(row)
            mib = 1 << 20
            print(f"{n:40s} {conf:10s} L={L:<4d} F={F:<4d} limit {R['limit_bytes'] / mib:9.1f} "
                  f"need(L) {cL['min_memory'] / mib:9.1f} need(F) {cF['min_memory'] / mib:9.1f} "
                  f"error {row['error_pct']:+.2f} %", flush=True)
    out = {"about": __doc__.splitlines()[0], "truth": os.path.basename(args.truth),
           "half": args.half, "setups": args.setups, "seconds": round(time.time() - t0, 1),
           "rows": rows}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print("wrote", args.out, f"in {out['seconds']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
