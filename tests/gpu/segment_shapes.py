"""Segments compared across processes by shape: addresses differ from one
process to the next, so a segment is (pool id, type, size, its blocks'
sizes and states), and a snapshot the sorted list of those. Imported by the
GPU scripts (which run with tests/gpu as their directory)."""


def shapes(segments, pool_id_only_if_private=False):
    """The sorted shapes of `segments` (torch.cuda.memory_snapshot() or
    MemPool.snapshot() entries). With pool_id_only_if_private, a segment's
    pool shows only as True (a private pool) or False: CUDA graph trees
    number their pools by capture, which may differ between processes."""
    def pool(s):
        pid = list(s["segment_pool_id"])
        return pid != [0, 0] if pool_id_only_if_private else pid

    return sorted([pool(s), s["segment_type"], s["total_size"],
                   [[b["size"], b["state"]] for b in s["blocks"]]] for s in segments)


def pool_of(t):
    """The pool id ([0, 0]: the default pools) of the segment holding
    tensor `t`, or None if no segment of memory_snapshot() holds it."""
    import torch

    p = t.data_ptr()
    for s in torch.cuda.memory_snapshot():
        if s["address"] <= p < s["address"] + s["total_size"]:
            return list(s["segment_pool_id"])
    return None
