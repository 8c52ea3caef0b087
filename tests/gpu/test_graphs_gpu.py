"""CUDA graph capture under cachealloc's PyTorch glue, compared with the
native allocator running the same unmodified script (graph_script.py):
private pools during capture, replay, a shared pool, deferred frees of
blocks used on other streams, make_graphed_callables, and release."""
import pytest

from native_vs_cachealloc import run_both


@pytest.fixture(scope="module")
def both():
    return run_both("graph_script.py")


def _same(native, ours, keys):
    for key in keys:
        print(key, "native:", native.get(key), "cachealloc:", ours.get(key))
        assert ours.get(key) == native.get(key), key


def test_graph_replays_give_eager_results(both):
    native, ours = both
    assert all(ours["replay_matches_eager"]), ours["replay_matches_eager"]
    assert ours["shared_pool_ok"] and ours["graphed_forward_ok"] and ours["graphed_backward_ok"]
    _same(native, ours, ("replay_matches_eager", "replay_checksums", "shared_pool_ok",
                         "graphed_forward_ok", "graphed_backward_ok"))


def test_graph_pools_hold_the_same_segments_as_native(both):
    native, ours = both
    assert ours["pool_id_nonzero"]
    _same(native, ours, ("segments_after_capture", "segments_two_graphs",
                         "segments_graphs_deleted", "segments_final"))


def test_a_free_during_capture_is_deferred_as_native(both):
    native, ours = both
    assert ours["deferred_state_after_capture"] == "active_pending_free"
    assert ours["deferred_state_after_malloc"] == "inactive"
    _same(native, ours, ("deferred_state_after_capture", "deferred_state_after_malloc"))


@pytest.mark.parametrize("when", ["stats_after_capture", "stats_two_graphs",
                                  "stats_graphed_callables", "final_stats"])
def test_memory_stats_with_graphs_equal_natives(both, when):
    native, ours = both
    diff = {k: (ours[when].get(k), v) for k, v in native[when].items() if ours[when].get(k) != v}
    print(when, "keys differing (cachealloc, native):", diff)
    assert not diff, when
