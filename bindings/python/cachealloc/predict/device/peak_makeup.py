"""What the recorded step's peak allocated memory is made of: the bytes
live at the request where the live total peaks, by kind.

Kinds, by allocation id (ids are never reused, so a tag given after the
fact, at an optimizer step, names the allocation for its whole life):
- parameters, gradients, optimizer state: the storages an optimizer held
  at any of its steps (accounting.StepAccounting tags them);
- workspaces: cuBLAS, cuBLASLt and cuDNN workspaces (recorder.Recording.
  workspaces), which no op output shows;
- activations: everything else (autograd's saved tensors, temporaries,
  kernels' scratch buffers).

Sizes are the requests rounded as native rounds them (at least 512 bytes,
a multiple of 512), which is what the allocated-bytes statistic counts
unless a block is kept whole; so the total here matches the replay's peak
allocated to within those kept remainders, and the peak is found on these
rounded sizes. Units: bytes; "event" is the index into the recording's
events (ALLOC and FREE alike), which is also the replay's request index.
"""
from __future__ import annotations

from typing import Dict, Iterable, Tuple

KINDS = ("parameters", "gradients", "optimizer_state", "activations", "workspaces")
_ROUND = 512  # native's kMinBlockSize: every request is a multiple of it


def rounded(nbytes: int) -> int:
    return max(_ROUND, -(-nbytes // _ROUND) * _ROUND)


def at_peak(events: Iterable[Tuple[int, int, int, int]], tags: Dict[int, str]) -> dict:
    """{"event": index of the request at which the live total first
    reached its peak, "total": bytes, and one entry per KINDS}. tags: {id:
    kind} for ids not "activations". One pass; the running sums per kind
    are copied at each new maximum."""
    from .recorder import ALLOC, EMPTY  # here: the answer layer imports KINDS without torch
    live: Dict[int, Tuple[str, int]] = {}
    sums = dict.fromkeys(KINDS, 0)
    total = best_total = 0
    best = dict(sums)
    best_event = None
    for i, (kind, aid, size, _stream) in enumerate(events):
        if kind == EMPTY:
            continue
        if kind == ALLOC:
            what, n = tags.get(aid, "activations"), rounded(size)
            live[aid] = (what, n)
            sums[what] += n
            total += n
            if total > best_total:
                best_total, best, best_event = total, dict(sums), i
        else:
            what, n = live.pop(aid, (None, 0))
            if what is not None:
                sums[what] -= n
                total -= n
    return {"event": best_event, "total": best_total, **best}
