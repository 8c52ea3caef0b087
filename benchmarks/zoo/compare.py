"""The zoo's accuracy tables: predicted (predict.py) against measured
(record.py), the tuning half and the validation half SEPARATELY, and the
per-class largest |error| of the TUNING half only, from which the error
band is made (issue 46: band = that x 1.25, at least 0.5 %).

    python3 benchmarks/zoo/compare.py --truth T.json --pred P.json \\
        [--md OUT.md] [--tuning-errors OUT.json]

Errors are (predicted - measured) / measured, in %. The tuning-errors JSON
holds, per class, the largest |error| of peak allocated and of peak
reserved over the tuning rows, the row it came from, and the band the rule
gives; validation rows never enter it."""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "predict"))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bindings", "python"))

from compare import _mib, _pct  # noqa: E402  (benchmarks/predict/compare.py)
from cachealloc.predict.answer import band  # noqa: E402

CONFS = ("classic", "expandable")
BAND_FACTOR = 1.25
BAND_FLOOR_PCT = 0.5


def err_pct(pred, meas):
    if pred is None or not meas:
        return None
    return 100.0 * (pred - meas) / meas


def residual_pct(pred, spread, meas, items=(0, 0), noise=0):
    """The error left outside what band.py widens every answer by besides
    the class band: the segment-placement spread (spread: (down, up) bytes,
    band.placement_spread's: first fit's figure, classic's random orders'
    lowest and highest) and the known unmodelled items' bounds (items: (low,
    high) bytes, high None for no bound); band.residual_pct's rule."""
    if pred is None or not meas:
        return err_pct(pred, meas)
    down, up = spread
    covered = (pred + down - items[0], None if items[1] is None else pred + up + items[1])
    return band.residual_pct(pred, covered, [meas], noise)


def rows(truth: dict, pred: dict):
    """One row per (setup, config, batch) measured: the figures and errors."""
    for n, R in truth["setups"].items():
        P = pred["setups"].get(n, {}).get("fits", {})
        for c in CONFS:
            for b, t in sorted(R["peaks"].get(c, {}).items(), key=lambda kv: int(kv[0])):
                p = P.get(b, {})
                pc = (p.get("configs") or {}).get(c, {}) if "error" not in p else {}
                ok = t.get("ok") is True
                yield {"setup": n, "half": R["half"], "class": R["class"], "family": R["family"],
                       "conf": c, "batch": int(b),
                       "gpu_allocated": t.get("max_memory_allocated") if ok else None,
                       "gpu_reserved": t.get("max_memory_reserved") if ok else None,
                       "pred_allocated": pc.get("peak_allocated"),
                       "pred_reserved": pc.get("peak_reserved"),
                       "spread_allocated": band.placement_spread(pc)["peak_allocated"],
                       "spread_reserved": band.placement_spread(pc)["peak_reserved"],
                       "items_allocated": band.item_bounds(p.get("band_items"), "allocated"),
                       "items_reserved": band.item_bounds(p.get("band_items"), "reserved"),
                       "band_allocated": (pc.get("band") or {}).get("peak_allocated"),
                       "band_reserved": (pc.get("band") or {}).get("peak_reserved"),
                       "benchmark": "cudnn_benchmark" in (R.get("regime") or []),
                       "error": p.get("error") or (None if ok else t.get("error") or t.get("oom"))}


def tuning_errors(truth: dict, pred: dict, gpu_noise=None) -> dict:
    """Per class: the largest |error| over the tuning rows, and the band.
    gpu_noise: {"allocated_bytes", "reserved_bytes"} to take the errors
    beyond (tuning_errors.py --gpu-noise's figure), or None."""
    noise = band.noise({"gpu_noise": gpu_noise})
    about = ("largest |error| per class over the TUNING half only (benchmarks/zoo/compare.py), "
             "outside the segment-placement spread each answer is widened by")
    about += ("; band = max(that x 1.25, 0.5 %) (issue 46)" if not gpu_noise else
              " and the GPU's own spread between processes (gpu_noise, bytes); "
              "band = max(that x 1.25, 0.5 %) plus that spread (issue 46)")
    out = {"about": about,
           **({"gpu_noise": {"allocated_bytes": noise["allocated"],
                             "reserved_bytes": noise["reserved"]}} if gpu_noise else {}),
           "truth": {"device": truth["device"], "torch": truth["torch"],
                     "libraries": truth.get("libraries")},
           "predicted_with_torch": pred.get("torch"), "classes": {}}
    for r in rows(truth, pred):
        if r["half"] != "tuning":
            continue
        C = out["classes"].setdefault(r["class"], {"rows": 0, "rows_without_prediction": [],
                                                   "allocated": None, "reserved": None})
        ea = residual_pct(r["pred_allocated"], r["spread_allocated"], r["gpu_allocated"],
                          r["items_allocated"], noise["allocated"])
        er = residual_pct(r["pred_reserved"], r["spread_reserved"], r["gpu_reserved"],
                          r["items_reserved"], noise["reserved"])
        if ea is None or er is None:
            C["rows_without_prediction"].append(f"{r['setup']} {r['conf']} b{r['batch']}")
            continue
        C["rows"] += 1
        for key, e in (("allocated", ea), ("reserved", er)):
            if C[key] is None or abs(e) > C[key]["max_abs_error_pct"]:
                C[key] = {"max_abs_error_pct": round(abs(e), 4),
                          "row": f"{r['setup']} {r['conf']} b{r['batch']}"}
    for C in out["classes"].values():
        worst = max((C[k]["max_abs_error_pct"] for k in ("allocated", "reserved") if C[k]),
                    default=None)
        C["band_pct"] = None if worst is None else round(max(BAND_FACTOR * worst, BAND_FLOOR_PCT), 4)
    return out


# Issue 46's accuracy targets per row: peak allocated within 1 %, peak
# reserved within 2 % (transformers) or 5 % (convnets).
TARGET_ALLOCATED_PCT = 1.0
TARGET_RESERVED_PCT = {"transformer": 2.0, "convnet": 5.0}


def inside(band, pred, gpu):
    """Whether the GPU's figure lies in the printed band [pred - low, pred +
    high] (high None: no upper bound); None when the row has no band."""
    if not band or pred is None or gpu is None:
        return None
    low, high = band
    return pred - low <= gpu and (high is None or gpu <= pred + high)


def summary(rows_: list) -> dict:
    """Counts over rows with a prediction: within the accuracy targets,
    inside the printed band (of rows with a band)."""
    have = [r for r in rows_ if all(r[k] for k in ("pred_allocated", "gpu_allocated",
                                                    "pred_reserved", "gpu_reserved"))]
    ok = [r for r in have
          if abs(err_pct(r["pred_allocated"], r["gpu_allocated"])) <= TARGET_ALLOCATED_PCT
          and abs(err_pct(r["pred_reserved"], r["gpu_reserved"]))
          <= TARGET_RESERVED_PCT.get(r["class"], 2.0)]
    banded = [r for r in have if r["band_allocated"] and r["band_reserved"]]
    in_band = [r for r in banded
               if inside(r["band_allocated"], r["pred_allocated"], r["gpu_allocated"])
               and inside(r["band_reserved"], r["pred_reserved"], r["gpu_reserved"])]
    return {"rows": len(have), "within_target": len(ok), "with_band": len(banded),
            "inside_band": len(in_band),
            "misses": [f"{r['setup']} {r['conf']} b{r['batch']}" for r in have if r not in ok],
            "outside_band": [f"{r['setup']} {r['conf']} b{r['batch']}" for r in banded
                             if r not in in_band]}


def _band_cell(band, pred, gpu):
    if not band or pred is None:
        return "—"
    low, high = band
    hi = "∞" if high is None else f"{high / 2**20:,.0f}"
    mark = {True: "in", False: "OUT", None: ""}[inside(band, pred, gpu)]
    return f"−{low / 2**20:,.0f}/+{hi} {mark}"


def trains(R: dict, conf: str, batch):
    """Whether the GPU trains `batch` under the row's fraction: its own probe
    there if it ran one, else batch <= its largest (probes are monotone in
    the truth; record.py flags rows that are not). None: nothing to judge."""
    if batch is None or (R.get("largest") or {}).get(conf) is None:
        return None
    if batch <= 0:
        return True
    probe = ((R.get("probes") or {}).get(conf) or {}).get(str(batch))
    if probe is not None and probe.get("ok") is not None:
        return bool(probe["ok"])
    return batch <= R["largest"][conf]


def _largest_cell(gpu, pred):
    if gpu is None or pred is None:
        return f"{gpu if gpu is not None else '—'} / {pred if pred is not None else '—'}"
    d = pred - gpu
    return f"{gpu} / {pred}" + ("" if d == 0 else f" ({d:+d})")


def table(truth: dict, pred: dict) -> str:
    lib = truth.get("libraries") or {}
    out = [f"Measured on {truth['device']} (total {truth['device_total_memory']:,} B), torch "
           f"{truth['torch']}, " + ", ".join(f"{k} {v}" for k, v in lib.items()) +
           f", {truth['steps']} training steps per fresh process; predicted with torch "
           f"{pred.get('torch')}" + (f" (library versions differ: {pred['libraries_mismatch']})"
                                     if pred.get("libraries_mismatch") else "") + ".", ""]
    all_rows = list(rows(truth, pred))
    for half in [h for h in ("tuning", "validation", "holdout")
                 if any(R["half"] == h for R in truth["setups"].values())]:
        out += [f"### {half.capitalize()} half: peaks", "",
                "| setup | class | config | batch | allocated MiB (GPU) | predicted | error | band MiB | "
                "reserved MiB (GPU) | predicted | error | band MiB |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in all_rows:
            if r["half"] != half:
                continue
            out.append(f"| {r['setup']} | {r['class']} | {r['conf']} | {r['batch']} | "
                       f"{_mib(r['gpu_allocated'])} | {_mib(r['pred_allocated'])} | "
                       f"{_pct(r['pred_allocated'], r['gpu_allocated'])} | "
                       f"{_band_cell(r['band_allocated'], r['pred_allocated'], r['gpu_allocated'])} | "
                       f"{_mib(r['gpu_reserved'])} | {_mib(r['pred_reserved'])} | "
                       f"{_pct(r['pred_reserved'], r['gpu_reserved'])} | "
                       f"{_band_cell(r['band_reserved'], r['pred_reserved'], r['gpu_reserved'])} |")
        S = summary([r for r in all_rows if r["half"] == half])
        out += ["", f"{half.capitalize()} half: {S['within_target']} of {S['rows']} rows within the "
                    f"targets (allocated {TARGET_ALLOCATED_PCT:g} %, reserved "
                    f"{TARGET_RESERVED_PCT['transformer']:g} % transformers / "
                    f"{TARGET_RESERVED_PCT['convnet']:g} % convnets); {S['inside_band']} of "
                    f"{S['with_band']} rows with a band inside it (both figures)."
                    + (f" Misses: {', '.join(S['misses'])}." if S["misses"] else "")
                    + (f" Outside the band: {', '.join(S['outside_band'])}." if S["outside_band"] else "")]
        out += ["", f"### {half.capitalize()} half: largest batch under a memory fraction "
                    "(GPU / predicted)", "",
                "Predicted: the replay's largest, and the answer's (the largest whose need plus "
                "its band fits: what `cachealloc predict --largest` tells the user to run). "
                "Trains: the GPU's probe at the answered batch ran (else, with no probe there, "
                "whether it is at most the GPU's largest).", "",
                "| setup | fraction of total | limit MiB | classic GPU / replay / answer | trains | "
                "expandable GPU / replay / answer | trains |", "|---|---|---|---|---|---|---|"]
        checks = []
        for n, R in truth["setups"].items():
            if R["half"] != half or "fraction" not in R:
                continue
            pl = pred["setups"].get(n, {}).get("largest") or {}
            PL = (pl.get("largest") or {}) if "error" not in pl else {}
            WB = (pl.get("largest_within_band") or {}) if "error" not in pl else {}
            L = R.get("largest", {})
            cells = []
            for c in CONFS:
                t = trains(R, c, WB.get(c))
                if t is not None:
                    checks.append((n, c, t, L.get(c), WB.get(c)))
                cells += [f"{_largest_cell(L.get(c), PL.get(c))} / {WB.get(c, '—')}",
                          {True: "yes", False: "**no**", None: "—"}[t]]
            out.append(f"| {n} | {R['limit_fraction_of_total']} | {_mib(R['limit_bytes'])} | "
                       + " | ".join(cells) + " |")
        if checks:
            ok = sum(1 for *_, t, _, _ in checks if t)
            within1 = sum(1 for *_, t, g, p in checks if t and g is not None and g - p <= 1)
            out += ["", f"Answered largest batch: trains on {ok} of {len(checks)}; at most 1 under "
                        f"the GPU's largest on {within1} of {len(checks)}."]
        errs = sorted({f"{r['setup']}: {r['error']}" for r in all_rows
                       if r["half"] == half and r["error"]} |
                      {f"{n} largest: {W['largest']['error']}" for n, W in pred["setups"].items()
                       if truth["setups"][n]["half"] == half and (W.get("largest") or {}).get("error")})
        if errs:
            out += ["", "Errors (no figure):", ""] + [f"- {e.splitlines()[0][:300]}" for e in errs]
        out.append("")
    te = tuning_errors(truth, pred)
    out += ["### Error band per class (from the tuning half only)", "",
            "| class | tuning rows | max abs error allocated | max abs error reserved | band |",
            "|---|---|---|---|---|"]
    for c, C in sorted(te["classes"].items()):
        def cell(k):
            return f"{C[k]['max_abs_error_pct']:.2f} % ({C[k]['row']})" if C[k] else "—"
        band = "—" if C["band_pct"] is None else f"{C['band_pct']:.2f} %"
        out.append(f"| {c} | {C['rows']} | {cell('allocated')} | {cell('reserved')} | {band} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", required=True)
    ap.add_argument("--pred", required=True)
    ap.add_argument("--md", help="write the tables here too")
    ap.add_argument("--tuning-errors", help="write the tuning half's per-class errors (JSON) here")
    ap.add_argument("--gpu-noise-from", help="a band data file with gpu_noise (tuning_errors.py "
                                             "--gpu-noise): the tuning errors are taken beyond it")
    args = ap.parse_args()
    truth, pred = json.load(open(args.truth)), json.load(open(args.pred))
    text = table(truth, pred)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    if args.tuning_errors:
        with open(args.tuning_errors, "w") as f:
            noise = json.load(open(args.gpu_noise_from)).get("gpu_noise") if args.gpu_noise_from else None
            if args.gpu_noise_from and not noise:
                sys.exit(f"{args.gpu_noise_from} has no gpu_noise")
            json.dump(tuning_errors(truth, pred, noise), f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
