"""Why the advisor's line, when it needs more memory than another config in
the same answer (a native config, or another line the advisor ran).

The advisor (`cachealloc advise`, lab.advise) ranks configs by the
smallest memory without an OOM, then by OOMs under the limit, then, among
those within 1 % of the smallest memory, by the fewest device calls
(cudaMalloc/cudaFree, or cuMemMap/unmap under expandable segments). So
its first line may need a little more memory than another: the reader is
told which rule put it first, with the figures, on the same line.
"""
from __future__ import annotations

from typing import Optional


def _gib(n) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def _row(adv: dict, line: str) -> Optional[dict]:
    """The advisor's row for a line ('' is the defaults), by its labels."""
    label = line or "defaults"
    for r in adv.get("configs") or []:
        if r.get("line") == line or label in (r.get("labels") or []):
            return r
    return None


def _calls(r: dict) -> int:
    return (r.get("device_allocs") or 0) + (r.get("device_frees") or 0)


def why(best: dict, best_row: Optional[dict], adv: dict, configs: dict) -> Optional[str]:
    """None when no config of the answer needs less than the advisor's line;
    else the reason, naming the config that needs less."""
    need = best.get("min_memory")
    if need is None or best_row is None:
        return None
    others = [(c["min_memory"], c["conf"]) for c in configs.values() if c.get("min_memory") is not None]
    others += [(r["min_memory"], r["line"]) for r in adv.get("configs") or []
               if r is not best_row and r.get("min_memory") is not None]
    smaller = min(others, default=None, key=lambda o: o[0])
    if smaller is None or smaller[0] >= need:
        return None
    other = _row(adv, smaller[1])
    name = smaller[1] or "defaults"
    head = f"{name} needs less ({_gib(smaller[0])} vs {_gib(need)})"
    if other is not None and (other.get("ooms") or 0) > (best_row.get("ooms") or 0):
        return (f"{head} but OOMs {other['ooms']} time(s) under the limit (each an allocator "
                f"retry that frees the cache) where this line OOMs {best_row.get('ooms') or 0}")
    if other is not None and need <= smaller[0] * 1.01 and _calls(best_row) < _calls(other):
        return (f"{head}, but this line is within 1 % of it and makes fewer device calls "
                f"({_calls(best_row)} vs {_calls(other)} cudaMalloc/cudaFree or map/unmap), "
                "which cost time on every step that grows the cache")
    return f"{head}; the advisor ranks this line first: {adv.get('reason') or 'see cachealloc advise'}"
