"""Expandable segments on the GPU: the same scenarios under PyTorch's native
allocator and under cachealloc, both with expandable_segments:True, each
allocator in a fresh process, the two side by side (expandable_script.py
runs the scenarios one after another, resetting in between). For every scenario: equal losses;
equal segments by shape (type, size, each block's offset from its
segment's base, size and state); all 122 memory_stats keys equal; the same
history (action, size) sequence, segment_map and segment_unmap included;
and the snapshot renders in torch.cuda._memory_viz.

CACHEALLOC_EXPANDABLE_FRESH=1 runs each scenario in processes of its own
(12 processes instead of 2)."""
import json
import os

import pytest

from native_vs_cachealloc import run_script_pair

SCENARIOS = ["resnet18", "transformer", "decoder", "fuzz", "oom_fraction", "empty_cache"]


@pytest.fixture(scope="module")
def results():
    """{allocator: {scenario: result}}, run once for the module."""
    groups = [[s] for s in SCENARIOS] if os.environ.get("CACHEALLOC_EXPANDABLE_FRESH") else [SCENARIOS]
    out = {"native": {}, "cachealloc": {}}
    for group in groups:
        native, ours = run_script_pair("expandable_script.py", *group)
        out["native"].update(native)
        out["cachealloc"].update(ours)
    return out


def pair(results, scenario):
    native, ours = results["native"][scenario], results["cachealloc"][scenario]
    return native, ours


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_expandable_losses_equal_native(results, scenario):
    native, ours = pair(results, scenario)
    print(f"{scenario}: losses native={native['losses']} cachealloc={ours['losses']}")
    assert ours["losses"] == native["losses"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_expandable_memory_stats_equal_native(results, scenario):
    native, ours = pair(results, scenario)
    assert len(ours["memory_stats"]) == 122
    diff = {k: (ours["memory_stats"].get(k), v) for k, v in native["memory_stats"].items()
            if ours["memory_stats"].get(k) != v}
    print(f"{scenario}: {len(diff)} of 122 keys differ: {diff}")
    print(f"{scenario}: actions native {native['action_counts']} cachealloc {ours['action_counts']}")
    assert not diff


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_expandable_segments_blocks_and_offsets_equal_native(results, scenario):
    native, ours = pair(results, scenario)
    print(f"{scenario}: {len(native['shapes'])} segments native, {len(ours['shapes'])} cachealloc; "
          f"expandable flags native {sorted({s[1] for s in native['shapes']})} "
          f"cachealloc {sorted({s[1] for s in ours['shapes']})}")
    if scenario == "empty_cache":
        # Its last empty_cache() unmaps every page (the pages given back
        # while blocks were live: test_expandable_empty_cache_unmapped_pages).
        assert native["shapes"] == [] and ours["shapes"] == []
        return
    assert native["shapes"], "native listed no segment: the scenario kept nothing alive"
    assert all(s[1] for s in native["shapes"]), "native's segments are not expandable"
    assert ours["shapes"] == native["shapes"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_expandable_history_equal_native(results, scenario):
    native, ours = pair(results, scenario)
    assert native["action_counts"].get("segment_map", 0) > 0
    if scenario == "fuzz":
        # Live fuzz runs free blocks after record_stream on streams kept busy
        # for random times: when each event completes is the GPU's timing, so
        # two live runs (native against native too) order completions, and
        # the requests they let reuse, differently. The fuzz decisions are
        # checked exactly where the timing is fixed: native's recordings
        # replayed in test_parity_sweep (expandable set).
        pytest.skip("fuzz: live history order depends on GPU event timing; "
                    "exactness is checked by the expandable parity sweep")
    first = next((i for i, (a, b) in enumerate(zip(native["actions"], ours["actions"])) if a != b),
                 None)
    if first is not None:
        print(f"{scenario}: first difference at entry {first}: native "
              f"{native['actions'][max(0, first - 3):first + 3]} cachealloc "
              f"{ours['actions'][max(0, first - 3):first + 3]}")
    assert ours["actions"] == native["actions"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_expandable_snapshot_renders_in_memory_viz(results, scenario):
    native, ours = pair(results, scenario)
    print(f"{scenario}: memory_viz native {native['renders']} cachealloc {ours['renders']}")
    assert ours["expandable_setting"] is True
    for view, size in ours["renders"].items():
        # A view of no segments (empty_cache's end) renders empty for native too.
        assert isinstance(size, int) and (size > 0 or native["renders"][view] == 0), (view, size)


def test_expandable_oom_under_fraction_happened_in_both(results):
    native, ours = pair(results, "oom_fraction")
    assert native["losses"][0] == 2.0 and native["memory_stats"]["num_ooms"] == 2
    assert ours["losses"][:2] == native["losses"][:2]


def test_expandable_empty_cache_unmapped_pages(results):
    native, ours = pair(results, "empty_cache")
    reserved = native["losses"]
    # empty_cache gave pages back while blocks were live, and everything at
    # the end (only the cuBLAS-free scenario: nothing else holds memory).
    assert reserved[1] < reserved[0] and reserved[3] <= reserved[1]
    assert native["action_counts"].get("segment_unmap", 0) > 0
    assert ours["losses"] == reserved
