"""torch.cuda.MemPool under cachealloc's PyTorch glue, compared with the
native allocator running the same unmodified script (mempool_script.py).
Under a plain CUDAPluggableAllocator, torch.cuda.MemPool() raises."""
import pytest

from native_vs_cachealloc import run_both


@pytest.fixture(scope="module")
def both():
    return run_both("mempool_script.py")


def test_mempool_routes_and_counts_as_native(both):
    native, ours = both
    for key in ("use_count_new", "use_count_inside", "use_count_after", "pools",
                "f_in_default_pool", "pool_snapshot", "all_segments", "d_sum_ok"):
        print(key, "native:", native[key], "cachealloc:", ours[key])
        assert ours[key] == native[key], key
    assert all(native["pools"].values())


def test_mempool_release_and_empty_cache_as_native(both):
    native, ours = both
    for key in ("segments_after_pool_deleted", "segments_after_empty_cache",
                "deleted_pool_segments_left", "final_segments"):
        print(key, "native:", native[key], "cachealloc:", ours[key])
        assert ours[key] == native[key], key


def test_mempool_no_split_and_use_on_oom_as_native(both):
    native, ours = both
    for key in ("no_split_allocated_delta", "use_on_oom_block_in_pool", "use_on_oom_stats"):
        print(key, "native:", native.get(key), "cachealloc:", ours.get(key))
        assert ours.get(key) == native.get(key), key


def test_memory_stats_with_pools_equal_natives(both):
    native, ours = both
    for when in ("stats_with_pool", "final_stats"):
        diff = {k: (ours[when].get(k), v) for k, v in native[when].items()
                if ours[when].get(k) != v}
        print(when, "keys differing (cachealloc, native):", diff)
        assert not diff, when
