"""Writes the predictor's tuning-error file (bindings/python/cachealloc/
predict/answer/data/tuning_errors.json), from which every answer's error
band is made (answer/band.py): one row per tuning workload, policy and
batch with the predicted peaks' errors against the GPU, the step's class,
and the ops the tuning steps ran (the "GPU-checked" ops of the band's
coverage), and the CPU torch versions whose predictions were compared.

    python benchmarks/predict/tuning_errors.py \\
      --pair TRUTH.json:PRED.json [--pair ...] [--reported ROWS.json] \\
      [--exclude WORKLOAD=why ...] --out bindings/python/cachealloc/predict/answer/data/tuning_errors.json

TRUTH.json: record_truth.py's measurements; PRED.json: predict_all.py's
predictions of the same workloads (its "torch" is the CPU torch that
predicted). A row's class is the prediction's "step_class" (band.step_class
of its recording), or the same workload's class from another pair.
--reported: rows measured elsewhere, as a JSON list of {workload, class,
policy, batch, allocated_error_pct, reserved_error_pct, source}.
--zoo-errors: benchmarks/zoo/compare.py --tuning-errors output (per class,
the tuning half's largest errors), one row per class and quantity.
--need-brackets: benchmarks/zoo/need_brackets.py output (tuning half): one
row per setup and config with the need's error from the GPU's
largest-batch bracket (band.py adds its worst x 1.25 to peak reserved's
band for the need).
The zoo's compare script calls this with the tuning half's pairs only:
never a validation row.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
from cachealloc.predict.answer import band  # noqa: E402
from cachealloc.predict.answer.band import from_zoo, residual_pct  # noqa: E402

FORMAT = "cachealloc-predict-tuning-errors/1"
KERNEL_MODELS_TORCH = "2.11"
CONFS = ("classic", "expandable")


def _minor(version: str) -> str:
    return ".".join(str(version).split("+")[0].split(".")[:2])


def gpu_noise(pairs, spread) -> dict:
    """The GPU's own spread between fresh native processes of one step, bytes:
    per quantity, the largest max - min over every (workload, config, batch)
    measured in more than one process (the pairs' truth plus spread_runs'
    other runs). band.py widens every band by it, and a tuning row's error
    is what lies beyond it."""
    worst = {"allocated": (0, None), "reserved": (0, None)}
    runs = 0
    for truth_path, _ in pairs:
        for w, R in json.load(open(truth_path))["workloads"].items():
            for conf, by_batch in (R.get("truth") or {}).items():
                for b, t in by_batch.items():
                    others = (spread or {}).get((w, conf, b), [])
                    if not others or not t.get("ok", True) or not t.get("max_memory_reserved"):
                        continue
                    runs += 1
                    figs = [(t["max_memory_allocated"], t["max_memory_reserved"]), *others]
                    for i, q in enumerate(("allocated", "reserved")):
                        d = max(f[i] for f in figs) - min(f[i] for f in figs)
                        if d > worst[q][0]:
                            worst[q] = (d, f"{w} {conf} b{b} ({len(figs)} processes)")
    return {"allocated_bytes": worst["allocated"][0], "reserved_bytes": worst["reserved"][0],
            "set_by": {q: worst[q][1] for q in worst}, "steps_measured": runs,
            "about": "the largest max - min of one step's peaks over fresh native processes "
                     "on one GPU (tuning_errors.py gpu_noise)"}


def _pct(pred, meas, spread=(0, 0), others=(), noise=0):
    """The error in %, of the prediction; with spread (band.placement_spread's
    (down, up) bytes: the other segment placements' figures), only what lies
    outside [pred + down, pred + up] (band.py widens by that spread); with
    others (the same step's figure in other native processes: the GPU's own
    spread, truth_spread.py), the farthest GPU figure counts
    (band.residual_pct)."""
    if pred is None or not meas:
        return None
    return round(residual_pct(pred, (pred + spread[0], pred + spread[1]), [meas, *others], noise), 4)


def spread_runs(paths) -> dict:
    """{(workload, config, batch): [(allocated, reserved), ...]} from other
    record_truth.py runs of the same workloads (truth_spread.py's run
    folders): their truth figures, and their MemTracker harness's native
    classic figures, which differ from the truth harness's by the driver's
    placement (docs/prediction.md, the GPU's own spread)."""
    out = {}
    for path in paths:
        for w, R in json.load(open(path))["workloads"].items():
            for conf, by_batch in (R.get("truth") or {}).items():
                for b, t in by_batch.items():
                    if t.get("ok", True) and t.get("max_memory_reserved"):
                        out.setdefault((w, conf, b), []).append(
                            (t["max_memory_allocated"], t["max_memory_reserved"]))
            for b, t in (R.get("memtracker") or {}).items():
                if isinstance(t, dict) and t.get("max_memory_reserved") and not t.get("alloc_conf"):
                    out.setdefault((w, "classic", b), []).append(
                        (t["max_memory_allocated"], t["max_memory_reserved"]))
    return out


def pair_rows(truth_path: str, pred_path: str, spread=None, noise=None):
    """(rows, classes {workload: class}, ops {op: set(workloads)}, cpu torch).
    spread: spread_runs()'s other GPU figures of the same rows."""
    truth, pred = json.load(open(truth_path)), json.load(open(pred_path))
    source = f"{os.path.relpath(truth_path)} vs {os.path.relpath(pred_path)}"
    rows, classes, ops = [], {}, {}
    for w, R in truth["workloads"].items():
        P = (pred["workloads"].get(w) or {}).get("fits") or {}
        for b in sorted(R["truth"]["classic"], key=int):
            p = P.get(b) or {}
            if "configs" not in p:
                continue
            if p.get("step_class"):
                classes[w] = p["step_class"]
            for op in (p.get("recording") or {}).get("op_calls") or {}:
                ops.setdefault(op, set()).add(w)
            for conf in CONFS:
                t, c = R["truth"][conf][b], p["configs"][conf]
                if not t.get("ok", True):
                    continue
                others = (spread or {}).get((w, conf, b), [])
                moved = band.placement_spread(c)   # first fit, classic's random orders
                rows.append({"workload": w, "policy": conf, "batch": int(b),
                             "allocated_error_pct": _pct(c["peak_allocated"], t.get("max_memory_allocated"),
                                                         moved["peak_allocated"], [a for a, _ in others],
                                                         (noise or {}).get("allocated_bytes", 0)),
                             "reserved_error_pct": _pct(c["peak_reserved"], t.get("max_memory_reserved"),
                                                        moved["peak_reserved"], [r for _, r in others],
                                                        (noise or {}).get("reserved_bytes", 0)),
                             "gpu_runs": 1 + len(others),
                             "gpu": truth.get("device"), "torch_gpu": truth.get("torch"),
                             "torch_cpu": pred.get("torch"), "source": source})
    return rows, classes, ops, pred.get("torch")


def need_rows(brackets: dict, source: str) -> list:
    """need_brackets.py's rows as band rows: one per tuning setup and config
    with a GPU bracket, its need_error_pct (the contradiction beyond the
    answer's own widening, % of the predicted need; 0 inside). A bracket
    file of any other half, or a row that failed, is refused: the band is
    made from the tuning half alone, and a missing row would narrow it."""
    if brackets.get("half") != "tuning" or any(r.get("half") != "tuning" for r in brackets["rows"]):
        sys.exit(f"{source}: not the tuning half's brackets (half {brackets.get('half')!r})")
    failed = [f"{r['setup']} {r['conf']}" for r in brackets["rows"] if "error" in r]
    if failed:
        sys.exit(f"{source}: no prediction for {', '.join(failed)}: predict them again")
    if brackets.get("setups"):
        sys.exit(f"{source}: brackets of some setups only ({brackets['setups']}): the band needs "
                 "every tuning row")
    return [{"workload": f"{r['setup']} L{r['L']}/F{r['F']}", "class": r["class"],
             "policy": r["conf"], "need_error_pct": r["error_pct"],
             "source": f"{source} (zoo tuning half, GPU largest-batch bracket)"}
            for r in brackets["rows"]]


def build(pairs, reported, excluded, spread=None, with_noise=False) -> dict:
    rows, classes, ops, cpu = [], {}, {}, {}
    noise = gpu_noise(pairs, spread) if with_noise else None
    for truth_path, pred_path in pairs:
        r, c, o, torch_cpu = pair_rows(truth_path, pred_path, spread, noise)
        rows += r
        classes.update(c)
        for op, ws in o.items():
            ops.setdefault(op, set()).update(ws)
        n = len(r)
        cpu.setdefault(_minor(torch_cpu), []).append(
            f"{n} tuning rows predicted under torch {torch_cpu} ({os.path.relpath(pred_path)})")
    for r in rows:
        if r["workload"] not in classes:
            sys.exit(f"no class for {r['workload']}: no prediction with step_class (re-predict it)")
        r["class"] = classes[r["workload"]]
    out_excluded = []
    kept = []
    for r in rows + list(reported):
        why = excluded.get(r["workload"])
        (out_excluded if why else kept).append(dict(r, why=why) if why else r)
    return {"format": FORMAT, "kernel_models_torch": KERNEL_MODELS_TORCH,
            **({"gpu_noise": noise} if noise else {}),
            "note": (("Tuning rows the error band is made from (answer/band.py: per class, the "
                      "largest |error| x 1.25, at least 0.5 %). Each row names its source. "
                      if not noise else
                      "Tuning rows the error band is made from (answer/band.py: per class, the "
                      "largest |error| beyond the GPU's own spread (gpu_noise) x 1.25, at least "
                      "0.5 %, plus that spread in bytes). Each row names its source. ")
                     + "Regenerate with benchmarks/predict/tuning_errors.py; never add a "
                       "validation row."),
            "rows": kept, "excluded": out_excluded,
            "checked_ops": {op: sorted(ws) for op, ws in sorted(ops.items())},
            "cpu_torch_checked": {v: "; ".join(s) for v, s in sorted(cpu.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", action="append", default=[], help="TRUTH.json:PRED.json")
    ap.add_argument("--zoo-errors", help="benchmarks/zoo/compare.py --tuning-errors JSON")
    ap.add_argument("--truth-runs", action="append", default=[],
                    help="another record_truth.py run of the pairs' workloads (the GPU's own "
                         "spread: truth_spread.py's DIR/rN/predict_truth_H200.json); repeatable")
    ap.add_argument("--reported", help="JSON list of rows measured elsewhere")
    ap.add_argument("--exclude", action="append", default=[], help="WORKLOAD=why (kept, not counted)")
    ap.add_argument("--gpu-noise", action="store_true",
                    help="band the GPU's own spread between processes (measured on --truth-runs) "
                         "as bytes beside the share (the bundled file's rule since session 29, "
                         "with --need-brackets: alone, the need at the limit missed by more)")
    ap.add_argument("--need-brackets", action="append", default=[],
                    help="benchmarks/zoo/need_brackets.py output of the TUNING half: the need's "
                         "own error from the GPU's largest-batch brackets (band.py adds it to "
                         "peak reserved's share for the need, need_pct); "
                         "repeatable")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    pairs = [tuple(p.split(":", 1)) for p in args.pair]
    reported = json.load(open(args.reported)) if args.reported else []
    zoo = json.load(open(args.zoo_errors)) if args.zoo_errors else None
    if zoo:
        reported += from_zoo(zoo, os.path.relpath(args.zoo_errors))["rows"]
    # The need rows are not net of the GPU's spread (a bracket is one process
    # per size): with --gpu-noise the band adds the spread on top of them
    # as well as of peak reserved's share (band.py), which counts it twice,
    # on the safe side.
    for path in args.need_brackets:
        reported += need_rows(json.load(open(path)), os.path.relpath(path))
    excluded = dict(e.split("=", 1) for e in args.exclude)
    data = build(pairs, reported, excluded, spread_runs(args.truth_runs), args.gpu_noise)
    if zoo:
        # The zoo's rows must be net of the same spread the band adds back
        # (compare.py --gpu-noise-from a file with this figure), or of none.
        zn = zoo.get("gpu_noise") or {}
        mine = data.get("gpu_noise") or {}
        if any(zn.get(k, 0) != mine.get(k, 0) for k in ("allocated_bytes", "reserved_bytes")):
            sys.exit(f"{args.zoo_errors}: its rows are net of gpu_noise {zn or 'none'}, this band's "
                     f"is {mine or 'none'}: make it again with compare.py --gpu-noise-from")
        # The zoo's tuning half counts as checked under the torch it was
        # predicted with (compare.py records it).
        zt = zoo.get("predicted_with_torch")
        if zt:
            n = sum((c or {}).get("rows", 0) for c in (zoo.get("classes") or {}).values())
            note = f"{n} zoo tuning rows predicted under torch {zt} ({os.path.relpath(args.zoo_errors)})"
            cpu = data["cpu_torch_checked"]
            cpu[_minor(zt)] = "; ".join(x for x in (cpu.get(_minor(zt)), note) if x)
    text = json.dumps({k: v for k, v in data.items() if k not in ("rows", "excluded", "checked_ops")},
                      indent=1, sort_keys=True)[:-2]
    # One row, one op per line: readable diffs when the zoo regenerates it.
    for key in ("rows", "excluded"):
        body = ",\n".join("  " + json.dumps(r, sort_keys=True) for r in data[key])
        text += f',\n "{key}": [\n{body}\n ]'
    body = ",\n".join(f"  {json.dumps(op)}: {json.dumps(ws)}" for op, ws in data["checked_ops"].items())
    text += f',\n "checked_ops": {{\n{body}\n }}\n}}\n'
    json.loads(text)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}: {len(data['rows'])} rows, {len(data['excluded'])} excluded, "
          f"{len(data['checked_ops'])} checked ops", file=sys.stderr)


if __name__ == "__main__":
    main()
