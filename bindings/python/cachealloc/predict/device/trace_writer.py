"""Writes a recording as a snapshot pickle: the format that
torch.cuda.memory._dump_snapshot writes and memory_viz, `cachealloc
compare`, `min-memory` and `advise` read. Only device_traces is filled: the
program's requests (alloc, then free_requested + free_completed for a free),
no segments (the prediction has no allocator state of its own: the replay
decides it). Addresses are synthetic and unique per live allocation; sizes
are the bytes asked for (native's trace records the unrounded size too).

An allocation the step survives the failure of (a cuDNN workspace: torch
tries the next plan) carries "fallible_group": its group number, a key
native never writes; the replay (lab/request_stream.h, FallibleRequest)
takes its OOM as a fallback and makes no more requests of that group.
The cache emptied (recorder EMPTY) is a "segment_free" of no segment.
"""
from __future__ import annotations

import gzip
import pickle

from .recorder import ALLOC, EMPTY

_ADDRESS_BASE = 0x7F0000000000
_ADDRESS_STEP = 1 << 20  # ids never reuse, so addresses never collide


def snapshot_dict(events, fallible=None) -> dict:
    """fallible: {allocation id: group number} (Recording.fallible)."""
    fallible = fallible or {}
    trace = []
    t = 0
    for kind, aid, size, stream in events:
        addr = _ADDRESS_BASE + aid * _ADDRESS_STEP
        t += 1
        if kind == ALLOC:
            entry = {"action": "alloc", "addr": addr, "size": size, "stream": stream,
                     "time_us": t, "frames": []}
            if aid in fallible:
                entry["fallible_group"] = fallible[aid]
            trace.append(entry)
        elif kind == EMPTY:
            # A segment release before the next request with no segment
            # reserved for it: the replay's extraction reads such a run as
            # empty_cache() (lab/request_stream.cc), as in native traces.
            trace.append({"action": "segment_free", "addr": 0, "size": 0, "stream": stream,
                          "time_us": t, "frames": []})
        else:
            trace.append({"action": "free_requested", "addr": addr, "size": 0, "stream": stream,
                          "time_us": t, "frames": []})
            trace.append({"action": "free_completed", "addr": addr, "size": 0, "stream": stream,
                          "time_us": t, "frames": []})
    return {"segments": [], "device_traces": [trace]}


def write(path, events, fallible=None) -> None:
    data = pickle.dumps(snapshot_dict(events, fallible), protocol=4)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb", compresslevel=1) as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)
