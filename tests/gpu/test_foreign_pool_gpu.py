"""torch.cuda.MemPool(allocator=...) under cachealloc's glue, compared with
native running the same script (foreign_pool_script.py), the allocator
being examples/sleep_mode's CUDAPluggableAllocator over cuMemCreate."""
import pytest

from native_vs_cachealloc import run_both
from sleep_library import build_sleep_library


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    library = build_sleep_library(tmp_path_factory.mktemp("sleep"))
    return run_both("foreign_pool_script.py", library)


def test_foreign_pool_routes_counts_and_lists_segments_as_native(both):
    native, ours = both
    for key in ("use_count_new", "use_count_inside", "use_count_after", "pools",
                "foreign_bytes", "pool_snapshot", "all_segments", "d_ok", "f_in_default_pool"):
        print(key, "native:", native[key], "cachealloc:", ours[key])
        assert ours[key] == native[key], key
    assert all(native["pools"].values()) and native["d_ok"]
    # A 2 MiB and a 20 MiB segment, and the 32 MiB cuBLAS workspace the
    # matmul allocates inside the pool (measured on the H100, torch 2.11).
    assert native["foreign_bytes"] == (2 + 20 + 32) * 2**20


def test_a_refusal_of_the_pools_allocator_is_an_oom_with_nothing_leaked_as_native(both):
    native, ours = both
    for key in ("oom", "small_in_pool", "foreign_bytes_after_oom"):
        print(key, "native:", native[key], "cachealloc:", ours[key])
        assert ours[key] == native[key], key
    assert native["oom"] == "CUDA out of memory"
    assert native["foreign_bytes_after_oom"] == native["foreign_bytes"]


def test_no_split_release_and_empty_cache_as_native(both):
    native, ours = both
    for key in ("no_split_allocated_delta", "foreign_bytes_after_release",
                "deleted_pool_segments_left", "final_segments"):
        print(key, "native:", native[key], "cachealloc:", ours[key])
        assert ours[key] == native[key], key
    # cuBLAS keeps its 32 MiB workspace (made in the pool) after the pool is
    # released; everything else went back to the foreign allocator.
    assert native["foreign_bytes_after_release"] == 32 * 2**20


def test_memory_stats_with_a_foreign_pool_equal_natives(both):
    native, ours = both
    for when in ("stats_with_pool", "stats_after_oom", "final_stats"):
        diff = {k: (ours[when].get(k), v) for k, v in native[when].items()
                if ours[when].get(k) != v}
        print(when, "keys differing (cachealloc, native):", diff)
        assert len(native[when]) >= 122
        assert not diff, when
