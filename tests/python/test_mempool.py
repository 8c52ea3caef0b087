"""Memory pools (torch.cuda.MemPool's meaning) through the Python package
and the C API, on the simulated backend."""
import ctypes
import threading

import pytest

MiB = 1024 * 1024


def pool_of(ca, ptr):
    """segment_pool_id of the segment holding ptr."""
    for s in ca.snapshot()["segments"]:
        if s["address"] <= ptr < s["address"] + s["total_size"]:
            return s["segment_pool_id"]
    raise AssertionError(f"no segment holds {ptr:#x}")


def test_use_mem_pool_routes_the_threads_allocations_to_the_pools_own_segments(ca):
    outside = ca._malloc(512)
    pool = ca.MemPool()
    assert pool.id[0] == 0 and pool.id[1] >= 1
    assert pool.use_count() == 1
    with ca.use_mem_pool(pool):
        assert pool.use_count() == 2
        inside = ca._malloc(512)
        big = ca._malloc(3 * MiB)
    assert pool.use_count() == 1
    after = ca._malloc(512)
    assert pool_of(ca, outside) == (0, 0)
    assert pool_of(ca, inside) == pool.id and pool_of(ca, big) == pool.id
    assert pool_of(ca, after) == (0, 0)
    # The default segment had room, but the pool got a segment of its own.
    assert inside >= outside + 2 * MiB
    assert after == outside + 512
    assert sorted(s["address"] for s in pool.snapshot()) == sorted(
        s["address"] for s in ca.snapshot()["segments"] if s["segment_pool_id"] == pool.id)
    assert len(pool.snapshot()) == 2
    # Freed into the pool: a request outside it does not reuse the block.
    ca._free(inside)
    again = ca._malloc(512)
    assert pool_of(ca, again) == (0, 0)
    for p in (outside, big, after, again):
        ca._free(p)
    pool.release()


def test_other_threads_are_not_routed(ca):
    pool = ca.MemPool()
    got = {}
    with ca.use_mem_pool(pool):
        t = threading.Thread(target=lambda: got.setdefault("ptr", ca._malloc(512)))
        t.start()
        t.join()
        mine = ca._malloc(512)
    assert pool_of(ca, got["ptr"]) == (0, 0)
    assert pool_of(ca, mine) == pool.id
    ca._free(got["ptr"])
    ca._free(mine)
    pool.release()


def test_a_released_pool_gives_its_cached_segments_back_and_live_blocks_stay(ca):
    pool = ca.MemPool()
    with ca.use_mem_pool(pool):
        live = ca._malloc(512)
        cached = ca._malloc(30 * MiB)
    ca._free(cached)
    reserved = ca.memory_reserved()
    pool.release()  # as ~MemPool: release, then empty the pool's cache
    assert ca.memory_reserved() == reserved - 30 * MiB
    assert pool_of(ca, live) == pool.id  # still there, still usable
    ca._free(live)
    ca.empty_cache()  # the freeable pool's last segment goes, and the pool with it
    assert ca.memory_reserved() == 0
    assert ca.snapshot()["segments"] == []
    pool.release()  # idempotent


def test_no_split_hands_out_whole_blocks(ca):
    pool = ca.MemPool(no_split=True)
    with ca.use_mem_pool(pool):
        p = ca._malloc(512)
    assert ca.memory_allocated() == 2 * MiB
    ca._free(p)
    pool.release()


def test_use_on_oom_lets_a_default_request_take_a_cached_pool_block(ca):
    ca.set_per_process_memory_fraction(40 * MiB / (8 * 1024 * MiB))
    pool = ca.MemPool(use_on_oom=True)
    with ca.use_mem_pool(pool):
        ca._free(ca._malloc(8 * MiB))  # the pool caches a 20 MiB segment
    d = ca._malloc(8 * MiB)            # default: 20 MiB segment, 40 MiB reserved
    e = ca._malloc(16 * MiB)           # no room for a segment: the pool's block
    assert pool_of(ca, e) == pool.id
    ca._free(e)
    # Released, the pool gives its 20 MiB back: the same request now gets a
    # default segment of its own (20 + 16 <= 40).
    pool.release()
    f = ca._malloc(16 * MiB)
    assert pool_of(ca, f) == (0, 0)
    assert ca.memory_reserved() == 36 * MiB
    ca._free(f)
    ca._free(d)


def test_misuse_is_a_clear_error_that_changes_nothing(ca):
    pool = ca.MemPool()
    with ca.use_mem_pool(pool):
        with pytest.raises(ca.CacheallocError, match="already allocating to memory pool"):
            with ca.use_mem_pool(pool):
                pass
        assert pool.use_count() == 2
    assert pool.use_count() == 1
    with pytest.raises(TypeError, match="cachealloc.MemPool"):
        with ca.use_mem_pool(pool.id):
            pass
    pool.release()
    with pytest.raises(ValueError, match="was released"):
        with ca.use_mem_pool(pool):
            pass
    lib = ca._native.lib()
    assert lib.cachealloc_pool_release(0, 0, 0) == -1
    assert b"default pools" in lib.cachealloc_last_error()
    assert lib.cachealloc_pool_release(0, 0, 999) == -1
    assert b"no memory pool (0, 999) on device 0" in lib.cachealloc_last_error()
    assert lib.cachealloc_pool_end_allocate(0, 0, 999) == -1
    assert b"not allocating to memory pool" in lib.cachealloc_last_error()
    assert lib.cachealloc_pool_use_count(0, 0, 999, None) == -1
    assert lib.cachealloc_pool_create_or_incref(7, 0, 5) == -1  # one device
    assert ca.snapshot()["segments"] == []


def test_c_api_filter_routes_by_stream_and_its_user_data_is_released(ca):
    lib = ca._native.lib()
    FILTER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    released = []
    only_stream_7 = FILTER(lambda user, stream: 1 if stream == 7 else 0)
    on_release = RELEASE(lambda user: released.append(user))
    assert lib.cachealloc_pool_begin_allocate(
        0, 0, 41, ctypes.cast(only_stream_7, ctypes.c_void_p), ctypes.c_void_p(1234),
        ctypes.cast(on_release, ctypes.c_void_p)) == 0
    routed = ca._malloc(512, 0, 7)
    default = ca._malloc(512, 0, 0)
    assert pool_of(ca, routed) == (0, 41) and pool_of(ca, default) == (0, 0)
    assert released == []
    assert lib.cachealloc_pool_end_allocate(0, 0, 41) == 0
    assert released == [1234]  # the route's user data, released with the route
    # A refused begin (the default id) releases the user data too.
    assert lib.cachealloc_pool_begin_allocate(
        0, 0, 0, ctypes.cast(only_stream_7, ctypes.c_void_p), ctypes.c_void_p(99),
        ctypes.cast(on_release, ctypes.c_void_p)) == -1
    assert released == [1234, 99]
    ca._free(routed)
    ca._free(default)
    assert lib.cachealloc_pool_release(0, 0, 41) == 0
    assert lib.cachealloc_empty_cache_pool(-1, 0, 41) == 0
    assert all(s["segment_pool_id"] == (0, 0) for s in ca.snapshot()["segments"])


def test_snapshot_pickle_carries_pool_ids_as_int_tuples(ca):
    import pickle

    pool = ca.MemPool()
    with ca.use_mem_pool(pool):
        p = ca._malloc(512)
    segs = pickle.loads(ca.snapshot_bytes())["segments"]
    assert [s["segment_pool_id"] for s in segs] == [pool.id]
    assert all(type(x) is int for x in segs[0]["segment_pool_id"])
    ca._free(p)
    pool.release()
