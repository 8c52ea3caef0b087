"""Allocator call sequences of two runs, and why they differ.

A run's history (action, size, address per entry, as run_workload.py
--sequence-out writes it) says both what the program asked for (alloc and
free_requested entries, with sizes) and what the allocator decided (which
block, when to reserve a segment). Two fresh processes of the same
deterministic workload ask for the same things, but CUDA's driver does not
always place segments at the same relative addresses; best fit breaks ties
by address and merges only neighbours, so a different placement can lead
both native PyTorch and cachealloc to pick a different block, and the
accumulated split counters then differ. Measured on the H100 host
(benchmarks/call_order.py): native against native, 3 of 12 transformer runs
made different choices.

`explain(a, b)` separates the cases: the programs asked differently; the
driver placed segments differently before the allocators first chose
differently (not the allocator's doing); or the same requests on the same
placement led to different choices (an allocator difference: a bug).
"""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

Entry = Tuple[str, int, int]  # action, size (bytes), address

# What the program asks for; everything else is the allocator's doing.
REQUESTS = ("alloc", "free_requested")


def read(path) -> List[Entry]:
    """Entries of a --sequence-out file ('action size address' lines)."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 3:
                raise ValueError(f"{path}:{n}: expected 'action size address', got {line!r}")
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def canonical(entries: Sequence[Entry]) -> List[str]:
    """Addresses differ between processes, so each is replaced by the order
    of its first appearance: equal lines mean the same calls landing on the
    same blocks."""
    ids = {}
    return [f"{a} {s} @{ids.setdefault(addr, len(ids))}" for a, s, addr in entries]


def requests(entries: Sequence[Entry]) -> List[Tuple[str, int]]:
    """What the program asked for, in order (sizes, no addresses)."""
    return [(a, s) for a, s, _ in entries if a in REQUESTS]


def placement(entries: Sequence[Entry], end: int) -> List[int]:
    """Where the driver put each segment reserved before entry `end`,
    relative to the first one (bytes)."""
    segs = [addr for a, _, addr in entries[:end] if a == "segment_alloc"]
    return [s - segs[0] for s in segs] if segs else []


def first_difference(a: Sequence, b: Sequence) -> Optional[int]:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class Explanation:
    # "same": identical calls and choices; "requests": the programs asked
    # differently; "placement": the driver placed segments differently before
    # the first different choice; "allocator": same requests, same placement,
    # different choice.
    verdict: str
    index: Optional[int] = None  # first differing entry of the full sequences

    def __str__(self):
        where = "" if self.index is None else f" (first differing entry: {self.index})"
        return {
            "same": "identical call sequences",
            "requests": "the two programs made different requests" + where,
            "placement": "the driver placed segments differently before the allocators' "
                         "first different choice" + where,
            "allocator": "same requests on the same segment placement, different choice" + where,
        }[self.verdict]


def explain(a: Sequence[Entry], b: Sequence[Entry]) -> Explanation:
    i = first_difference(canonical(a), canonical(b))
    if i is None:
        return Explanation("same")
    if requests(a) != requests(b):
        return Explanation("requests", i)
    # Choices up to entry i were equal; a segment reserved at i itself (one
    # run reserves, the other does not) is a choice, so placement counts
    # segments before it.
    if placement(a, i) != placement(b, i):
        return Explanation("placement", i)
    return Explanation("allocator", i)
