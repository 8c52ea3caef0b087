"""Two GPUs: PyTorch's memory API with cachealloc installed, compared with
the native allocator in the same script (multi_gpu_script.py). Skips, with
its reason, on machines with fewer than two CUDA devices."""
import pytest

from native_vs_cachealloc import run_both
from two_gpus import needs_two_gpus


pytestmark = needs_two_gpus


@pytest.fixture(scope="module")
def both():
    return run_both("multi_gpu_script.py")


def _differing(native, ours):
    return {k: (ours.get(k), v) for k, v in native.items() if ours.get(k) != v}


def test_using_only_cuda1_leaves_cuda0_as_native_does(both):
    native, ours = both
    print("context on cuda:0 after cuda:1-only work: native",
          native["context_on_0_after_cuda1_work"], "cachealloc", ours["context_on_0_after_cuda1_work"])
    assert ours["context_on_0_after_cuda1_work"] == native["context_on_0_after_cuda1_work"]
    assert ours["context_on_1_after_cuda1_work"] and native["context_on_1_after_cuda1_work"]
    diff = _differing(native["stats1_after_cuda1_work"], ours["stats1_after_cuda1_work"])
    print("cuda:1 memory_stats keys differing:", diff)
    assert not diff
    assert ours["allocated0_after_cuda1_work"] == 0


def test_per_device_stats_peaks_and_history_equal_native(both):
    native, ours = both
    for key in ("stats0", "stats1"):
        diff = _differing(native[key], ours[key])
        print(key, "keys differing:", diff)
        assert not diff, key
    for key in ("peaks_after_reset_of_1", "summary1_lines", "segments_per_device",
                "trace_actions_per_device", "trace_lengths"):
        print(key, "native", native[key], "cachealloc", ours[key])
        assert ours[key] == native[key], key


def test_record_stream_onto_another_devices_stream(both):
    native, ours = both
    print("cross-device record_stream reuse (busy, after sync): native",
          native["cross_device_reused_while_busy"], native["cross_device_reused_after_sync"],
          "cachealloc", ours["cross_device_reused_while_busy"], ours["cross_device_reused_after_sync"])
    assert ours["cross_device_reused_while_busy"] is False
    assert ours["cross_device_reused_after_sync"] == native["cross_device_reused_after_sync"]


def test_oom_on_the_second_device_names_it(both):
    native, ours = both
    print("OOM on cuda:1: native", native["oom_on_1"], native["oom_observer_on_1"],
          "| cachealloc", ours["oom_on_1"], ours["oom_observer_on_1"])
    assert "GPU 1" in native["oom_on_1"]
    assert ours["oom_on_1"] == native["oom_on_1"]
    assert ours["oom_observer_on_1"] == native["oom_observer_on_1"]
