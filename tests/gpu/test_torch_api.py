"""Issue 4: PyTorch's own memory API, unchanged, with cachealloc installed
through the PyTorch glue, compared with the native allocator."""
import json
import os
import pathlib
import pickle
import subprocess
import sys

import pytest

from native_vs_cachealloc import run_both

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    return (*run_both("torch_api_script.py", tmp), tmp)


def test_unmodified_api_prints_the_same_stats(both):
    native, ours, _ = both
    print(json.dumps({k: v for k, v in ours.items() if k != "memory_stats"}, indent=1))
    diff = {k: (ours["memory_stats"][k], v) for k, v in native["memory_stats"].items()
            if ours["memory_stats"][k] != v}
    print("memory_stats keys differing:", diff)
    for key in ("after_training", "peak_after_reset", "num_alloc_after_reset",
                "reserved_after_empty_cache", "segments", "summary_lines"):
        assert ours[key] == native[key], key
    assert not diff


def test_cudnn_benchmark_mode_trains(both):
    """cuDNN's benchmark mode sizes workspaces from the allocator's cacheInfo."""
    native, ours, _ = both
    assert native["cudnn_benchmark_losses_finite"] and ours["cudnn_benchmark_losses_finite"]


def test_record_stream_protects_blocks_used_on_another_stream(both):
    native, ours, _ = both
    assert ours["record_stream_reused_while_busy"] is False
    assert ours["record_stream_reused_after_sync"] == native["record_stream_reused_after_sync"]


def test_history_frames_come_from_pytorchs_recorder(both):
    native, ours, _ = both
    assert ours["alloc_entries_with_frames"] > 0
    assert "torch_api_script.py" in ours["frame_files"]
    assert ours["trace_entries"] == native["trace_entries"]
    assert ours["history_enabled"] == native["history_enabled"]


def test_request_beyond_one_exbibyte_is_an_oom_as_native(both):
    native, ours, _ = both
    print("native:", native["huge_request_error"], "| cachealloc:", ours["huge_request_error"])
    assert native["huge_request_error"].startswith("OutOfMemoryError")
    assert ours["huge_request_error"] == native["huge_request_error"]


def test_oom_observers_get_natives_numbers(both):
    native, ours, _ = both
    print("OOM observer (device, refused bytes, allowed bytes): native", native["oom_observer"],
          "cachealloc", ours["oom_observer"])
    assert isinstance(native["oom_observer"], list) and len(native["oom_observer"]) == 1
    assert ours["oom_observer"] == native["oom_observer"]


def test_skip_actions_as_native(both):
    native, ours, _ = both
    print("skip_actions trace: native", native["skip_actions_trace"],
          "cachealloc", ours["skip_actions_trace"])
    assert ours["skip_actions_trace"] == native["skip_actions_trace"]


def test_profiler_sees_cachealloc_allocations(both):
    native, ours, _ = both
    print("profiler ops with device memory: native", native["profiler_ops_with_device_memory"],
          "cachealloc", ours["profiler_ops_with_device_memory"])
    assert ours["profiler_ops_with_device_memory"] > 0
    print("profiler memory by op: native", native["profiler_memory_by_op"],
          "cachealloc", ours["profiler_memory_by_op"])
    assert ours["profiler_memory_by_op"] == native["profiler_memory_by_op"]


def test_dumped_snapshot_opens_in_memory_viz(both):
    from torch.cuda import _memory_viz

    _, _, tmp = both
    with open(tmp / "cachealloc_snapshot.pickle", "rb") as f:
        snap = pickle.load(f)
    folded = lambda text: text
    assert _memory_viz.segments(snap, format_flamegraph=folded)
    assert _memory_viz.memory(snap, format_flamegraph=folded)
    assert len(_memory_viz.trace_plot(snap)) > 1000
    assert len(_memory_viz.segment_plot(snap)) > 1000


def test_oom_in_glue_mode_raises_torch_out_of_memory_error_and_notifies_observers():
    out = subprocess.run([sys.executable, "-c", r'''
import torch, cachealloc
cachealloc.install()
assert cachealloc.mode() == "torch-extension"
seen = []
torch._C._cuda_attach_out_of_memory_observer(lambda *args: seen.append(args))
torch.cuda.memory._record_memory_history()
torch.cuda.set_per_process_memory_fraction(0.05)
keep = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
try:
    torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
    raise SystemExit("no OOM")
except torch.OutOfMemoryError as e:
    print("OOM", str(e)[:120])
snap = torch.cuda.memory._snapshot()
assert any(e["action"] == "oom" for e in snap["device_traces"][0])
assert torch.cuda.memory_stats()["num_ooms"] == 1
assert len(seen) == 1, seen
del keep
x = torch.ones(1 << 20, device="cuda").sum().item()
print("CONTINUES", x)
'''], capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "bindings" / "python")))
    print(out.stdout)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "CONTINUES" in out.stdout
