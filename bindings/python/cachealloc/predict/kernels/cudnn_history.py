"""cuDNN workspace table entries read off a GPU's recorded history.

A recorded history (torch.cuda.memory._record_memory_history on the GPU)
has every request but not which op made it. The fake run of the same step
has the ops: with no table, its request stream is the GPU's minus the
convolution workspaces (checked for ResNet-50 and ViT on the H200), and it
notes where each convolution's requests start and end (Recording.conv_calls).
Walking both streams side by side, each GPU allocation that the fake run
lacks and that is freed by the very next request is a workspace; it belongs
to the convolution whose span holds that point of the fake stream, at the
position "number of that op's own allocations before it" (cudnn_workspace.py's
table format).

Anything else that differs stops the walk with the request number and both
sides' requests: the entries are then not trusted.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from ..request_stream import requests

ALLOC, FREE, EMPTY = 0, 1, 2   # recorder's event kinds


class AlignmentError(ValueError):
    """The two streams differ by more than workspaces (where, and how)."""


def gpu_requests(trace) -> List[tuple]:
    """A snapshot's device trace as ("a", addr, size) / ("f", addr)."""
    return [("a", e["addr"], e["size"]) if e["action"] == "alloc" else ("f", e["addr"])
            for e in requests(trace)]


def _owner(conv_calls, j) -> int:
    """Index of the convolution span holding fake position j (strictly inside
    first, else one that ends at j), or -1."""
    end_at = -1
    for n, (_, start, end) in enumerate(conv_calls):
        if start <= j < end:
            return n
        if end == j:
            end_at = n
    return end_at


def workspaces_by_call(gpu, fake_events, conv_calls) -> Tuple[Dict[int, list], int]:
    """({convolution call index: [[position, bytes], ...]}, GPU requests
    matched). gpu: gpu_requests(); fake_events: Recording.events (recorded
    with no table); conv_calls: Recording.conv_calls."""
    found: Dict[int, list] = {}
    addr_to_id = {}
    i = j = 0
    while i < len(gpu):
        g = gpu[i]
        f = fake_events[j] if j < len(fake_events) else None
        if f is not None and f[0] == EMPTY:      # the cache emptied: no request on the GPU side
            j += 1
            continue
        if f is not None and g[0] == "a" and f[0] == ALLOC and g[2] == f[2]:
            addr_to_id[g[1]] = f[1]
            i, j = i + 1, j + 1
            continue
        if f is not None and g[0] == "f" and f[0] == FREE and addr_to_id.get(g[1]) == f[1]:
            del addr_to_id[g[1]]
            i, j = i + 1, j + 1
            continue
        nxt = gpu[i + 1] if i + 1 < len(gpu) else None
        if g[0] == "a" and nxt is not None and nxt[0] == "f" and nxt[1] == g[1]:
            n = _owner(conv_calls, j)
            if n < 0:
                raise AlignmentError(f"GPU request {i}: {g[2]} bytes allocated and freed at once "
                                     f"outside any convolution (fake request {j}: {f})")
            start = conv_calls[n][1]
            position = sum(1 for e in fake_events[start:j] if e[0] == ALLOC)
            found.setdefault(n, []).append([position, g[2]])
            i += 2
            continue
        raise AlignmentError(f"GPU request {i} {g} differs from fake request {j} {f}")
    return found, i


def entries(conv_calls, found: Dict[int, list]) -> dict:
    """Table entries (cudnn_workspace.py's format) from per-call workspaces:
    per key the steady state (calls after the first), the first call's when
    it differed, unstable when later calls disagreed."""
    calls: Dict[str, list] = {}
    for n, (key, _, _) in enumerate(conv_calls):
        calls.setdefault(key, []).append(found.get(n, []))
    out = {}
    for key, results in calls.items():
        steady = results[1:] or results
        e = {"workspaces": steady[-1], "calls": len(results)}
        if results[0] != steady[-1]:
            e["first"] = results[0]
        if any(r != steady[-1] for r in steady):
            e["unstable"] = True
        out[key] = e
    return out
