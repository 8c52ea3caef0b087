"""Will it fit at one size, answered from a recording by replaying it on
cachealloc's engine (the `cachealloc` tool through cachealloc.lab):
predicted memory_stats peaks per native config, the smallest memory each
needs (exact min-memory search), and the advisor's best settings
(lab.advise: native's config space searched by replay) against what the
allocator can get on the target GPU, each with its error band (band.py)
and a verdict. The largest size that fits: largest.py.
"""
from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Optional

from ... import lab
from ..gpus import Gpu
from . import advisor, band
from .budget import DEFAULT_TIMEOUT, Budget
from .record import Session, record

NATIVE_CONFIGS = {"classic": "", "expandable": "expandable_segments:True"}
# Where the replay puts a segment (cudaMalloc's address): top down, as the
# CUDA driver mostly does. Best fit breaks ties among equal-size free blocks
# by address, so the order of segment addresses can move classic's peaks.
# Chosen on the zoo's tuning half (docs/prediction.md, "Segment placement"):
# top down made 8 more of its 39 rows exact and fixed the Llama with
# checkpointing (reserved -13.4 % to exact); first fit was the lab's default.
PLACEMENT = "top-down"
# Neither rule is the driver's (it skips ranges other users of the driver
# take): on checkpointed steps with many equal-size blocks the two differ by
# up to 13 % of classic's peak reserved, and the GPU sided with either. So
# every answer is also replayed with the other rule, and the difference
# widens the band (band.py, "segment placement").
ALT_PLACEMENT = "first-fit"
# Nor is the GPU's order always one of the two: validation's RegNet-Y-1.6GF
# classic b64, every convolution measured, reserved 2,926 MiB on the H100;
# its own GPU history replays to 2,926 with the driver's addresses and to
# 2,834 top down or first fit (docs/prediction.md, "A random order of
# segments"). So classic is replayed under SHUFFLED_SEEDS seeded random
# orders too, and the band reaches the lowest and highest figure of all the
# orders. Expandable segments reserve address ranges, not segments, so no
# order moves them (checked on the zoo's recordings). Sixteen seeds: on the
# zoo's 56 classic recordings (benchmarks/predict/placement_shuffle_trial.py)
# eight left out figures sixteen reach on 3 rows' peak reserved (hf ViT-B
# with checkpointing b64: 2,598 MiB with 8, 2,564 with 16, the GPU 2,574)
# and 5 rows' need (up to 5.4 %: the Llama with checkpointing b4); the
# search per order costs one replay of the step per bisection probe once the
# trace is read (min-memory --also-placement), a fraction of a second.
SHUFFLED_SEEDS = 16


def shuffled_placements() -> list:
    return [f"shuffled:{seed}" for seed in range(1, SHUFFLED_SEEDS + 1)]


def _shuffled_range(trace, confs) -> dict:
    """{conf: {"peak_reserved" | "min_memory": [lowest, highest]}} over the
    shuffled orders, for the classic confs among `confs` (bytes). One
    min-memory search per order (it gives the unlimited peak reserved too),
    in two processes that read the trace once each, side by side (2 cores).
    Peak allocated is left to first fit's figure: an order moves it only
    where a block too small to split is handed out whole (a few MiB on the
    zoo)."""
    classic = [c for c in confs if "expandable_segments:true" not in c.replace(" ", "").lower()]
    if not classic:
        return {}
    orders = shuffled_placements()
    halves = [orders[:len(orders) // 2], orders[len(orders) // 2:]]

    def one(half):
        return lab.min_memory_rows(trace, classic, placement=half[0], also_placements=half[1:])

    with ThreadPoolExecutor(2) as pool:
        rows = [r for part in pool.map(one, [h for h in halves if h]) for r in part]
    out = {}
    for conf in classic:
        mine = [r for r in rows if r["conf"] == conf]
        figures = {"peak_reserved": [r["peak_reserved_unlimited"] for r in mine],
                   "min_memory": [r["min_memory"] for r in mine if r.get("min_memory") is not None]}
        out[conf] = {q: [min(v), max(v)] for q, v in figures.items() if v}
    return out


def measure(trace, limit: int, upper=None) -> dict:
    """Per native config: predicted peaks (no limit), the minimum memory,
    and the replay at `limit`: it fits when no request the step needs OOMs
    and reserved stays within the limit (min_memory.h's rule). A cuDNN
    workspace that OOMs there is a fallback, not an OOM (trace_writer.py):
    "fallbacks" counts them, "fallback_skips" the later calls of those
    convolutions, which ran the fallback plan and asked for no workspace.
    Fits is judged at the limit itself, not as min_memory <= limit: with
    fallbacks, a run that fits in less memory need not fit in more (a
    workspace that now succeeds can grow the cache). "placement_alt": the
    peaks and the minimum with segments placed by ALT_PLACEMENT (the band's
    segment-placement spread); "placement_shuffled" (classic only): the
    lowest and highest peak reserved and minimum under SHUFFLED_SEEDS random
    orders. "workspace_upper" (with `upper`, the trace
    with the missing convolutions' bounded workspaces where they ran,
    device/workspace_upper.py): its peaks and minimum, the band's high side
    for those workspaces."""
    confs = list(NATIVE_CONFIGS.values())
    rows = lab.compare(trace, confs, placement=PLACEMENT)
    mins = lab.min_memory(trace, confs, placement=PLACEMENT)
    at_limit = lab.compare(trace, confs, memory_limit=limit, placement=PLACEMENT)
    alt_rows = lab.compare(trace, confs, placement=ALT_PLACEMENT)
    alt_mins = lab.min_memory(trace, confs, placement=ALT_PLACEMENT)
    shuffled = _shuffled_range(trace, confs)
    out = {}
    for (name, conf), row, lim, alt in zip(NATIVE_CONFIGS.items(), rows, at_limit, alt_rows):
        out[name] = {"conf": conf, "peak_allocated": row["peak_allocated"],
                     "peak_reserved": row["peak_reserved"], "min_memory": mins[conf],
                     "fits": lim["ooms"] == 0 and lim["peak_reserved"] <= limit,
                     "fallbacks": lim["fallbacks"], "fallback_skips": lim["fallback_skips"],
                     "placement_alt": {"peak_allocated": alt["peak_allocated"],
                                       "peak_reserved": alt["peak_reserved"],
                                       "min_memory": alt_mins[conf]}}
        if conf in shuffled:
            out[name]["placement_shuffled"] = dict(shuffled[conf], seeds=SHUFFLED_SEEDS)
    if upper:
        up_rows = lab.compare(upper, confs, placement=PLACEMENT)
        up_mins = lab.min_memory(upper, confs, placement=PLACEMENT)
        for (name, conf), row in zip(NATIVE_CONFIGS.items(), up_rows):
            out[name]["workspace_upper"] = {"peak_allocated": row["peak_allocated"],
                                            "peak_reserved": row["peak_reserved"],
                                            "min_memory": up_mins[conf]}
    return out


def mode_of(summaries) -> dict:
    """Which fake-device mode the recordings ran in ("cpu-init", "fake", or
    both when a search fell back part-way), and why it fell back."""
    modes = sorted({s.get("mode", "fake") for s in summaries})
    notes = [s["mode_note"] for s in summaries if s.get("mode_note")]
    return {"mode": "+".join(modes) if modes else None, "mode_note": notes[0] if notes else None}


def fits(target, gpu: Gpu, *, memory_fraction=None, steps=3, size=None, batch_arg=None,
         batch_env=None, workdir=None, advise=True, no_optimizer_step=False,
         tuning: Optional[str] = None, mode="cpu-init", timeout=DEFAULT_TIMEOUT) -> dict:
    """The answer at one size. "verdict" (fits / does_not_fit /
    too_close_to_call) weighs each candidate's need against the limit with
    its band (band.py); "fits" is verdict == "fits"; "predicted_fits" is the
    prediction without the band (some config, or the advisor's line, fits).
    mode: "cpu-init" (CPU-side code runs for real, falling back to "fake"
    when host memory is short) or "fake" (every tensor fake). timeout:
    seconds for the whole prediction (None or 0: no limit); past it
    PredictionRefused with failure kind "timeout"."""
    t0 = time.perf_counter()
    budget = Budget(timeout)
    limit = gpu.usable(memory_fraction)
    rec = record(target, gpu, steps=steps, size=size, batch_arg=batch_arg, batch_env=batch_env,
                 workdir=workdir, no_optimizer_step=no_optimizer_step, mode=mode,
                 timeout=budget.left())
    t_rec = time.perf_counter() - t0
    budget.check("after the step was recorded, before its replay")
    configs = measure(rec.trace, limit, rec.summary.get("workspace_upper_trace"))
    data = band.load(tuning)
    bands = _judge(rec.summary, gpu, configs, limit, data)
    answer = {"gpu": gpu.name, "limit": limit, "memory_fraction": memory_fraction,
              "context_bytes_assumed": gpu.context_bytes, "total_memory": gpu.total_memory,
              "size": size, "steps": rec.summary["steps"], "steps_requested": steps,
              "no_optimizer_step": no_optimizer_step,
              "trace": str(rec.trace),
              "configs": configs, "recording": rec.summary,
              "modelled": rec.summary["modelled"] + fallback_lines(rec.summary, {
                  name: (size, c) for name, c in configs.items()}),
              "cudnn_fallbacks": {name: {"fallbacks": c["fallbacks"],
                                         "fallback_skips": c["fallback_skips"]}
                                  for name, c in configs.items()},
              "record_seconds": t_rec}
    answer.update(_facts(rec.summary, bands, data))
    best = None
    if advise:
        budget.check("after the replays, before the advisor's search")
        adv = lab.advise(rec.trace, memory_limit=limit,
                         device_memory=gpu.total_memory if memory_fraction else None,
                         placement=PLACEMENT)
        best_row = adv["configs"][0] if adv.get("configs") else None
        best = {"line": adv["recommendation"], "min_memory": best_row["min_memory"] if best_row else None,
                "headline": adv["headline"], "reason": adv.get("reason"),
                "configs": sorted(adv["configs"], key=lambda r: (
                    r["min_memory"] is None, r["min_memory"] or 0, r["line"]))}
        below, above = band.need_spreads(configs)
        best["band"] = band.spread(band.spread(
            band.widen(best["min_memory"], bands["need_pct"], bands["items"], "need",
                       bands.get("need_noise", 0)),
            below), above)
        best["verdict"] = band.judge(best["min_memory"], best["min_memory"] is not None and
                                     best["min_memory"] <= limit, best["band"], limit)
        best["why"] = advisor.why(best, best_row, adv, configs)
    answer["best"] = best
    answer["predicted_fits"] = (any(c["fits"] for c in configs.values()) or
                                (best is not None and best["min_memory"] is not None and
                                 best["min_memory"] <= limit))
    answer["physical_fits"] = max(c["peak_allocated"] for c in configs.values()) <= limit
    verdicts = [c["verdict"] for c in configs.values()] + ([best["verdict"]] if best else [])
    answer["verdict"] = band.combine(verdicts)
    answer["fits"] = answer["verdict"] == "fits"
    if answer["fits"]:
        ok = [c["conf"] for c in configs.values() if c["verdict"] == "fits"]
        answer["settings"] = best["line"] if best and best["verdict"] == "fits" else ok[0]
    elif answer["predicted_fits"]:     # too close to call: the line that fits without the band
        ok = [c["conf"] for c in configs.values() if c["fits"]]
        answer["settings"] = (best["line"] if best and best["min_memory"] is not None
                              and best["min_memory"] <= limit else ok[0])
    else:
        answer["settings"] = None
    answer["seconds"] = time.perf_counter() - t0
    return answer


def _judge(summary: dict, gpu: Gpu, configs: Dict[str, dict], limit: int, data: dict) -> dict:
    """Bands every config's figures (band.bands) and gives each its verdict
    at the limit; returns the bands less their per-config part."""
    b = band.bands(summary, gpu, configs, data)
    for name, c in configs.items():
        c["band"] = b["configs"][name]
        c["verdict"] = band.judge(c["min_memory"], c["fits"], c["band"]["min_memory"], limit)
    return {k: v for k, v in b.items() if k != "configs"}


def _facts(summary: dict, bands: dict, data: dict) -> dict:
    """What every answer says of its recording besides the figures: the
    band, the ops' coverage, the torch versions, the mode that ran (and why
    it fell back to all-fake, mode_note)."""
    return {"band": bands, "step_class": bands["class"],
            "coverage": band.coverage(summary, data),
            "torch_versions": band.torch_versions(summary, data),
            **mode_of([summary])}


def fallback_lines(summary: dict, at: dict) -> list:
    """The 'modelled' line on cuDNN plan fallbacks under the limit. at:
    {config name: (size or None, measure()'s row)}; none when the recording
    had no cuDNN workspace."""
    if not (summary.get("cudnn") or {}).get("workspaces"):
        return []
    parts = [f"{name}{'' if size is None else f' (size {size})'} {c['fallbacks']} "
             f"(+{c['fallback_skips']} later call(s) without)" for name, (size, c) in at.items()
             if c is not None]
    return ["cuDNN plan fallbacks under the limit: " + ", ".join(parts) + ": a workspace "
            "request that OOMs (the allocator's OOM path runs, as on the GPU) does not fail the "
            "step; torch's cuDNN path tries the next plan, assumed to need no workspace, and "
            "keeps it for that convolution's later calls"]
