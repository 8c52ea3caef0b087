"""A recorded device trace as the allocator's request stream: what it was
asked, in program order, without the addresses it answered with.

Two recordings of the same step (the GPU's history and the fake device's)
place blocks at different addresses, so they are compared by their
requests: ("alloc", bytes) and ("free", n), where n numbers the allocation
being freed, counting the stream's allocations from 0. Equal streams mean
equal sizes, order and pairing, which decide every peak the engine replays.

Only requests count: "alloc" and "free_requested" (the user's free, in
program order; "free_completed" is the allocator's, after stream events).
Invariant: in a whole trace every free names an earlier allocation; a
stream cut from `start` on gives n None for frees of blocks allocated
before it.
"""
from __future__ import annotations

import gzip
from typing import List, Optional, Tuple

REQUEST_ACTIONS = ("alloc", "free_requested")


def requests(trace: list) -> list:
    """The trace's request entries (alloc and free_requested), in order."""
    return [e for e in trace if e["action"] in REQUEST_ACTIONS]


def request_stream(trace: list, start: int = 0) -> List[Tuple[str, Optional[int]]]:
    """requests(trace)[start:] as ("alloc", bytes) / ("free", n): n is the
    0-based number of the freed block's allocation among the stream's
    allocations (None when it was allocated before `start`). `trace` may
    also be a list that requests() already filtered."""
    number, out, allocations = {}, [], 0
    for e in requests(trace)[start:]:
        if e["action"] == "alloc":
            number[e["addr"]] = allocations
            allocations += 1
            out.append(("alloc", e["size"]))
        else:
            out.append(("free", number.pop(e["addr"], None)))
    return out


def load_device_trace(path, device: int = 0) -> list:
    """Device `device`'s trace of a snapshot pickle (.gz or plain), read with
    the plain-data unpickler (never a loader that can run code)."""
    from cachealloc import plain_pickle
    with (gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")) as f:
        return plain_pickle.load(f)["device_traces"][device]
