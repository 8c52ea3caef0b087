"""What the profiler records: memory snapshots at scope boundaries, one
ScopeResult per closed scope, and the per-name summary.

Units: bytes for memory, seconds for times, timestamps in seconds since the
Unix epoch (time.time()).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional


@dataclass
class ScopeSnapshot:
    """The device's memory at one moment (a scope's open or close), as
    MemoryProfiler records it. (GPUMemoryProfiler's MemorySnapshot, in
    snapshot.py, is the usage guide's class with the guide's field names.)"""

    name: str                # the scope's name
    device: int
    timestamp: float         # seconds since the Unix epoch
    allocated: int           # bytes handed out (allocated_bytes.all.current; block sizes)
    reserved: int            # bytes held from the device (reserved_bytes.all.current)
    active: int              # allocated + freed blocks still waiting on streams (active_bytes)
    inactive: int            # free pieces of split segments (inactive_split_bytes)
    cpu_rss: Optional[int]   # this process's resident CPU memory; None if not tracked


@dataclass
class ScopeResult:
    """One closed scope. "Total" fields include child scopes; "self" fields
    count only the time this scope was the innermost open one. All exact
    when `exact` (cachealloc installed); see profiler_scopes otherwise."""

    name: str
    id: int                        # order of opening, from 1, per profiler
    parent_id: Optional[int]       # the enclosing scope of this profiler, if any
    depth: int                     # 0 = outermost scope open on the device
    device: int
    before: ScopeSnapshot          # at open (allocated/reserved: the scope's exact values)
    after: ScopeSnapshot           # at close
    peak_allocated: int            # highest allocated bytes while open (absolute)
    peak_above_start: int          # peak_allocated - before.allocated
    self_peak_allocated: int       # highest allocated while innermost (absolute)
    self_peak_above_start: int     # self_peak_allocated - before.allocated
    peak_reserved: int             # highest reserved bytes while open
    self_peak_reserved: int
    bytes_allocated: int           # block bytes handed out while open
    bytes_freed: int               # block bytes freed while open (also of older blocks)
    self_bytes_allocated: int
    self_bytes_freed: int
    allocations: int               # blocks handed out while open
    frees: int                     # blocks freed while open
    self_allocations: int
    self_frees: int
    net_change: int                # after.allocated - before.allocated
    tensors_created: Optional[int]  # track_tensors: allocator blocks handed out (see profiler)
    tensors_deleted: Optional[int]  # track_tensors: allocator blocks freed
    duration_s: float              # wall time of the scope (perf_counter)
    exact: bool                    # numbers from cachealloc's engine (True) or peak resets
    exception: Optional[str] = None  # repr of the exception that left the scope, if any
    stack: Optional[List[str]] = None  # where the scope was opened (collect_stack_traces)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class ScopeSummary:
    """All calls of one scope name."""

    name: str
    calls: int
    exceptions: int                # calls that raised
    total_time_s: float
    avg_time_s: float
    avg_bytes_allocated: float     # bytes handed out per call
    avg_net_change: float          # bytes left allocated per call
    max_peak_allocated: int        # highest absolute peak of any call
    max_peak_above_start: int      # largest rise above a call's start
    max_self_peak_above_start: int


def summarize(results: Iterable[ScopeResult]) -> Dict[str, ScopeSummary]:
    """Per-name aggregates, names in order of first close."""
    groups: Dict[str, List[ScopeResult]] = {}
    for r in results:
        groups.setdefault(r.name, []).append(r)
    out = {}
    for name, rs in groups.items():
        n = len(rs)
        total = sum(r.duration_s for r in rs)
        out[name] = ScopeSummary(
            name=name, calls=n, exceptions=sum(r.exception is not None for r in rs),
            total_time_s=total, avg_time_s=total / n,
            avg_bytes_allocated=sum(r.bytes_allocated for r in rs) / n,
            avg_net_change=sum(r.net_change for r in rs) / n,
            max_peak_allocated=max(r.peak_allocated for r in rs),
            max_peak_above_start=max(r.peak_above_start for r in rs),
            max_self_peak_above_start=max(r.self_peak_above_start for r in rs))
    return out


def format_bytes(n: float) -> str:
    """1536 -> '1.50 KiB' (binary units, sign kept)."""
    v, units = abs(float(n)), ["B", "KiB", "MiB", "GiB", "TiB"]
    i = 0
    while v >= 1024 and i < len(units) - 1:
        v /= 1024
        i += 1
    text = f"{v:.0f} {units[i]}" if i == 0 else f"{v:.2f} {units[i]}"
    return "-" + text if n < 0 else text


def align_rows(rows: List[tuple]) -> List[str]:
    """Text lines of a table whose first row is its header: the first
    column left-aligned, the others right-aligned, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for k, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join(cells))
        if k == 0:
            lines.append("-" * len(lines[0]))
    return lines


def format_table(results: Iterable[ScopeResult]) -> str:
    """A readable table of results (close order), indented by depth."""
    rows = [("scope", "time ms", "peak", "peak+", "self peak+", "allocated", "freed", "net")]
    for r in results:
        rows.append(("  " * r.depth + r.name + (" !" if r.exception else ""),
                     f"{r.duration_s * 1e3:.2f}", format_bytes(r.peak_allocated),
                     format_bytes(r.peak_above_start), format_bytes(r.self_peak_above_start),
                     format_bytes(r.bytes_allocated), format_bytes(r.bytes_freed),
                     format_bytes(r.net_change)))
    return "\n".join(align_rows(rows))
