"""Segment events for framework glue (cachealloc_set_segment_callback): what
the PyTorch glue hands to attachAllocatorTraceTracker's trackers, which
ProcessGroupNCCL's register_mem_pool uses to register a pool's new segments
with NCCL by the event's pool id. On the simulated backend, through the C
API, as the glue calls it."""
import ctypes

from test_foreign_pool import POOL, Foreign, end_route, routed

MiB = 1024 * 1024
EVENT_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_uint64,
                            ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)
NAMES = {0: "segment_alloc", 1: "segment_free", 7: "segment_map", 8: "segment_unmap"}


class Events:
    def __init__(self):
        self.seen = []
        self.fn = EVENT_FN(self._on)

    def _on(self, user, action, device, address, size, stream, first, second):
        self.seen.append((NAMES[action], device, address, size, (first, second)))

    def attach(self):
        from cachealloc._native import check, lib

        check(lib().cachealloc_set_segment_callback(self.fn, None))

    @staticmethod
    def detach():
        from cachealloc._native import check, lib

        check(lib().cachealloc_set_segment_callback(None, None))


def test_segments_of_a_pool_carry_its_id_and_the_default_pools_zero(ca):
    events = Events()
    events.attach()
    try:
        foreign = Foreign(64 * MiB)  # the pool's own allocator, as NCCL's ncclMemAlloc
        foreign.make_pool(ca)
        routed(ca)
        in_pool = ca._malloc(3 * MiB)
        end_route(ca)
        outside = ca._malloc(3 * MiB)
        assert events.seen == [("segment_alloc", 0, in_pool, 20 * MiB, POOL),
                               ("segment_alloc", 0, outside, 20 * MiB, (0, 0))]
        ca._free(in_pool)
        ca._free(outside)
        from cachealloc._native import check, lib

        check(lib().cachealloc_pool_release(0, *POOL))  # the MemPool object's use
        del events.seen[:]
        ca.empty_cache()
        assert sorted(events.seen) == sorted([("segment_free", 0, in_pool, 20 * MiB, POOL),
                                              ("segment_free", 0, outside, 20 * MiB, (0, 0))])
        # Detached: no more calls.
        events.detach()
        del events.seen[:]
        p = ca._malloc(3 * MiB)
        ca._free(p)
        ca.empty_cache()
        assert events.seen == []
    finally:
        events.detach()


def test_expandable_pages_are_map_and_unmap_events(ca):
    from cachealloc._native import check, lib

    events = Events()
    check(lib().cachealloc_set_allocator_settings(b"expandable_segments:True"))
    events.attach()
    try:
        p = ca._malloc(3 * MiB)
        assert [e[0] for e in events.seen] == ["segment_map"]
        assert events.seen[0][2] == p and events.seen[0][4] == (0, 0)
        ca._free(p)
        ca.empty_cache()
        assert [e[0] for e in events.seen] == ["segment_map", "segment_unmap"]
    finally:
        events.detach()
        check(lib().cachealloc_set_allocator_settings(b"expandable_segments:False"))
