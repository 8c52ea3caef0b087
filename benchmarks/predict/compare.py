"""The accuracy table: predicted (predict_all.py) against measured
(record_truth.py), per workload, policy and batch, with the error; and
MemTracker's peak (measured on the GPU, its own prediction of the step's
peak) as the baseline.

    python benchmarks/predict/compare.py --truth T.json --pred P.json [--pred P2.json]

Prints markdown (pasted into docs/prediction.md). Errors are
(predicted - measured) / measured."""
from __future__ import annotations

import argparse
import json

CONFS = ("classic", "expandable")


def _pct(pred, meas) -> str:
    if pred is None or meas in (None, 0):
        return "—"
    return f"{100.0 * (pred - meas) / meas:+.2f} %"


def _mib(x) -> str:
    return "—" if x is None else f"{x / 2**20:,.1f}"


def memtracker_largest(R: dict, limit: int):
    """MemTracker's largest batch: its peaks at the two base batches, taken as
    linear in the batch (an extrapolation, labelled as such in the table)."""
    mt = {int(b): r.get("memtracker_peak_total") for b, r in R["memtracker"].items()}
    (b0, p0), (b1, p1) = sorted(mt.items())[:2]
    if p0 is None or p1 is None or p1 <= p0:
        return None
    slope = (p1 - p0) / (b1 - b0)
    return int(b0 + (limit - p0) // slope)


def attention_kernels(truth: dict, pred: dict) -> list:
    """One line per workload whose truth recorded the attention kernel the
    GPU picked (the unmodified scripts), beside the prediction's."""
    out = []
    for w, R in truth["workloads"].items():
        gpu = {}
        for runs in R["truth"].values():
            for r in runs.values():
                gpu.update(r.get("sdp_choices") or {})
        if not gpu:
            continue
        predicted = {}
        for f in pred["workloads"].get(w, {}).get("fits", {}).values():
            predicted.update(f.get("recording", {}).get("attention_calls") or {})
        out.append(f"- {w}: GPU {sorted(set(gpu.values()))} for {len(gpu)} call shape(s); "
                   f"predicted {sorted(predicted)}")
    return out


def table(truth: dict, preds: list) -> str:
    lines = [f"Measured on {truth['device']} (total {truth['device_total_memory']:,} B), "
             f"torch {truth['torch']}, {truth['steps']} training steps, each in a fresh process.", ""]
    for label, pred in preds:
        lines.append(f"### Peaks, predicted by {label} (torch {pred['torch']})")
        lines.append("")
        lines.append("| workload | policy | batch | allocated MiB (GPU) | predicted | error | "
                     "reserved MiB (GPU) | predicted | error | MemTracker peak MiB | MemTracker error (vs allocated) |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for w, R in truth["workloads"].items():
            P = pred["workloads"].get(w, {}).get("fits", {})
            for b in sorted(R["truth"]["classic"], key=int):
                for c in CONFS:
                    t = R["truth"][c][b]
                    p = P.get(b, {})
                    pc = p.get("configs", {}).get(c, {}) if "error" not in p else {}
                    mt = R["memtracker"].get(b, {}).get("memtracker_peak_total")
                    lines.append(
                        f"| {w} | {c} | {b} | {_mib(t.get('max_memory_allocated'))} | "
                        f"{_mib(pc.get('peak_allocated'))} | {_pct(pc.get('peak_allocated'), t.get('max_memory_allocated'))} | "
                        f"{_mib(t.get('max_memory_reserved'))} | {_mib(pc.get('peak_reserved'))} | "
                        f"{_pct(pc.get('peak_reserved'), t.get('max_memory_reserved'))} | "
                        f"{_mib(mt)} | {_pct(mt, t.get('max_memory_allocated'))} |")
        lines.append("")
        lines.append(f"### Largest batch under a memory fraction, predicted by {label}")
        lines.append("")
        lines.append("| workload | fraction | limit MiB | classic GPU / pred | expandable GPU / pred | "
                     "physical GPU / pred | MemTracker (linear from its two peaks) |")
        lines.append("|---|---|---|---|---|---|---|")
        for w, R in truth["workloads"].items():
            if "largest_batch" not in R:
                continue
            L = R["largest_batch"]
            pl = pred["workloads"].get(w, {}).get("largest", {})
            PL = pl.get("largest", {}) if "error" not in pl else {}
            cells = [f"{L.get(c)} / {PL.get(c, '—')}" for c in ("classic", "expandable", "physical")]
            lines.append(f"| {w} | {R['fraction']} | {_mib(R['limit_bytes'])} | " + " | ".join(cells) +
                         f" | {memtracker_largest(R, R['limit_bytes'])} |")
        kernels = attention_kernels(truth, pred)
        if kernels:
            lines += ["", "Attention kernels (GPU: torch._fused_sdp_choice per distinct call; "
                      "predicted: the recording's choice):", ""] + kernels
        errs = [f"{w}: {v.get('error')}" for w, W in pred["workloads"].items()
                for v in list(W.get("fits", {}).values()) + [W.get("largest", {})] if v.get("error")]
        if errs:
            lines += ["", "Prediction errors:", ""] + [f"- {e.splitlines()[0][:300]}" for e in errs]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", required=True)
    ap.add_argument("--pred", action="append", default=[], help="LABEL=FILE or FILE")
    args = ap.parse_args()
    truth = json.load(open(args.truth))
    preds = []
    for p in args.pred:
        label, _, path = p.rpartition("=")
        preds.append((label or path, json.load(open(path))))
    if not preds:  # the truth alone, with MemTracker
        preds.append(("(none)", {"torch": "—", "workloads": {}}))
    print(table(truth, preds))


if __name__ == "__main__":
    main()
