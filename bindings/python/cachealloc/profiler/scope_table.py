"""The per-scope table: torch.profiler's "CUDA Mem" / "Self CUDA Mem"
columns, next to the true peaks that those sums cannot give.

torch.profiler's memory columns are sums of allocation sizes (frees count
negative) per operator name: "CUDA Mem" includes the operators called
inside, "Self CUDA Mem" only the operator's own; a scope that frees what
its children allocated shows a negative self figure, and neither column
says how high memory went. This table gives those two sums per scope name
(Net, Self net) and beside them the peaks the allocator measured exactly:
how far a call pushed allocated memory above its start, in total and while
the scope itself was innermost, and the absolute peak. Its last line names
the scope the highest peak was reached in.

Units: bytes (binary-prefixed in the table).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from .results import ScopeResult, align_rows, format_bytes

LEGEND = """\
Net        = bytes allocated - freed while open, nested scopes included, summed over calls
             (torch.profiler's "CUDA Mem")
Self net   = the same counting only the scope's own code, nested scopes excluded
             (torch.profiler's "Self CUDA Mem"; negative when it frees what a nested scope allocated)
Peak+      = highest allocated level above the call's start, nested scopes included (max over calls)
Self peak+ = the same while no nested scope was open
Peak       = highest allocated level, absolute (max_memory_allocated() after a reset at the call's start)"""


def peak_location(results: Sequence[ScopeResult]) -> Optional[ScopeResult]:
    """The call the highest peak was reached in: among the calls whose own
    (self) peak equals the highest total peak, the deepest, earliest closed;
    None without results."""
    if not results:
        return None
    top = max(r.peak_allocated for r in results)
    inside = [r for r in results if r.self_peak_allocated == top]
    return max(inside, key=lambda r: r.depth) if inside else None


def format_scope_table(results: Sequence[ScopeResult]) -> str:
    """One row per scope name (order of first close): calls, the two
    torch.profiler-like sums and the exact peaks; then the legend."""
    groups: Dict[str, List[ScopeResult]] = {}
    for r in results:
        groups.setdefault(r.name, []).append(r)
    rows = [("Name", "Calls", "Net", "Self net", "Peak+", "Self peak+", "Peak")]
    for name, rs in groups.items():
        rows.append((name, str(len(rs)),
                     format_bytes(sum(r.net_change for r in rs)),
                     format_bytes(sum(r.self_bytes_allocated - r.self_bytes_freed for r in rs)),
                     format_bytes(max(r.peak_above_start for r in rs)),
                     format_bytes(max(r.self_peak_above_start for r in rs)),
                     format_bytes(max(r.peak_allocated for r in rs))))
    lines = align_rows(rows)
    where = peak_location(results)
    if where is not None:
        lines.append(f"Highest peak {format_bytes(where.peak_allocated)} reached in "
                     f"{where.name!r} (depth {where.depth}), in its own code")
    return "\n".join(lines + ["", LEGEND])
