"""GPUMemoryProfiler (the usage guide's API) on the simulated device: exact
bytes for a known allocation pattern (a request becomes a block of a
multiple of 512 B, so 1000 B -> 1024 B; the small pool reserves 2 MiB
segments), snapshots, summary, errors, monitoring, clear_results, device
validation, the per-scope table, leaks versus an ordinary training loop,
and the fallback on PyTorch's counters."""
import pathlib
import time
import types
import warnings

import pytest

KiB, MiB = 1024, 1024 * 1024
SEGMENT = 2 * MiB
GUIDE_BLOCKS = pathlib.Path(__file__).resolve().parents[1] / "data" / "gpumemoryprofiler_guide_blocks.py"


def _pattern(ca, keep):
    """Starting at 1 KiB allocated: +4 KiB (5 KiB), +1 KiB (6 KiB, the
    peak), -4 KiB (2 KiB), +2 KiB (4 KiB). Keeps two blocks."""
    b = ca._malloc(4096)
    keep.append(ca._malloc(1000))
    ca._free(b)
    keep.append(ca._malloc(2048))


@pytest.fixture
def gpu_prof(ca):
    from cachealloc.profiler import GPUMemoryProfiler

    return GPUMemoryProfiler(device=0, track_tensors=True)


def test_profile_function_gives_exact_bytes_and_snapshots_for_a_known_pattern(ca, gpu_prof):
    from cachealloc.profiler import MemorySnapshot, ProfileResult

    keep = [ca._malloc(1000)]
    r = gpu_prof.profile_function(_pattern, ca, keep)
    assert isinstance(r, ProfileResult) and r.function_name == "_pattern" and r.exact
    assert (r.memory_allocated, r.memory_freed, r.memory_diff()) == (7 * KiB, 4 * KiB, 3 * KiB)
    assert r.peak_memory_usage() == 6 * KiB and r.peak_memory_increase() == 5 * KiB
    assert (r.tensors_created, r.tensors_deleted) == (3, 1)
    assert r.execution_time > 0 and r.exception is None
    b, a, p = r.memory_before, r.memory_after, r.memory_peak
    assert all(isinstance(s, MemorySnapshot) for s in (b, a, p))
    assert (b.allocated_memory, b.reserved_memory, b.active_memory, b.inactive_memory) == (
        1 * KiB, SEGMENT, 1 * KiB, SEGMENT - 1 * KiB)
    assert (a.allocated_memory, a.reserved_memory, a.active_memory, a.inactive_memory) == (
        4 * KiB, SEGMENT, 4 * KiB, SEGMENT - 4 * KiB)
    assert (p.allocated_memory, p.reserved_memory, p.active_memory, p.inactive_memory) == (
        6 * KiB, SEGMENT, None, None)
    assert (b.operation, a.operation, p.operation) == ("before__pattern", "after__pattern",
                                                       "peak__pattern")
    assert b.device_id == a.device_id == p.device_id == 0
    assert b.timestamp <= a.timestamp and b.cpu_memory > 0 and p.cpu_memory is None
    assert a.allocated_memory == ca.memory_allocated(0) and gpu_prof.results == [r]
    for ptr in keep:
        ca._free(ptr)


def test_peaks_reset_nobodys_statistics(ca, gpu_prof):
    ca._free(ca._malloc(5 * MiB))
    r = gpu_prof.profile_function(lambda: ca._free(ca._malloc(8 * KiB)))
    assert r.peak_memory_usage() == 8 * KiB
    assert ca.max_memory_allocated(0) == 5 * MiB  # the guide would have reset it to 8 KiB
    gpu_prof.clear_results()
    assert ca.max_memory_allocated(0) == 5 * MiB


def test_profile_context_is_recorded_like_a_function_and_nests_with_exact_self_peaks(ca, gpu_prof):
    keep = []
    with gpu_prof.profile_context(name="outer") as block:
        a = ca._malloc(2 * KiB)                       # 2 KiB
        gpu_prof.profile_function(_pattern, ca, keep)  # peak 7 KiB inside, leaves 5 KiB
        ca._free(a)                                   # 3 KiB
    inner, outer = gpu_prof.results
    assert block.result is outer and outer.function_name == "outer"
    assert (outer.memory_allocated, outer.memory_freed, outer.memory_diff()) == (9 * KiB, 6 * KiB, 3 * KiB)
    assert (outer.peak_memory_usage(), outer.self_peak_memory_usage()) == (7 * KiB, 5 * KiB)
    assert inner.peak_memory_usage() == inner.self_peak_memory_usage() == 7 * KiB
    assert outer.scope.depth == 0 and inner.scope.parent_id == outer.scope.id
    summary = gpu_prof.get_summary()  # the nested call's bytes count once
    assert (summary["total_memory_allocated"], summary["net_memory_change"]) == (9 * KiB, 3 * KiB)
    table = gpu_prof.scope_table()
    assert "Highest peak 7.00 KiB reached in '_pattern' (depth 1)" in table
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[2:4]}
    # Self net of outer: +2 KiB then -2 KiB of its own; the child's +3 KiB is not its own.
    assert rows["outer"] == ["1", "3.00", "KiB", "0", "B", "7.00", "KiB", "5.00", "KiB", "7.00", "KiB"]
    for ptr in keep:
        ca._free(ptr)


def test_summary_has_the_guides_keys_with_exact_values(ca, gpu_prof):
    keep = []
    for _ in range(2):
        gpu_prof.profile_function(_pattern, ca, keep)  # +3 KiB each, peak 5 KiB above start
    gpu_prof.profile_function(lambda: ca._free(ca._malloc(64 * KiB)))
    s = gpu_prof.get_summary()
    assert (s["total_functions_profiled"], s["total_function_calls"]) == (2, 3)
    assert s["peak_memory_usage"] == 6 * KiB + 64 * KiB
    assert s["net_memory_change"] == 6 * KiB and s["total_memory_allocated"] == 14 * KiB + 64 * KiB
    assert (s["baseline_memory_usage"], s["current_memory_usage"]) == (0, 6 * KiB)
    f = s["function_summaries"]["_pattern"]
    assert (f["call_count"], f["avg_memory_allocated"], f["peak_memory"]) == (2, 7 * KiB, 8 * KiB)
    assert f["avg_time"] == pytest.approx(f["total_time"] / 2)
    assert s["function_summaries"]["<lambda>"]["peak_memory"] == 70 * KiB
    for ptr in keep:
        ca._free(ptr)


def test_summary_without_results_has_the_same_keys(ca, gpu_prof):
    s = gpu_prof.get_summary()
    assert (s["total_function_calls"], s["peak_memory_usage"], s["function_summaries"]) == (0, 0, {})


def test_a_raising_call_is_recorded_with_its_figures_and_the_exception_propagates(ca, gpu_prof):
    keep = []

    def buggy():
        keep.append(ca._malloc(3 * KiB))
        ca._free(ca._malloc(5 * KiB))
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        gpu_prof.profile_function(buggy)
    last = gpu_prof.results[-1]
    assert last.exception == "ValueError: boom" and last.function_name == "buggy"
    assert (last.memory_after.allocated_memory, last.peak_memory_usage()) == (3 * KiB, 8 * KiB)
    assert (last.memory_allocated, last.memory_freed) == (8 * KiB, 5 * KiB)
    assert gpu_prof.get_summary()["function_summaries"]["buggy"]["exceptions"] == 1
    ca._free(keep[0])


def test_monitoring_takes_snapshots_at_the_interval(ca, gpu_prof):
    gpu_prof.start_monitoring(interval=0.005)
    with pytest.raises(RuntimeError, match="already running"):
        gpu_prof.start_monitoring(interval=0.005)
    p = ca._malloc(3 * MiB)
    deadline = time.time() + 10
    while not any(s.allocated_memory == 3 * MiB for s in list(gpu_prof.snapshots)) \
            and time.time() < deadline:
        time.sleep(0.005)
    assert gpu_prof.get_summary()["monitoring_active"]
    gpu_prof.stop_monitoring()
    snaps = list(gpu_prof.snapshots)
    seen = [s for s in snaps if s.allocated_memory == 3 * MiB]
    assert seen and seen[0].reserved_memory >= 3 * MiB and seen[0].operation == "monitor"
    assert all(s.device_id == 0 for s in snaps)
    count = len(snaps)
    time.sleep(0.03)
    assert len(gpu_prof.snapshots) == count  # stopped
    ca._free(p)


@pytest.mark.parametrize("interval", [0, -1, "0.1"])
def test_monitoring_refuses_an_interval_that_is_not_positive(ca, gpu_prof, interval):
    with pytest.raises(ValueError, match="interval"):
        gpu_prof.start_monitoring(interval=interval)


def test_clear_results_forgets_everything_and_takes_a_new_baseline(ca, gpu_prof):
    keep = []
    gpu_prof.profile_function(_pattern, ca, keep)
    gpu_prof.start_monitoring(interval=0.001)
    time.sleep(0.02)
    gpu_prof.stop_monitoring()
    gpu_prof.clear_results()
    assert gpu_prof.results == [] and len(gpu_prof.snapshots) == 0
    base = gpu_prof.baseline_snapshot
    assert (base.operation, base.allocated_memory) == ("new_baseline", 3 * KiB)
    s = gpu_prof.get_summary()
    assert (s["baseline_memory_usage"], s["memory_change_from_baseline"]) == (3 * KiB, 0)
    for ptr in keep:
        ca._free(ptr)


def _torch_device(spec):
    torch = pytest.importorskip("torch")
    return torch.device(spec)


@pytest.mark.parametrize("device", ["cuda:0", 0, "torch:cuda:0", None])
def test_device_accepts_the_guides_forms(ca, device):
    from cachealloc.profiler import GPUMemoryProfiler

    if device == "torch:cuda:0":
        device = _torch_device("cuda:0")
    assert GPUMemoryProfiler(device=device).device == 0


@pytest.mark.parametrize("device, error", [
    ("cuda:1", ValueError), (1, ValueError), ("cpu", ValueError), ("torch:cpu", ValueError),
    (1.5, TypeError), (True, TypeError), ("cuda:x", ValueError)])
def test_an_invalid_device_is_refused_at_construction(ca, device, error):
    from cachealloc.profiler import GPUMemoryProfiler

    if device == "torch:cpu":
        device = _torch_device("cpu")
    with pytest.raises(error):
        GPUMemoryProfiler(device=device)


def test_stack_traces_only_when_asked(ca):
    from cachealloc.profiler import GPUMemoryProfiler

    on, off = GPUMemoryProfiler(0, collect_stack_traces=True), GPUMemoryProfiler(0)
    r_on, r_off = on.profile_function(lambda: None), off.profile_function(lambda: None)
    assert "test_gpu_memory_profiler.py" in r_on.memory_before.stack_trace.splitlines()[-1]
    assert r_off.memory_before.stack_trace is None


def test_guides_snapshot_class_owns_its_name_and_the_scope_snapshot_has_another():
    import dataclasses

    import cachealloc.profiler as cp

    assert [f.name for f in dataclasses.fields(cp.MemorySnapshot)][:8] == [
        "timestamp", "allocated_memory", "reserved_memory", "active_memory", "inactive_memory",
        "cpu_memory", "device_id", "operation"]
    assert cp.ScopeSnapshot is not cp.MemorySnapshot
    assert not hasattr(cp.memory_profiler, "MemorySnapshot")


# --- leaks versus an ordinary training loop ---------------------------------

def _train_loop(ca, prof, steps, leak):
    """forward keeps 64 KiB of activations, backward frees them and
    (re)allocates 16 KiB of gradients; with `leak`, forward also keeps 4 KiB
    in a list every step."""
    grads, kept = [], []
    for _ in range(steps):
        with prof.profile_context(name="forward"):
            acts = [ca._malloc(32 * KiB) for _ in range(2)]
            ca._free(ca._malloc(128 * KiB))   # a transient workspace
            if leak:
                kept.append(ca._malloc(4 * KiB))
        with prof.profile_context(name="backward"):
            for g in grads:
                ca._free(g)
            grads = [ca._malloc(16 * KiB)]
            for a in acts:
                ca._free(a)
    return grads + kept


@pytest.mark.parametrize("history", [False, True], ids=["no-history", "history"])
def test_a_training_loop_is_not_a_leak_and_a_real_leak_is(ca, history):
    from cachealloc.profiler import GPUMemoryProfiler

    prof = GPUMemoryProfiler(0, collect_stack_traces=history)
    held = _train_loop(ca, prof, 5, leak=False)
    forwards = [r for r in prof.results if r.function_name == "forward"]
    assert all(r.memory_diff() == 64 * KiB for r in forwards)  # each forward keeps memory...
    assert prof.find_leaks(min_calls=3) == []                   # ...that backward gives back
    for ptr in held:
        ca._free(ptr)
    prof.clear_results()
    held = _train_loop(ca, prof, 5, leak=True)
    (report,) = prof.find_leaks(min_calls=3)
    # The first step's level also rose by the gradients the first backward
    # allocated (16 KiB): the start levels alone cannot tell them apart.
    assert (report.name, report.calls) == ("forward", 5)
    assert report.retained == [20 * KiB] + [4 * KiB] * 4 and report.growth_bytes == 36 * KiB
    assert report.net_changes == [68 * KiB] * 5
    if history:
        assert [(s.function, s.bytes, s.blocks) for s in report.sites] == [("_train_loop", 20 * KiB, 5)]
    for ptr in held:
        ca._free(ptr)


# --- the fallback on PyTorch's counters (native allocator) ------------------

def test_under_the_native_allocator_it_works_on_torchs_counters_and_says_so(ca, monkeypatch):
    torch = pytest.importorskip("torch")
    from cachealloc.profiler import GPUMemoryProfiler
    from cachealloc.profiler import scopes

    # PyTorch's counters, served by the simulated device (the same statistics).
    monkeypatch.setattr(scopes, "_cachealloc_initialized", lambda: False)
    monkeypatch.setattr(scopes, "_warned_not_exact", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "memory_stats", ca.memory_stats)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", ca.reset_peak_memory_stats)
    ca._free(ca._malloc(5 * MiB))
    with pytest.warns(RuntimeWarning, match="NOT exact"):
        prof = GPUMemoryProfiler(device="cuda:0", track_tensors=True)
    keep = [ca._malloc(1000)]
    r = prof.profile_function(_pattern, ca, keep)
    assert not r.exact and not prof.get_summary()["exact"]
    assert (r.memory_allocated, r.memory_freed, r.peak_memory_usage()) == (7 * KiB, 4 * KiB, 6 * KiB)
    assert (r.tensors_created, r.memory_before.allocated_memory) == (3, 1 * KiB)
    assert ca.max_memory_allocated(0) < 5 * MiB  # where it becomes approximate: peaks were reset
    for ptr in keep:
        ca._free(ptr)


# --- the guide's code blocks (run on a GPU by tests/gpu) ---------------------

def test_guide_blocks_are_python_and_import_only_from_cachealloc():
    import ast
    import sys

    sys.path.insert(0, str(GUIDE_BLOCKS.parent))
    try:
        from gpumemoryprofiler_guide_blocks import BLOCKS
    finally:
        sys.path.pop(0)
    assert len(BLOCKS) == 12
    for title, code in BLOCKS:
        tree = ast.parse(code, filename=title)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.module == "cachealloc.profiler", title
        assert "gpumemprof" not in code


# --- docs/profiling.md's examples print what the page says ------------------

def _doc_example(heading):
    """(code, printed) of the first example under `heading` in
    docs/profiling.md: the indented block, and the one after "prints"."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "profiling.md").read_text()
    section = text.split(heading, 1)[1]
    blocks, current = [], None
    for line in section.splitlines():
        if line.startswith("    ") or (current is not None and line == ""):
            current = (current or []) + [line[4:]]
        elif current is not None:
            blocks.append("\n".join(current).strip("\n"))
            current = None
        if len(blocks) == 2:
            break
    return blocks[0] + "\n", blocks[1]


@pytest.mark.parametrize("heading", ["## GPUMemoryProfiler: the usage guide's API",
                                     '## "CUDA Mem" versus "Self CUDA Mem"'])
def test_docs_examples_print_what_the_page_says(heading):
    import os
    import subprocess
    import sys

    code, printed = _doc_example(heading)
    repo = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo / "bindings" / "python"))
    if "CACHEALLOC_LIBRARY" not in env:
        build = pathlib.Path(os.environ.get("CACHEALLOC_BUILD", repo / "build"))
        env["CACHEALLOC_LIBRARY"] = str(build / "bindings" / "libcachealloc.so")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(printed + "\n"), r.stdout
