"""The two searches of the strand driver, free of processes and GPUs: each
asks a `probe` callback about several sizes at once (the driver runs those
probes side by side, one fresh process each) and narrows a bracket.

  physical(): the largest size whose peak ALLOCATED fits a limit. Probes
    return the peak allocated in bytes (None: over the probe's own cap), so
    the search interpolates (peak allocated grows about linearly with the
    size) and needs 2-4 rounds where bisection needs 8-10.
  largest(): the largest size that runs (no OOM) under an allocator and a
    limit, at or below the physical answer (no allocator runs a size whose
    peak allocated is over the limit). Probes return True or False; the
    physical answer is tried first, since most allocators reach it.

Sizes are multiples of `grain` (a workload's unit step). Both stop when the
bracket is within `rel_res` of the answer (and at least one grain), or when
`stop()` says time is up; the result says which (`converged`). A probe that
could not run at all (crashed, timed out) returns "error" and counts as not
fitting, so that a search always ends; one that was not started (out of
time) returns "skipped" and counts as nothing.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Sequence

ERROR = "error"
SKIP = "skipped"  # the probe was not run (out of time): no information


@dataclasses.dataclass
class Result:
    value: Optional[int]            # the largest size found to fit (None: not even the smallest)
    fails_at: Optional[int]         # the smallest size found not to fit (None: none found)
    converged: bool                 # bracket within the resolution
    probes: List[tuple] = dataclasses.field(default_factory=list)  # (size, outcome) in order
    note: str = ""

    def as_dict(self) -> dict:
        return {"value": self.value, "fails_at": self.fails_at, "converged": self.converged,
                "probes": [list(p) for p in self.probes], "note": self.note}


def _tolerance(good_k: int, rel_res: float) -> int:
    return max(1, int(math.floor(rel_res * good_k)))


def _bracket(points: Dict[int, bool]):
    """(largest fitting k below the smallest failing k, smallest failing k);
    a fit above a failure (noise) is ignored."""
    bad = min((k for k, ok in points.items() if not ok), default=None)
    good = max((k for k, ok in points.items() if ok and (bad is None or k < bad)), default=None)
    return good, bad


def physical(probe: Callable[[Sequence[int]], list], start: int, grain: int, limit: int, *,
             rel_res: float = 0.005, max_rounds: int = 8, width: int = 3,
             stop: Callable[[], bool] = lambda: False) -> Result:
    """Largest size (a multiple of grain) whose peak allocated <= limit.
    probe(sizes) -> [peak allocated bytes | None (over its cap) | ERROR]."""
    peaks: Dict[int, float] = {}   # k -> bytes (inf: over the cap or failed)
    log: List[tuple] = []

    def ask(ks):
        ks = sorted({max(1, int(k)) for k in ks} - set(peaks))[:width]
        if not ks:
            return
        for k, r in zip(ks, probe([k * grain for k in ks])):
            log.append((k * grain, r))
            if r != SKIP:
                peaks[k] = math.inf if r is None or r == ERROR else float(r)

    def fit(ka, kb):
        """Size where the line through two points reaches the limit."""
        pa, pb = peaks[ka], peaks[kb]
        if ka == kb or not math.isfinite(pa) or not math.isfinite(pb) or pb <= pa:
            return None
        return ka + (limit - pa) * (kb - ka) / (pb - pa)

    k0 = max(1, start // grain)
    ask([max(1, k0 // 2), k0])
    for _ in range(max_rounds):
        good, bad = _bracket({k: p <= limit for k, p in peaks.items()})
        finite = sorted(k for k, p in peaks.items() if math.isfinite(p))
        if good is not None and bad is not None and bad - good <= _tolerance(good, rel_res):
            break
        if stop():
            break
        if good is None and bad is None:
            break  # nothing measured (out of time)
        if good is None:
            if bad == 1:
                break  # even the smallest size is over the limit
            est = fit(finite[0], finite[1]) if len(finite) >= 2 else None
            nxt = [bad // 2, bad // 4]
            if est is not None and 1 <= est < bad:
                nxt = [int(est), max(1, int(est * 0.9))]
            ask(nxt)
            continue
        if bad is None:  # all fit: extrapolate, at most 8x per round
            est = fit(finite[-2], finite[-1]) if len(finite) >= 2 else None
            top = max(finite)
            if est is None or est <= top:
                ask([top * 2, top * 4])
            else:
                e = min(int(est), top * 8)
                ask([e, e + _tolerance(e, rel_res), min(top * 8, int(e * 1.1) + 1)])
            continue
        # Interpolate between the bracket's ends; probe the estimate, one
        # resolution step above it (to prove it), and the midpoint (progress
        # even where the line is off).
        est = fit(good, bad) if math.isfinite(peaks[bad]) else None
        if est is None:
            below = [k for k in finite if k < good]
            est = fit(below[-1], good) if below else None
        mid = (good + bad) // 2
        tol = _tolerance(good, rel_res)
        nxt = [mid]
        if est is not None and good < est < bad:
            e = int(est)
            nxt = [e, e + tol, mid]
        ask([k for k in nxt if good < k < bad] or [mid])
    good, bad = _bracket({k: p <= limit for k, p in peaks.items()})
    conv = good is not None and bad is not None and bad - good <= _tolerance(good, rel_res)
    if good is None and bad == 1:
        conv = True
    return Result(None if good is None else good * grain, None if bad is None else bad * grain,
                  conv, log)


def largest(probe: Callable[[Sequence[int]], list], hi: int, grain: int, *,
            rel_res: float = 0.005, width: int = 3, max_rounds: int = 8,
            stop: Callable[[], bool] = lambda: False) -> Result:
    """Largest size in [grain, hi] (multiples of grain) for which
    probe([size]) -> [True]. hi is tried first; below it, `width` sizes per
    round: first 95 %, 85 % and 60 % of hi (allocators that strand memory
    usually lose a few percent), then evenly inside the bracket."""
    points: Dict[int, bool] = {}
    log: List[tuple] = []

    def ask(ks):
        ks = sorted({max(1, int(k)) for k in ks} - set(points))[:width]
        for k, r in zip(ks, probe([k * grain for k in ks])):
            log.append((k * grain, r))
            if r != SKIP:
                points[k] = r is True

    khi = max(1, hi // grain)
    ask([khi])
    if khi not in points:
        return Result(None, None, False, log, "not run: out of time")
    if points[khi]:
        return Result(khi * grain, None, True, log, "reaches the bound")
    first = True
    for _ in range(max_rounds):
        good, bad = _bracket(points)
        if good is not None and bad - good <= _tolerance(good, rel_res):
            break
        if bad == 1 or stop():
            break
        lo = good or 0
        if first and good is None:
            nxt = [int(khi * f) for f in (0.95, 0.85, 0.6)]
        else:
            nxt = [lo + (bad - lo) * j // (width + 1) for j in range(1, width + 1)]
        first = False
        ask([k for k in nxt if lo < k < bad] or [(lo + bad) // 2])
    good, bad = _bracket(points)
    conv = (good is not None and bad - good <= _tolerance(good, rel_res)) or (good is None and bad == 1)
    return Result(None if good is None else good * grain, bad * grain, conv, log)
