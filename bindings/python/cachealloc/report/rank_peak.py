"""One rank's peak: how high it went, when, and which allocation sites held
the live blocks at that moment, from its snapshot's history.

Two linear passes over the device's trace (sizes first, to find the peak
event; then the live set up to it), so the cost is O(events) and memory
O(live blocks). Blocks allocated before the history began are known only
by their total (the snapshot's final state minus the trace's net change)
and are reported as one group.
"""
from __future__ import annotations

import gzip
import io
import json
import pathlib
import pickle  # UnpicklingError
import zlib
from typing import Dict, List, Optional

from .. import plain_pickle, rank_files
from ..library_frames import is_library_file, prefixes_of

BEFORE_HISTORY = "(allocated before the history began)"
NO_FRAMES = "(no frames recorded)"
SITES_KEPT = 10  # per rank, largest first: bounds the page's size


class SnapshotError(ValueError):
    """A snapshot that cannot be read: the message names the file."""


def load_snapshot(path) -> dict:
    """A snapshot pickle (.pickle, or .pickle.gz as torch's tools save them),
    plain data only; SnapshotError names the file when it is not one."""
    path = pathlib.Path(path)
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as f:
            data = plain_pickle.load(io.BufferedReader(f))
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, zlib.error) as e:
        raise SnapshotError(f"{path}: not a readable snapshot pickle: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list) \
            or not isinstance(data.get("device_traces"), list):
        raise SnapshotError(f"{path}: not a memory snapshot (no segments and device_traces)")
    return data


def allocation_site(frames, prefixes=None) -> str:
    """The frame that names where the program allocated: the first Python
    frame outside torch and cachealloc (library_frames: under `prefixes`,
    the snapshot's recorded install folders, else under site-packages),
    else the first frame."""
    if not frames:
        return NO_FRAMES
    first = None
    for f in frames:
        if not isinstance(f, dict):
            continue
        name = str(f.get("filename", "?"))
        where = f"{name}:{f.get('line', '?')} {f.get('name', '?')}"
        if first is None:
            first = where
        if name.endswith(".py") and not is_library_file(name, prefixes):
            return where
    return first or NO_FRAMES


_ALLOC_DELTA = {"alloc": 1, "free_completed": -1}
_RESERVED_DELTA = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


def _device_state(segments, device: int):
    allocated = reserved = 0
    for s in segments:
        if s.get("device") != device:
            continue
        reserved += int(s.get("total_size", 0))
        allocated += int(s.get("allocated_size", 0))
    return allocated, reserved


def analyze_trace(snapshot: dict, device: int) -> dict:
    """The peak of `device` in `snapshot`: peaks (bytes), the event index
    and time (µs) of the allocated peak, and the live bytes at it by site."""
    traces = snapshot["device_traces"]
    events = traces[device] if device < len(traces) and isinstance(traces[device], list) else []
    final_alloc, final_reserved = _device_state(snapshot["segments"], device)
    prefixes = prefixes_of(snapshot)
    net_alloc = net_reserved = 0
    for e in events:
        a = e.get("action")
        if a in _ALLOC_DELTA:
            net_alloc += _ALLOC_DELTA[a] * int(e.get("size", 0))
        elif a in _RESERVED_DELTA:
            net_reserved += _RESERVED_DELTA[a] * int(e.get("size", 0))
    alloc = start_alloc = final_alloc - net_alloc
    reserved = final_reserved - net_reserved
    peak_alloc, peak_index, peak_reserved = alloc, -1, reserved
    for i, e in enumerate(events):  # pass 1: where the allocated peak is
        a = e.get("action")
        if a in _ALLOC_DELTA:
            alloc += _ALLOC_DELTA[a] * int(e.get("size", 0))
            if alloc > peak_alloc:
                peak_alloc, peak_index = alloc, i
        elif a in _RESERVED_DELTA:
            reserved += _RESERVED_DELTA[a] * int(e.get("size", 0))
            peak_reserved = max(peak_reserved, reserved)
    live: Dict[int, tuple] = {}  # pass 2: the live set at the peak
    before = start_alloc
    for e in events[:peak_index + 1]:
        a = e.get("action")
        if a == "alloc":
            live[int(e.get("addr", 0))] = (int(e.get("size", 0)),
                                           allocation_site(e.get("frames"), prefixes))
        elif a == "free_completed":
            if live.pop(int(e.get("addr", 0)), None) is None:
                before -= int(e.get("size", 0))  # a block from before the history
    sites: Dict[str, List[int]] = {}
    for size, site in live.values():
        entry = sites.setdefault(site, [0, 0])
        entry[0] += size
        entry[1] += 1
    if before > 0:
        sites[BEFORE_HISTORY] = [before, 0]
    ranked = sorted(sites.items(), key=lambda kv: -kv[1][0])
    peak_event = events[peak_index] if peak_index >= 0 else None
    return {
        "events": len(events),
        "trace_peak_allocated": peak_alloc,
        "trace_peak_reserved": peak_reserved,
        "peak_event": peak_index,
        "peak_time_us": int(peak_event.get("time_us", 0)) if peak_event else None,
        "sites_at_peak": [{"site": s, "bytes": b, "blocks": n} for s, (b, n) in ranked[:SITES_KEPT]],
        "other_sites_bytes": sum(b for _, (b, _) in ranked[SITES_KEPT:]),
    }


def _busiest_device(snapshot: dict) -> int:
    traces = snapshot["device_traces"]
    counts = [len(t) if isinstance(t, list) else 0 for t in traces]
    seg_devices = {s.get("device") for s in snapshot["segments"]}
    if counts and max(counts) > 0:
        return counts.index(max(counts))
    return min((d for d in seg_devices if isinstance(d, int)), default=0)


def analyze_rank(rank: int, folder) -> dict:
    """The summary `cachealloc report` shows for one rank folder: peaks from
    memory_stats.json when the rank wrote one (exact, whole run), else from
    the history; the peak's time and live blocks from the end-of-run (else
    latest) snapshot. Raises SnapshotError for an unreadable file."""
    folder = pathlib.Path(folder)
    snapshots = rank_files.rank_snapshots(folder)
    out: dict = {"rank": rank, "snapshot": str(snapshots[0]) if snapshots else None}
    trace: Optional[dict] = None
    device = 0
    if snapshots:
        snap = load_snapshot(snapshots[0])
        device = _busiest_device(snap)
        trace = analyze_trace(snap, device)
        del snap
    stats = _read_stats(folder / rank_files.STATS_FILE, device)
    out["device"] = device
    if stats is not None:
        out["peak_reserved"] = stats["reserved_bytes.all.peak"]
        out["peak_allocated"] = stats["allocated_bytes.all.peak"]
        out["source"] = "memory_stats"
    elif trace is not None:
        out["peak_reserved"] = trace["trace_peak_reserved"]
        out["peak_allocated"] = trace["trace_peak_allocated"]
        out["source"] = "history"
    else:
        raise SnapshotError(f"{folder}: neither a snapshot nor {rank_files.STATS_FILE}")
    if trace is not None:
        out.update(trace)
    return out


def _read_stats(path: pathlib.Path, device: int) -> Optional[dict]:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        by_device = data["devices"]
        stats = by_device.get(str(device)) or next(iter(by_device.values()))
        int(stats["reserved_bytes.all.peak"]), int(stats["allocated_bytes.all.peak"])
        return stats
    except (OSError, ValueError, KeyError, TypeError, StopIteration, AttributeError) as e:
        raise SnapshotError(f"{path}: not a memory_stats file: {e}") from None
