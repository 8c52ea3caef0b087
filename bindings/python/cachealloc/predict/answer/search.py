"""The questions, answered from recordings by replaying them on cachealloc's
engine (the `cachealloc` tool through cachealloc.lab):

- fits(): predicted memory_stats peaks per native config, the smallest
  memory each needs (exact min-memory search), and the advisor's best
  settings (lab.advise: native's config space searched by replay) against
  what the allocator can get on the target GPU.
- largest(): the largest size that fits, per native config, with the
  advisor's best line at that size, and the physical limit (largest size
  whose peak *allocated* bytes fit). Sizes are assumed to need monotonically
  more memory; the search doubles from `start` until nothing fits, then
  bisects, recording each probed size once.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Dict, Optional

from ... import lab
from ..gpus import Gpu
from .budget import DEFAULT_TIMEOUT, Budget
from .record import Session, record

NATIVE_CONFIGS = {"classic": "", "expandable": "expandable_segments:True"}


def measure(trace, limit: int) -> dict:
    """Per native config: predicted peaks (no limit), the minimum memory,
    and the replay at `limit`: it fits when no request the step needs OOMs
    and reserved stays within the limit (min_memory.h's rule). A cuDNN
    workspace that OOMs there is a fallback, not an OOM (trace_writer.py):
    "fallbacks" counts them, "fallback_skips" the later calls of those
    convolutions, which ran the fallback plan and asked for no workspace.
    Fits is judged at the limit itself, not as min_memory <= limit: with
    fallbacks, a run that fits in less memory need not fit in more (a
    workspace that now succeeds can grow the cache)."""
    confs = list(NATIVE_CONFIGS.values())
    rows = lab.compare(trace, confs)
    mins = lab.min_memory(trace, confs)
    at_limit = lab.compare(trace, confs, memory_limit=limit)
    out = {}
    for (name, conf), row, lim in zip(NATIVE_CONFIGS.items(), rows, at_limit):
        out[name] = {"conf": conf, "peak_allocated": row["peak_allocated"],
                     "peak_reserved": row["peak_reserved"], "min_memory": mins[conf],
                     "fits": lim["ooms"] == 0 and lim["peak_reserved"] <= limit,
                     "fallbacks": lim["fallbacks"], "fallback_skips": lim["fallback_skips"]}
    return out


def mode_of(summaries) -> dict:
    """Which fake-device mode the recordings ran in ("cpu-init", "fake", or
    both when a search fell back part-way), and why it fell back."""
    modes = sorted({s.get("mode", "fake") for s in summaries})
    notes = [s["mode_note"] for s in summaries if s.get("mode_note")]
    return {"mode": "+".join(modes) if modes else None, "mode_note": notes[0] if notes else None}


def fits(target, gpu: Gpu, *, memory_fraction=None, steps=3, size=None, batch_arg=None,
         batch_env=None, workdir=None, advise=True, mode="cpu-init",
         timeout=DEFAULT_TIMEOUT) -> dict:
    """mode: "cpu-init" (CPU-side code runs for real, falling back to "fake"
    when host memory is short) or "fake" (every tensor fake). timeout:
    seconds for the whole prediction (None or 0: no limit); past it
    PredictionRefused with failure kind "timeout"."""
    t0 = time.perf_counter()
    budget = Budget(timeout)
    limit = gpu.usable(memory_fraction)
    rec = record(target, gpu, steps=steps, size=size, batch_arg=batch_arg, batch_env=batch_env,
                 workdir=workdir, mode=mode, timeout=budget.left())
    t_rec = time.perf_counter() - t0
    budget.check("after the step was recorded, before its replay")
    configs = measure(rec.trace, limit)
    answer = {"gpu": gpu.name, "limit": limit, "memory_fraction": memory_fraction,
              "context_bytes_assumed": gpu.context_bytes, "total_memory": gpu.total_memory,
              "size": size, "steps": rec.summary["steps"], "steps_requested": steps,
              "trace": str(rec.trace),
              "configs": configs, "recording": rec.summary,
              "modelled": rec.summary["modelled"] + fallback_lines(rec.summary, {
                  name: (size, c) for name, c in configs.items()}),
              "cudnn_fallbacks": {name: {"fallbacks": c["fallbacks"],
                                         "fallback_skips": c["fallback_skips"]}
                                  for name, c in configs.items()},
              "record_seconds": t_rec, **mode_of([rec.summary])}
    best = None
    if advise:
        budget.check("after the replays, before the advisor's search")
        adv = lab.advise(rec.trace, memory_limit=limit,
                         device_memory=gpu.total_memory if memory_fraction else None)
        best_row = adv["configs"][0] if adv.get("configs") else None
        best = {"line": adv["recommendation"], "min_memory": best_row["min_memory"] if best_row else None,
                "headline": adv["headline"], "configs": adv["configs"]}
    answer["best"] = best
    answer["fits"] = (any(c["fits"] for c in configs.values()) or
                      (best is not None and best["min_memory"] is not None and
                       best["min_memory"] <= limit))
    answer["physical_fits"] = max(c["peak_allocated"] for c in configs.values()) <= limit
    if best and best["min_memory"] is not None and best["min_memory"] <= limit:
        answer["settings"] = best["line"]
    else:
        ok = [c["conf"] for c in configs.values() if c["fits"]]
        answer["settings"] = ok[0] if ok else None
    answer["seconds"] = time.perf_counter() - t0
    return answer


class Progress:
    """A one-line progress bar on stderr (only on a terminal, unless forced)."""

    def __init__(self, enabled: Optional[bool] = None, stream=sys.stderr):
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.t0 = time.perf_counter()

    def update(self, done: int, bound: int, text: str) -> None:
        if not self.enabled:
            return
        width = 24
        frac = min(1.0, done / max(bound, 1))
        bar = "#" * int(frac * width) + "." * (width - int(frac * width))
        self.stream.write(f"\r[{bar}] probe {done}/~{bound} {text} {time.perf_counter() - self.t0:5.1f}s ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")


def largest(target, gpu: Gpu, *, memory_fraction=None, steps=3, start=1, max_size=1 << 20,
            batch_arg=None, batch_env=None, workdir=None, progress: Optional[Progress] = None,
            mode="cpu-init", timeout=DEFAULT_TIMEOUT) -> dict:
    """mode and timeout as for fits(); timeout covers the whole search."""
    t0 = time.perf_counter()
    budget = Budget(timeout)
    limit = gpu.usable(memory_fraction)
    probes: Dict[int, dict] = {}
    progress = progress or Progress(False)
    session = Session(target, gpu, steps=steps, batch_arg=batch_arg, batch_env=batch_env,
                      workdir=workdir, mode=mode)
    try:
        return _largest(session, probes, progress, gpu, limit, memory_fraction, start, max_size,
                        t0, budget)
    finally:
        session.close()


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


def _largest(session, probes, progress, gpu, limit, memory_fraction, start, max_size, t0, budget):
    cudnn: Dict[int, dict] = {}     # size -> the recording's cuDNN workspace coverage
    modelled: list = []
    summaries: Dict[int, dict] = {}  # size -> the recording's summary

    def probe(size: int) -> dict:
        if size not in probes:
            progress.update(len(probes) + 1, max(len(probes) + 2, 2 * len(probes).bit_length() + 4),
                            f"size={size}")
            budget.check(f"before size {size} was recorded")
            rec = session.record(size, timeout=budget.left())
            budget.check(f"after size {size} was recorded, before its replay")
            probes[size] = measure(rec.trace, limit)
            cudnn[size] = rec.summary.get("cudnn")
            summaries[size] = rec.summary
            modelled[:] = rec.summary.get("modelled", [])
        return probes[size]

    criteria: Dict[str, Callable[[dict], bool]] = {
        "classic": lambda m: m["classic"]["fits"],
        "expandable": lambda m: m["expandable"]["fits"],
        "physical": lambda m: max(c["peak_allocated"] for c in m.values()) <= limit,
    }
    # Bracket: double until the loosest criterion (physical) fails.
    lo_ok, hi_bad = 0, None
    size = max(1, start)
    while size <= max_size:
        if criteria["physical"](probe(size)):
            lo_ok = size
            size *= 2
        else:
            hi_bad = size
            break
    if hi_bad is None:
        hi_bad = max_size + 1
    answer = {}
    for name, ok in criteria.items():
        lo, hi = 0, hi_bad
        for s in sorted(probes):
            if ok(probes[s]):
                lo = max(lo, s)
            else:
                hi = min(hi, s)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(probe(mid)):
                lo = mid
            else:
                hi = mid
        answer[name] = lo
    progress.close()
    best_size = max(answer["classic"], answer["expandable"])
    # Fallbacks at each config's largest fitting size (none fits: nothing to say).
    at = {name: (answer[name], probes[answer[name]][name] if answer[name] else None)
          for name in NATIVE_CONFIGS}
    if best_size:
        modelled = modelled + fallback_lines(summaries[best_size], at)
    return {"gpu": gpu.name, "limit": limit, "memory_fraction": memory_fraction,
            "context_bytes_assumed": gpu.context_bytes, "largest": answer,
            "settings": (NATIVE_CONFIGS["expandable"] if answer["expandable"] > answer["classic"]
                         else NATIVE_CONFIGS["classic"]),
            **mode_of(summaries.values()),
            "largest_fitting": best_size,
            "probes": {str(s): m for s, m in sorted(probes.items())},
            "cudnn": {str(s): c for s, c in sorted(cudnn.items())}, "modelled": modelled,
            "cudnn_fallbacks": {name: None if c is None else {
                "size": size, "fallbacks": c["fallbacks"], "fallback_skips": c["fallback_skips"]}
                for name, (size, c) in at.items()},
            "seconds": time.perf_counter() - t0}
