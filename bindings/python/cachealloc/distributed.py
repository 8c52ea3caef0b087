"""Every rank's memory picture, over the program's own process group.

    import cachealloc.distributed as cd
    per_rank = cd.gather_stats()     # on rank 0: a list, one dict per rank
    cd.write_snapshot()              # this rank's snapshot into the run dir

gather_stats uses torch.distributed's object collective (gather_object) on
the process group the program already set up: cachealloc adds no transport
of its own. Snapshots are not gathered: each rank writes its own file
(snapshot_dir.py), and `cachealloc report RUN_DIR` reads them all.
"""
from __future__ import annotations

from typing import Any, List, Optional

from .snapshot_dir import write_snapshot
from .stats import memory_stats

__all__ = ["gather_stats", "write_snapshot"]


def gather_stats(device: Any = None, group=None, dst: int = 0) -> Optional[List[dict]]:
    """Collects every rank's memory_stats(device) on global rank `dst`.

    Collective: every rank of `group` (default: the world) must call it.
    Returns, on `dst`, a list indexed by group rank of
    {"rank": global rank, "device": device index, "stats": {key: int}}; on
    every other rank, None. device: as memory_stats (None: the current
    device). Raises RuntimeError when torch.distributed is unavailable or
    no process group is initialized; the collective's own errors pass
    through (a rank that does not call it makes the others wait, as any
    torch.distributed collective does).
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("cachealloc.distributed.gather_stats(): no torch.distributed process "
                           "group is initialized (call torch.distributed.init_process_group first)")
    from .devices import device_index

    index = device_index(device)
    mine = {"rank": dist.get_rank(), "device": index, "stats": dict(memory_stats(index))}
    me = dist.get_rank()
    out = [None] * dist.get_world_size(group) if me == dst else None
    dist.gather_object(mine, out, dst=dst, group=group)
    return out
