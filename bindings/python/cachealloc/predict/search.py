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

from .. import lab
from .gpus import Gpu
from .record import Session, record

NATIVE_CONFIGS = {"classic": "", "expandable": "expandable_segments:True"}


def measure(trace, limit: int) -> dict:
    """Predicted peaks and minimum memory per native config."""
    rows = lab.compare(trace, list(NATIVE_CONFIGS.values()))
    mins = lab.min_memory(trace, list(NATIVE_CONFIGS.values()))
    out = {}
    for (name, conf), row in zip(NATIVE_CONFIGS.items(), rows):
        out[name] = {"conf": conf, "peak_allocated": row["peak_allocated"],
                     "peak_reserved": row["peak_reserved"], "min_memory": mins[conf],
                     "fits": mins[conf] <= limit}
    return out


def fits(target, gpu: Gpu, *, memory_fraction=None, steps=3, size=None, batch_arg=None,
         batch_env=None, workdir=None, advise=True) -> dict:
    t0 = time.perf_counter()
    limit = gpu.usable(memory_fraction)
    rec = record(target, gpu, steps=steps, size=size, batch_arg=batch_arg, batch_env=batch_env,
                 workdir=workdir)
    t_rec = time.perf_counter() - t0
    configs = measure(rec.trace, limit)
    answer = {"gpu": gpu.name, "limit": limit, "memory_fraction": memory_fraction,
              "context_bytes_assumed": gpu.context_bytes, "total_memory": gpu.total_memory,
              "size": size, "steps": rec.summary["steps"], "steps_requested": steps,
              "trace": str(rec.trace),
              "configs": configs, "recording": rec.summary, "modelled": rec.summary["modelled"],
              "record_seconds": t_rec}
    best = None
    if advise:
        adv = lab.advise(rec.trace, memory_limit=limit,
                         device_memory=gpu.total_memory if memory_fraction else None)
        best_row = adv["configs"][0] if adv.get("configs") else None
        best = {"line": adv["recommendation"], "min_memory": best_row["min_memory"] if best_row else None,
                "headline": adv["headline"], "configs": adv["configs"]}
    answer["best"] = best
    mins = [c["min_memory"] for c in configs.values()]
    if best and best["min_memory"] is not None:
        mins.append(best["min_memory"])
    answer["fits"] = min(mins) <= limit
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
            batch_arg=None, batch_env=None, workdir=None, progress: Optional[Progress] = None) -> dict:
    t0 = time.perf_counter()
    limit = gpu.usable(memory_fraction)
    probes: Dict[int, dict] = {}
    progress = progress or Progress(False)
    session = Session(target, gpu, steps=steps, batch_arg=batch_arg, batch_env=batch_env,
                      workdir=workdir)
    try:
        return _largest(session, probes, progress, gpu, limit, memory_fraction, start, max_size, t0)
    finally:
        session.close()


def _largest(session, probes, progress, gpu, limit, memory_fraction, start, max_size, t0):
    cudnn: Dict[int, dict] = {}     # size -> the recording's cuDNN workspace coverage
    modelled: list = []

    def probe(size: int) -> dict:
        if size not in probes:
            progress.update(len(probes) + 1, max(len(probes) + 2, 2 * len(probes).bit_length() + 4),
                            f"size={size}")
            rec = session.record(size)
            probes[size] = measure(rec.trace, limit)
            cudnn[size] = rec.summary.get("cudnn")
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
    return {"gpu": gpu.name, "limit": limit, "memory_fraction": memory_fraction,
            "context_bytes_assumed": gpu.context_bytes, "largest": answer,
            "settings": (NATIVE_CONFIGS["expandable"] if answer["expandable"] > answer["classic"]
                         else NATIVE_CONFIGS["classic"]),
            "largest_fitting": best_size,
            "probes": {str(s): m for s, m in sorted(probes.items())},
            "cudnn": {str(s): c for s, c in sorted(cudnn.items())}, "modelled": modelled,
            "seconds": time.perf_counter() - t0}
