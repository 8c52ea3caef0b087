"""cachealloc: a caching CUDA memory allocator for PyTorch, with PyTorch's
native allocation behaviour and its memory API given back.

    import cachealloc
    cachealloc.install()            # before any CUDA memory is allocated
    ...                             # your PyTorch code, unchanged
    print(cachealloc.memory_summary())
    cachealloc.dump_snapshot("snap.pickle")   # open in pytorch.org/memory_viz

Or with no code change: `cachealloc run -- python train.py`, or
CACHEALLOC_AUTO=1 in the environment (autoinstall.py).

All sizes are in bytes. Devices may be given as None (current device), an
int, "cuda:N" or a torch.device.

This file only gathers the public names. Where they live:
  lifecycle   init, install, mode, is_installed, backend, policy, policies
  stats       memory_stats and torch.cuda's other statistics functions
  history     record_memory_history, snapshot, dump_snapshot
  mempool     MemPool, use_mem_pool (plain mode)
  raw         _malloc, _free (the C entry points, for tests and tools)
  lab         what-if replays of recorded traces (the `cachealloc` tool)
  profiler    exact memory per scope, monitoring, leak checks
  torch_glue, glue_build   the PyTorch glue: found, or compiled for the running torch
  tool, cli, autoinstall   the command line and the no-code-change switch
  rank_files, snapshot_dir, distributed, report   many ranks: per-rank snapshots in a
                           run directory, gather_stats, `cachealloc report RUN_DIR`
"""
from ._native import CacheallocError, OutOfMemoryError, lib, library_path
from .history import dump_snapshot, record_memory_history, snapshot, snapshot_bytes
from .lifecycle import backend, init, install, is_installed, mode, policies, policy
from .mempool import MemPool, use_mem_pool
from .raw import _free, _malloc
from .stats import (empty_cache, max_memory_allocated, max_memory_reserved, memory_allocated,
                    memory_reserved, memory_stats, memory_summary, reset_accumulated_memory_stats,
                    reset_peak_memory_stats, set_per_process_memory_fraction)
from . import distributed, lab, profiler, rank_files  # noqa: E402  (subpackages last: they use the names above)

__version__ = "0.1.0"

__all__ = [
    "CacheallocError", "OutOfMemoryError", "install", "init", "mode", "is_installed", "backend",
    "policy", "policies",
    "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "empty_cache", "set_per_process_memory_fraction", "memory_summary",
    "record_memory_history", "snapshot", "snapshot_bytes", "dump_snapshot", "library_path", "lab",
    "profiler", "MemPool", "use_mem_pool", "distributed", "rank_files",
]
