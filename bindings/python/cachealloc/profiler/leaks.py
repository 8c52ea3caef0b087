"""Leak check: memory that a scope's calls leave allocated, and that keeps
growing across its calls.

A call *retains* memory when it leaves more allocated than it found (net
change > 0) and the device has not given that back by the time the scope's
next call starts (or, for the last call, by the time find_leaks runs):

    retained_i = min(net_change_i, start_{i+1} - start_i)

where start is the allocated level at a call's open and start_{n+1} the
level now. A scope name is flagged when its most recent `min_calls` (or
more) calls each retained memory. An ordinary training loop is not a leak:
its "forward" scope leaves activations behind (net change > 0 every call),
but "backward" frees them, so every forward starts at the same level and
retains nothing.

When allocation history is recorded, the allocation sites of the blocks
behind the growth are named: blocks still allocated now whose allocation
(the last "alloc" entry at their address in the snapshot's device trace)
happened during one of the flagged calls, grouped by the first stack frame
outside cachealloc and torch. A complete history that finds no such block
clears the name: nothing from those calls is still allocated.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..library_frames import is_library_file, library_prefixes
from .results import ScopeResult

NOTHING_STILL_ALLOCATED = "no block allocated in the flagged calls is still allocated"
HISTORY_HINT = ("allocation sites need allocation history: create the profiler with "
                "collect_stack_traces=True or call cachealloc.record_memory_history() first")


@dataclass
class LeakSite:
    filename: str
    line: int
    function: str
    bytes: int                 # block bytes still allocated from this site
    blocks: int
    frames: List[str] = field(default_factory=list)  # one block's stack, innermost first


@dataclass
class LeakReport:
    name: str                  # the scope name
    calls: int                 # most recent consecutive calls that retained memory
    growth_bytes: int          # sum of what they retained (bytes)
    net_changes: List[int]     # per call, oldest first: after - before (bytes)
    retained: List[int]        # per call, oldest first: see the module's docstring
    sites: List[LeakSite]      # largest first; empty without history
    note: str = ""             # why sites may be missing or incomplete


def growing_scopes(results: Iterable[ScopeResult], min_calls: int,
                   allocated_now: int) -> Dict[str, List[Tuple[ScopeResult, int]]]:
    """name -> its trailing run of (call, retained bytes) with retained > 0,
    for runs of at least min_calls. Results are taken in close order;
    allocated_now is the device's allocated bytes now."""
    calls: Dict[str, List[ScopeResult]] = {}
    for r in results:
        calls.setdefault(r.name, []).append(r)
    out = {}
    for name, rs in calls.items():
        starts = [r.before.allocated for r in rs[1:]] + [allocated_now]
        run: List[Tuple[ScopeResult, int]] = []
        for r, next_start in zip(rs, starts):
            retained = min(r.net_change, next_start - r.before.allocated)
            if retained > 0:
                run.append((r, retained))
            else:
                run.clear()
        if len(run) >= min_calls:
            out[name] = run
    return out


def _frame_text(f: dict) -> str:
    return f"{f.get('filename', '?')}:{f.get('line', 0)} in {f.get('name', '?')}"


def allocation_sites(snapshot: dict, device: int, windows: Sequence[Tuple[float, float]],
                     slack_us: int, history_entries: Optional[int]) -> Tuple[List[LeakSite], str]:
    """Sites of blocks on `device` still allocated in `snapshot` whose last
    allocation fell in one of `windows` (seconds since the epoch, widened by
    slack_us microseconds for the trace clock). history_entries: the
    capacity of the history ring (max_entries) when known, else None.
    Returns (sites, note)."""
    traces = snapshot.get("device_traces") or []
    trace = traces[device] if device < len(traces) else []
    if not trace:
        return [], HISTORY_HINT
    last_alloc: Dict[int, dict] = {}
    for entry in trace:
        if entry.get("action") == "alloc":
            last_alloc[entry["addr"]] = entry
    bounds = [(int(t0 * 1e6) - slack_us, int(t1 * 1e6) + slack_us) for t0, t1 in windows]
    skip = library_prefixes()
    sites: Dict[Tuple[str, int, str], LeakSite] = {}
    for seg in snapshot.get("segments", []):
        if seg.get("device", 0) != device:
            continue
        for block in seg.get("blocks", []):
            if block.get("state") != "active_allocated":
                continue
            entry = last_alloc.get(block["address"])
            if entry is None or not any(lo <= entry["time_us"] <= hi for lo, hi in bounds):
                continue
            frames = block.get("frames") or entry.get("frames") or []
            top = next((f for f in frames if not is_library_file(f.get("filename", ""), skip)),
                       frames[0] if frames else {"filename": "?", "line": 0, "name": "?"})
            key = (top.get("filename", "?"), top.get("line", 0), top.get("name", "?"))
            site = sites.get(key)
            if site is None:
                site = sites[key] = LeakSite(*key, bytes=0, blocks=0,
                                             frames=[_frame_text(f) for f in frames])
            site.bytes += block["size"]
            site.blocks += 1
    # The ring drops its oldest entry only when an event arrives while it
    # holds history_entries of them, so entries are gone only from a full
    # ring; they matter only if the oldest survivor is younger than the
    # first flagged call's start. A history that merely begins inside the
    # flagged calls (the first call's own allocations) dropped nothing.
    note = ""
    begins_late = bool(bounds) and trace[0].get("time_us", 0) > min(lo for lo, _ in bounds)
    if begins_late and history_entries is not None and len(trace) >= history_entries:
        note = "the history ring dropped entries from the flagged calls; sites may be incomplete"
    elif begins_late and history_entries is None:
        note = ("the history begins after the first flagged call started (recorded late, or "
                "its ring dropped entries); sites may be incomplete")
    elif not sites:
        note = NOTHING_STILL_ALLOCATED
    return sorted(sites.values(), key=lambda s: -s.bytes), note
