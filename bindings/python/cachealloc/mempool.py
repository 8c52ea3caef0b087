"""Memory pools: torch.cuda.MemPool and torch.cuda.use_mem_pool, for
cachealloc's plain mode (no PyTorch glue) and its simulated backend.

With the PyTorch glue installed (cachealloc.mode() == "torch-extension"),
use torch.cuda.MemPool and torch.cuda.use_mem_pool themselves: the glue
gives them cachealloc's pools. This module refuses that mode, because its
pool ids would share a number space with PyTorch's own MemPool ids.

Semantics are native's (allocator/engine/pools/private_pool.h): allocations made by the
calling thread inside use_mem_pool(pool) come from the pool's own
segments, frees return blocks to the pool they came from, and the pool's
cached segments go back to the device once the pool is released (its
MemPool object closed or collected) and empty_cache runs (release() runs
it for this pool, as native's destructor does).
"""
from __future__ import annotations

import contextlib
import ctypes
import itertools
from typing import Any, Iterator, Optional

from ._native import check, lib
from .devices import device_index
from .history import snapshot
from .lifecycle import mode

__all__ = ["MemPool", "use_mem_pool"]

# User-created pool ids are (0, n), n = 1, 2, ... as PyTorch numbers them.
_next_id = itertools.count(1)


def _refuse_torch_extension_mode() -> None:
    if mode() == "torch-extension":
        raise RuntimeError("cachealloc.MemPool is for plain mode; with the PyTorch glue "
                           "installed use torch.cuda.MemPool and torch.cuda.use_mem_pool")


class MemPool:
    """A private memory pool on one device (torch.cuda.MemPool's meaning).

    use_on_oom: when a request outside any pool cannot get a new segment,
    it may take a cached block of this pool. no_split: the pool hands out
    whole blocks, never split. Call release() (or use `with MemPool() as
    p:`) to give the pool up; garbage collection does it too.
    """

    def __init__(self, device: Any = None, use_on_oom: bool = False, no_split: bool = False):
        _refuse_torch_extension_mode()
        self._device = device_index(device)
        self._id = (0, next(_next_id))
        self._released = False
        check(lib().cachealloc_pool_create_or_incref(self._device, *self._id))
        try:
            if use_on_oom:
                check(lib().cachealloc_pool_set_use_on_oom(self._device, *self._id, 1))
            if no_split:
                check(lib().cachealloc_pool_set_no_split(self._device, *self._id))
        except BaseException:
            self.release()
            raise

    @property
    def id(self) -> tuple:
        """The pool's id, (0, n), as torch.cuda.MemPool.id."""
        return self._id

    @property
    def device(self) -> int:
        return self._device

    def use_count(self) -> int:
        """Holders of the pool: this object, plus one per open use_mem_pool."""
        count = ctypes.c_int()
        check(lib().cachealloc_pool_use_count(self._device, *self._id, ctypes.byref(count)))
        return count.value

    def snapshot(self) -> list:
        """This pool's segments, in torch.cuda.MemPool.snapshot()'s form."""
        return [s for s in snapshot()["segments"]
                if s["device"] == self._device and tuple(s["segment_pool_id"]) == self._id]

    def release(self) -> None:
        """Gives the pool up, as native's ~MemPool: no more use_on_oom, one
        use less, and its cached segments go back to the device if nothing
        else holds it. Blocks still in use stay valid. Idempotent."""
        if self._released:
            return
        self._released = True
        l = lib()
        check(l.cachealloc_pool_set_use_on_oom(self._device, *self._id, 0))
        check(l.cachealloc_pool_release(self._device, *self._id))
        check(l.cachealloc_empty_cache_pool(-1, *self._id))

    def __enter__(self) -> "MemPool":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown, library re-initialised: nothing to give back
            pass

    def __repr__(self) -> str:
        state = "released" if self._released else f"use_count={self.use_count()}"
        return f"cachealloc.MemPool(id={self._id}, device={self._device}, {state})"


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None) -> Iterator[None]:
    """Routes the calling thread's allocations on the device to `pool`
    while the block runs (torch.cuda.use_mem_pool's meaning). Raises
    ValueError for a released pool; allocations from other threads are not
    affected."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"pool must be a cachealloc.MemPool, not {type(pool).__name__}")
    if pool._released:
        raise ValueError(f"memory pool {pool.id} was released")
    index = device_index(device)  # None: the current device, as torch
    l = lib()
    # A NULL filter routes the calling thread's allocations (C API).
    check(l.cachealloc_pool_begin_allocate(index, *pool.id, None, None, None))
    try:
        yield
    finally:
        check(l.cachealloc_pool_end_allocate(index, *pool.id))
        check(l.cachealloc_pool_release(index, *pool.id))
