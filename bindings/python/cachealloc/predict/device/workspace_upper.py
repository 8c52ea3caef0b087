"""The step's trace with a bounded workspace where each convolution the
cuDNN table lacks ran: the band's high side for those workspaces.

Why: a missing workspace is bounded by its shape class (kernels/
workspace_bound.py), but adding every bound at the step's peak is far too
pessimistic: a convolution's workspace lives only inside its op (cuDNN's
heuristic path allocates it, runs the plan and frees it), and the big
convolutions mostly run far from the peak (a backward's first layers run
when the activations are nearly all freed). So the bound goes where the op
ran: after the op's own allocations (as torch's Conv_v8 orders them:
outputs, then the workspace), allocated and freed at once. Replayed
(answer/search.measure), the difference to the step's own trace bounds
what the missing workspaces add to peak allocated (which only grows with a
request's size); for the need band.py adds one segment of slack, since a
smaller real workspace can open a segment the bound did not, and reserved
keeps the summed rule.

Not fallible, unlike a measured workspace (trace_writer): an upper bound
must not fall back. cudnn.benchmark keys get the same bound for the plan
that runs (band.py uses the replay for their need only: their timing
workspace takes what is free, so their peaks stay unbounded).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from .recorder import ALLOC, FREE


def upper_events(events: List[tuple], conv_calls: List[list], missing: dict,
                 bound: Callable[[str], Optional[int]], first_id: int) -> Tuple[list, int]:
    """(events with the bounded workspaces inserted, how many were). Only
    keys in `missing` (the table lacked them); ids from first_id up (never
    used by the step). A key without a bound (None) makes the whole upper
    trace meaningless: returns ([], 0)."""
    at = {}                      # event index -> [(bytes, stream), ...] to insert before it
    for key, _start, end in conv_calls:
        if key not in missing or end is None:
            continue
        b = bound(key)
        if b is None:
            return [], 0
        if b <= 0:
            continue
        stream = events[end - 1][3] if end > 0 else 0
        at.setdefault(end, []).append((int(b), stream))
    if not at:
        return [], 0
    out, next_id, n = [], first_id, 0
    for i in range(len(events) + 1):
        for size, stream in at.get(i, ()):
            out.append((ALLOC, next_id, size, stream))
            out.append((FREE, next_id, 0, stream))
            next_id += 1
            n += 1
        if i < len(events):
            out.append(events[i])
    return out, n
