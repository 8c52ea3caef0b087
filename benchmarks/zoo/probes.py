"""Where to probe next in a largest-batch search on the GPU, where every
probe is a fresh process (record.py). `got` maps a probed batch (int) to its
worker result (fits: ok is True, i.e. its steps ran without an OOM under
the fraction); an "errors" key marks a search whose probe crashed, which is
not probed again. Pure logic: no torch."""
from __future__ import annotations

from typing import Dict, List, Optional


def _probed(got: dict) -> Dict[int, bool]:
    return {b: r.get("ok") is True for b, r in got.items() if isinstance(b, int)}


def largest(got: dict) -> Optional[int]:
    """The batch below the smallest failing one, when that batch was probed
    and fits (0 when batch 1 fails); None while the search is open."""
    p = _probed(got)
    bad = [b for b, ok in p.items() if not ok]
    if not bad:
        return None
    first = min(bad)
    if first == 1:
        return 0
    return first - 1 if p.get(first - 1) is True else None


def non_monotone(got: dict) -> List[int]:
    """Batches that fit above a batch that did not (the GPU's own noise, or
    a step whose memory is not monotone in the batch)."""
    p = _probed(got)
    bad = [b for b, ok in p.items() if not ok]
    return sorted(b for b, ok in p.items() if ok and bad and b > min(bad))


def next_batches(got: dict, start: int) -> List[int]:
    """The batches to probe in the next round (empty: done, or given up)."""
    if got.get("errors"):
        return []
    p = _probed(got)
    if not p:
        return [start, start + 1]
    if largest(got) is not None:
        return []
    oks = [b for b, ok in p.items() if ok]
    bad = [b for b, ok in p.items() if not ok]
    span = max(p) - min(p) + 1
    if not bad:      # everything fits: step up, further each round
        hi = max(oks)
        return [hi + 1, hi + max(2, span)]
    if not oks:      # nothing fits: step down, further each round
        lo = min(bad)
        return sorted({max(1, lo - 1), max(1, lo - max(2, span))})
    # A gap between the largest fit below the first failure and that failure.
    lo, hi = max(b for b in oks if b < min(bad)) if any(b < min(bad) for b in oks) else 0, min(bad)
    if lo == 0:
        return sorted({max(1, hi - 1), max(1, hi - max(2, span))})
    inner = [b for b in range(lo + 1, hi) if b not in p]
    if len(inner) <= 3:
        return inner
    return [(lo + hi) // 2]
