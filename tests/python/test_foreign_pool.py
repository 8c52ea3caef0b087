"""A memory pool whose segments come from another allocator's C functions
(cachealloc_pool_create_with_allocator: PyTorch's MemPool(allocator=...)),
through the C API on the simulated backend. The foreign allocator here is
a Python bump allocator over an address range the simulated device never
uses; nothing is dereferenced."""
import ctypes

import pytest

MiB = 1024 * 1024
FOREIGN_BASE = 0x7E00_0000_0000
POOL = (0, 77)

ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                            ctypes.c_void_p)
FREE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_int)
RELEASE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Foreign:
    """Hands out [FOREIGN_BASE, FOREIGN_BASE + capacity) by bumping; counts
    what is live; refuses (NULL) when full."""

    def __init__(self, capacity):
        self.capacity, self.next, self.live, self.released = capacity, 0, {}, False
        self.calls = []
        self.alloc = ALLOC_FN(self._alloc)
        self.free = FREE_FN(self._free)
        self.release = RELEASE_FN(lambda user: setattr(self, "released", True))

    def _alloc(self, user, size, device, stream):
        self.calls.append(("alloc", size))
        if self.next + size > self.capacity:
            return None
        addr = FOREIGN_BASE + self.next
        self.next += size
        self.live[addr] = size
        return addr

    def _free(self, user, ptr, size, device):
        self.calls.append(("free", size))
        return 0 if self.live.pop(ptr, None) == size else -1

    def make_pool(self, ca, device=0):
        from cachealloc._native import check, lib

        check(lib().cachealloc_pool_create_with_allocator(
            device, *POOL, ctypes.cast(self.alloc, ctypes.c_void_p),
            ctypes.cast(self.free, ctypes.c_void_p), None,
            ctypes.cast(self.release, ctypes.c_void_p)))


def routed(ca):
    from cachealloc._native import check, lib

    check(lib().cachealloc_pool_begin_allocate(0, *POOL, None, None, None))


def end_route(ca):
    from cachealloc._native import check, lib

    check(lib().cachealloc_pool_end_allocate(0, *POOL))
    check(lib().cachealloc_pool_release(0, *POOL))


def test_pool_segments_come_from_its_allocator_and_go_back_when_released(ca):
    from cachealloc._native import check, lib

    foreign = Foreign(64 * MiB)
    foreign.make_pool(ca)
    routed(ca)
    small, large = ca._malloc(512), ca._malloc(3 * MiB)
    end_route(ca)
    assert foreign.calls == [("alloc", 2 * MiB), ("alloc", 20 * MiB)]
    assert (small, large) == (FOREIGN_BASE, FOREIGN_BASE + 2 * MiB)
    segments = [s for s in ca.snapshot()["segments"] if s["segment_pool_id"] == POOL]
    assert sorted(s["address"] for s in segments) == [FOREIGN_BASE, FOREIGN_BASE + 2 * MiB]
    assert ca.memory_stats()["num_device_alloc"] == 2
    ca._free(small)
    ca._free(large)
    check(lib().cachealloc_pool_release(0, *POOL))  # the MemPool object's use
    assert not foreign.released
    ca.empty_cache()
    assert foreign.live == {} and foreign.released
    assert ca.memory_stats()["reserved_bytes.all.current"] == 0


def test_a_refusal_of_the_pools_allocator_is_an_oom_in_that_pool_with_nothing_leaked(ca):
    from cachealloc._native import check, lib

    foreign = Foreign(22 * MiB)
    foreign.make_pool(ca)
    routed(ca)
    kept = ca._malloc(3 * MiB)  # 20 MiB segment
    with pytest.raises(ca.OutOfMemoryError):
        ca._malloc(18 * MiB)  # the allocator has 2 MiB left; the device 8 GiB
    stats = ca.memory_stats()
    assert stats["num_ooms"] == 1
    assert stats["segment.all.current"] == 1 and len(foreign.live) == 1
    small = ca._malloc(512)  # part way through: the next request still works
    end_route(ca)
    ca._free(small)
    ca._free(kept)
    check(lib().cachealloc_pool_release(0, *POOL))
    ca.empty_cache()
    assert foreign.live == {} and ca.memory_stats()["reserved_bytes.all.current"] == 0


def test_a_pool_that_exists_cannot_get_an_allocator(ca):
    from cachealloc._native import check, lib

    check(lib().cachealloc_pool_create_or_incref(0, *POOL))
    foreign = Foreign(64 * MiB)
    with pytest.raises(ca.CacheallocError, match="exists already"):
        foreign.make_pool(ca)
    assert foreign.released  # the call failed: its user data is let go at once
