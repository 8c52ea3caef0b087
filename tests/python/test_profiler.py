"""cachealloc.profiler on the simulated device: scope numbers worked out by
hand (a request becomes a block of a multiple of 512 B; statistics count
block sizes, so 1000 B -> 1024 B), exceptions, exports, monitoring, leak
sites, and the fallback used under PyTorch's native allocator. At the end:
the package's own low-level API (memory_summary, _malloc/_free argument
checks, record_memory_history, errors before init)."""
import csv
import ctypes
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import types
import warnings

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CACHEALLOC_BUILD", REPO / "build"))
sys.path.insert(0, str(REPO / "bindings" / "python"))

KiB, MiB = 1024, 1024 * 1024
ENV = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))


def _py(code):
    """Runs code in a fresh Python process (cachealloc not yet initialized)."""
    env = dict(ENV)
    if "CACHEALLOC_LIBRARY" not in env and (BUILD / "bindings" / "libcachealloc.so").exists():
        env["CACHEALLOC_LIBRARY"] = str(BUILD / "bindings" / "libcachealloc.so")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
SMALL_SEGMENT = 2 * MiB  # the simulated device reserves small-pool segments of 2 MiB


@pytest.fixture
def prof(ca):
    from cachealloc.profiler import MemoryProfiler

    return MemoryProfiler(device=0)


def test_peak_counts_block_sizes_not_requested_bytes(ca, prof):
    before = ca._malloc(1000)  # 1024 B block, outside the scope
    with prof.profile_context("s") as s:
        b = ca._malloc(4096)   # 5120
        c = ca._malloc(1000)   # 6144: the peak
        ca._free(b)            # 2048
        d = ca._malloc(2048)   # 4096
    r = s.result
    assert (r.before.allocated, r.after.allocated) == (1024, 4096)
    assert (r.peak_allocated, r.peak_above_start) == (6144, 5120)
    assert (r.bytes_allocated, r.bytes_freed, r.net_change) == (7168, 4096, 3072)
    assert (r.allocations, r.frees) == (3, 1)
    assert r.peak_reserved == SMALL_SEGMENT and r.exact
    for p in (before, c, d):
        ca._free(p)


def test_self_peak_excludes_child_scopes_and_total_includes_them(ca, prof):
    with prof.profile_context("outer") as outer:
        a = ca._malloc(1000)              # 1024
        with prof.profile_context("inner") as inner:
            b = ca._malloc(8192)          # 9216
            kept = ca._malloc(4096)       # 13312
            ca._free(b)                   # 5120, left behind by the child
        ca._free(kept)                    # 1024
        c = ca._malloc(2048)              # 3072
    o, i = outer.result, inner.result
    assert (i.depth, i.parent_id, i.peak_allocated, i.peak_above_start) == (1, outer.id, 13312, 12288)
    assert o.peak_allocated == 13312
    assert o.self_peak_allocated == 5120  # the moment the child closed
    assert (o.bytes_allocated, o.self_bytes_allocated) == (1024 + 8192 + 4096 + 2048, 1024 + 2048)
    assert (o.bytes_freed, o.self_bytes_freed) == (8192 + 4096, 4096)
    assert (o.allocations, o.self_allocations, o.frees, o.self_frees) == (4, 2, 2, 1)
    assert [r.name for r in prof.results] == ["inner", "outer"]  # close order
    ca._free(a)
    ca._free(c)


def test_three_deep_peaks_fold_outward_and_self_peaks_stay_local(ca, prof):
    with prof.profile_context("l1") as s1:
        a = ca._malloc(10 * KiB)              # 10 KiB
        with prof.profile_context("l2") as s2:
            b = ca._malloc(20 * KiB)          # 30 KiB
            with prof.profile_context("l3") as s3:
                c = ca._malloc(40 * KiB)      # 70 KiB: the high point
                ca._free(c)
            ca._free(b)                       # 10 KiB
            d = ca._malloc(5 * KiB)           # 15 KiB
        f = ca._malloc(30 * KiB)              # 45 KiB: l1's own high point
        ca._free(f)
    r1, r2, r3 = s1.result, s2.result, s3.result
    assert [r.peak_allocated for r in (r1, r2, r3)] == [70 * KiB] * 3
    assert [r.self_peak_allocated for r in (r1, r2, r3)] == [45 * KiB, 30 * KiB, 70 * KiB]
    assert [r.peak_above_start for r in (r1, r2, r3)] == [70 * KiB, 60 * KiB, 40 * KiB]
    assert [r.depth for r in (r1, r2, r3)] == [0, 1, 2]
    assert r1.bytes_allocated == (10 + 20 + 40 + 5 + 30) * KiB
    assert r1.self_bytes_allocated == (10 + 30) * KiB
    assert (r2.bytes_freed, r2.self_bytes_freed) == (60 * KiB, 20 * KiB)
    for r in (r1, r2, r3):
        assert r.net_change == r.bytes_allocated - r.bytes_freed
    ca._free(a)
    ca._free(d)


def test_parent_peak_is_the_higher_sibling_not_the_sum(ca, prof):
    with prof.profile_context("parent") as p:
        with prof.profile_context("first") as first:
            ca._free(ca._malloc(64 * KiB))
        with prof.profile_context("second") as second:
            x, y = ca._malloc(48 * KiB), ca._malloc(32 * KiB)  # 80 KiB
            ca._free(x)
            ca._free(y)
    assert (first.result.peak_allocated, second.result.peak_allocated) == (64 * KiB, 80 * KiB)
    assert p.result.peak_allocated == 80 * KiB  # not 144 KiB
    assert p.result.self_peak_allocated == 0
    assert p.result.bytes_allocated == (64 + 48 + 32) * KiB


def test_freeing_memory_allocated_before_the_scope(ca, prof):
    old = ca._malloc(1 * MiB)
    with prof.profile_context("s") as s:
        ca._free(old)
        x = ca._malloc(512)
    r = s.result
    assert (r.before.allocated, r.after.allocated, r.peak_allocated) == (MiB, 512, MiB)
    assert (r.peak_above_start, r.bytes_freed, r.net_change) == (0, MiB, 512 - MiB)
    ca._free(x)


def test_exception_inside_a_scope_keeps_results_and_propagates(ca, prof):
    kept = []
    with pytest.raises(ValueError, match="boom"):
        with prof.profile_context("outer"):
            with prof.profile_context("inner"):
                kept.append(ca._malloc(3 * KiB))
                ca._free(ca._malloc(5 * KiB))  # 8 KiB peak
                raise ValueError("boom")
    inner, outer = prof.results
    assert inner.exception == "ValueError: boom" and outer.exception == "ValueError: boom"
    assert (inner.peak_allocated, inner.net_change) == (8 * KiB, 3 * KiB)
    assert outer.peak_allocated == 8 * KiB
    depth = ctypes.c_int64()
    assert ca.lib().cachealloc_scope_depth(0, ctypes.byref(depth)) == 0
    assert depth.value == 0  # nothing left open
    ca._free(kept[0])


def test_scopes_never_reset_the_global_peak(ca, prof):
    ca._free(ca._malloc(5 * MiB))
    assert ca.max_memory_allocated(0) == 5 * MiB
    with prof.profile_context("s"):
        with prof.profile_context("t"):
            ca._free(ca._malloc(KiB))
    assert ca.max_memory_allocated(0) == 5 * MiB


def test_scopes_are_per_device_so_other_threads_allocations_count(ca, prof):
    import threading

    with prof.profile_context("s") as s:
        t = threading.Thread(target=lambda: ca._free(ca._malloc(32 * KiB)))
        t.start()
        t.join()
    assert (s.result.peak_above_start, s.result.allocations, s.result.frees) == (32 * KiB, 1, 1)


def test_closing_a_scope_that_is_not_innermost_raises_and_names_the_open_ones(ca):
    from cachealloc.profiler.scopes import ExactScopes

    src = ExactScopes(0)
    outer, inner = src.open(), src.open()
    with pytest.raises(ca.CacheallocError, match=rf"not the innermost.*innermost {inner}"):
        src.close(outer)
    with pytest.raises(ca.CacheallocError, match="not open"):
        src.close(inner + 12345)
    assert src.close(inner)["depth"] == 1
    assert src.close(outer)["depth"] == 0


def test_c_api_rejects_bad_device_and_null_id(ca):
    lib = ca.lib()
    scope_id = ctypes.c_uint64()
    assert lib.cachealloc_scope_open(3, ctypes.byref(scope_id)) == -1
    assert b"out of range" in lib.cachealloc_last_error()
    assert lib.cachealloc_scope_open(0, None) == -1
    assert lib.cachealloc_scope_open(0, ctypes.byref(scope_id)) == 0
    assert lib.cachealloc_scope_close(0, scope_id.value, None) == 0  # NULL out: discard


def test_profile_function_and_decorator_name_scopes_and_return_values(ca, prof):
    def work(n, scale=1):
        p = ca._malloc(n * scale)
        ca._free(p)
        return n * scale

    assert prof.profile_function(work, 1000, scale=2) == 2000

    @prof.profile
    def plain():
        return "p"

    @prof.profile("named")
    def other():
        return "o"

    assert (plain(), other()) == ("p", "o")
    names = [r.name for r in prof.results]
    assert names[0].endswith("work") and names[1].endswith("plain") and names[2] == "named"
    assert prof.results[0].peak_above_start == 2048


def test_summary_aggregates_calls_per_name(ca, prof):
    for n in (1 * KiB, 3 * KiB, 2 * KiB):
        with prof.profile_context("step"):
            ca._free(ca._malloc(n))
    s = prof.get_summary()["step"]
    assert (s.calls, s.exceptions, s.avg_bytes_allocated, s.max_peak_above_start) == (3, 0, 2 * KiB, 3 * KiB)
    assert s.avg_time_s == pytest.approx(s.total_time_s / 3)
    prof.clear_results()
    assert prof.results == [] and prof.get_summary() == {}


def test_track_tensors_reports_allocator_blocks(ca):
    from cachealloc.profiler import MemoryProfiler

    on, off = MemoryProfiler(0, track_tensors=True), MemoryProfiler(0, track_cpu_memory=False)
    with on.profile_context("a"), off.profile_context("b"):
        ptrs = [ca._malloc(100) for _ in range(3)]
        ca._free(ptrs.pop())
    assert (on.results[0].tensors_created, on.results[0].tensors_deleted) == (3, 1)
    assert off.results[0].tensors_created is None and off.results[0].before.cpu_rss is None
    if sys.platform.startswith("linux"):
        assert on.results[0].before.cpu_rss > 0
    for p in ptrs:
        ca._free(p)


@pytest.mark.parametrize("kwargs, error", [
    ({"device": "cpu"}, ValueError), ({"device": 5}, ValueError), ({"device": 1.5}, TypeError),
    ({"device": True}, TypeError), ({"track_tensors": "yes"}, TypeError),
    ({"collect_stack_traces": 1}, TypeError)])
def test_constructor_rejects_bad_arguments(ca, kwargs, error):
    from cachealloc.profiler import MemoryProfiler

    with pytest.raises(error):
        MemoryProfiler(**kwargs)


def test_scope_name_must_be_a_nonempty_string(ca, prof):
    with pytest.raises(ValueError):
        with prof.profile_context(""):
            pass


def test_exports_carry_the_exact_numbers_and_html_is_offline(ca, prof, tmp_path):
    with prof.profile_context("outer"):
        with prof.profile_context("inner"):
            ca._free(ca._malloc(8 * KiB))
    prof.export_json(tmp_path / "p.json")
    prof.export_csv(tmp_path / "p.csv")
    prof.export_html(tmp_path / "p.html")
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["exact"] is True and [r["name"] for r in doc["results"]] == ["inner", "outer"]
    assert doc["results"][1]["peak_above_start"] == 8 * KiB
    assert doc["summary"]["inner"]["calls"] == 1 and len(doc["samples"]) == 4
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert [int(r["peak_allocated"]) for r in rows] == [8 * KiB, 8 * KiB]
    assert "before_allocated" in rows[0] and "before_cpu_rss" in rows[0]
    page = (tmp_path / "p.html").read_text()
    assert "<svg" in page and "inner" in page
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}  # an XML namespace, never fetched
    assert "<script" not in page and "<link" not in page


def test_monitor_alerts_once_per_upward_crossing(ca):
    from cachealloc.profiler.monitor import MemoryMonitor

    alerts = []
    from cachealloc.profiler.scopes import ExactScopes

    m = MemoryMonitor(ExactScopes(0).current_bytes, 0, allocated_threshold=MiB,
                      callback=alerts.append)
    p = ca._malloc(2 * MiB)
    m.sample_once()
    m.sample_once()             # still above: no second alert
    ca._free(p)
    m.sample_once()             # back below: re-armed
    p = ca._malloc(2 * MiB)
    m.sample_once()
    assert [(a.kind, a.value, a.threshold) for a in alerts] == [("allocated", 2 * MiB, MiB)] * 2
    ca._free(p)


def test_monitoring_thread_samples_and_alerts(ca, prof):
    alerts = []
    prof.start_monitoring(interval_s=0.002, reserved_threshold=10 * MiB, callback=alerts.append)
    with pytest.raises(RuntimeError, match="already running"):
        prof.start_monitoring()
    # One sample before the allocation, so the alert comes from a later one
    # (otherwise a slow thread start can make the alerting sample the first).
    deadline = time.time() + 10
    while not prof.samples and time.time() < deadline:
        time.sleep(0.002)
    p = ca._malloc(12 * MiB)    # a 12 MiB segment
    deadline = time.time() + 10
    while not alerts and time.time() < deadline:
        time.sleep(0.002)
    got = prof.stop_monitoring()
    assert got and got[0].kind == "reserved" and got[0].value >= 12 * MiB
    assert len(prof.samples) >= 2
    ca._free(p)


def test_monitoring_rejects_bad_thresholds(ca, prof):
    with pytest.raises(ValueError):
        prof.start_monitoring(interval_s=0)
    with pytest.raises(ValueError):
        prof.start_monitoring(allocated_threshold=-1)


def leaky_helper(ca, store, nbytes):
    store.append(ca._malloc(nbytes))


def test_leak_check_flags_steady_growth_and_names_the_site(ca):
    from cachealloc.profiler import MemoryProfiler

    prof = MemoryProfiler(0, collect_stack_traces=True)
    store = []
    for _ in range(4):
        with prof.profile_context("leaky"):
            leaky_helper(ca, store, 4096)
            ca._free(ca._malloc(64 * KiB))  # temporary: not a leak
        with prof.profile_context("clean"):
            ca._free(ca._malloc(4096))
    (report,) = prof.find_leaks(min_calls=3)
    assert (report.name, report.calls, report.growth_bytes) == ("leaky", 4, 4 * 4096)
    site = report.sites[0]
    assert (site.function, site.bytes, site.blocks) == ("leaky_helper", 4 * 4096, 4)
    assert site.filename.endswith("test_profiler.py")
    assert prof.results[0].stack and "test_profiler.py" in prof.results[0].stack[-1]
    for p in store:
        ca._free(p)


def test_leak_check_needs_consecutive_growth(ca, prof):
    store = []
    for grow in (True, True, False, True, True):
        with prof.profile_context("s"):
            p = ca._malloc(4096)
            store.append(p) if grow else ca._free(p)
    assert prof.find_leaks(min_calls=3) == []
    (report,) = prof.find_leaks(min_calls=2)
    assert report.calls == 2 and report.sites == [] and "history" in report.note
    for p in store:
        ca._free(p)


def test_find_leaks_does_not_claim_dropped_history():
    # The history begins inside the first flagged call (the profiler turned
    # it on just before), but 4 entries in a 200,000-entry ring dropped
    # nothing.
    r = _py("""
import cachealloc as ca
from cachealloc.profiler import MemoryProfiler
ca.init("", "simulated:8589934592")
prof = MemoryProfiler(device=0, collect_stack_traces=True)
keep = []
for i in range(4):
    with prof.profile_context("it"):
        keep.append(ca._malloc(1 << 20))
print(repr(prof.find_leaks()[0].note))
""")
    assert r.returncode == 0, r.stderr
    assert "dropped" not in r.stdout, r.stdout


def test_find_leaks_says_so_when_the_full_ring_dropped_entries_of_the_flagged_calls(ca, monkeypatch):
    from cachealloc import profiler
    from cachealloc.profiler import memory_profiler

    monkeypatch.setattr(memory_profiler, "HISTORY_ENTRIES", 16)
    prof = profiler.MemoryProfiler(0, collect_stack_traces=True)
    store = []
    for _ in range(4):
        with prof.profile_context("leaky"):
            store.append(ca._malloc(4096))
            for _ in range(10):  # 30 history entries per call: the ring wraps
                ca._free(ca._malloc(4096))
    assert len(ca.snapshot()["device_traces"][0]) == 16
    (report,) = prof.find_leaks()
    assert "dropped" in report.note
    for p in store:
        ca._free(p)


# --- fallback on PyTorch's native allocator (peak resets) ----------------

def _reset_based_cuda(ca):
    """A stand-in for torch.cuda with memory_stats and peak resets (served
    by cachealloc's own statistics, which are PyTorch's)."""
    return types.SimpleNamespace(memory_stats=ca.memory_stats,
                                 reset_peak_memory_stats=ca.reset_peak_memory_stats)


def _nested_workload(ca, source):
    out = {}
    s1 = source.open()
    a = ca._malloc(10 * KiB)
    s2 = source.open()
    b = ca._malloc(60 * KiB)
    ca._free(b)
    out["inner"] = source.close(s2)
    c = ca._malloc(20 * KiB)
    out["outer"] = source.close(s1)
    ca._free(a)
    ca._free(c)
    return out


def test_fallback_matches_exact_scopes_when_nothing_else_resets_peaks(ca):
    from cachealloc.profiler.scopes import ExactScopes, PeakResetScopes

    exact = _nested_workload(ca, ExactScopes(0))
    ca.init("", "simulated:8589934592")
    fallback = _nested_workload(ca, PeakResetScopes(0, cuda=_reset_based_cuda(ca)))
    assert fallback == exact
    assert exact["outer"]["peak_allocated"] == 70 * KiB
    assert exact["outer"]["self_peak_allocated"] == 30 * KiB


def test_fallback_clobbers_the_global_peak_and_misses_peaks_reset_by_others(ca):
    from cachealloc.profiler.scopes import PeakResetScopes

    ca._free(ca._malloc(5 * MiB))
    src = PeakResetScopes(0, cuda=_reset_based_cuda(ca))
    s = src.open()
    ca._free(ca._malloc(64 * KiB))
    ca.reset_peak_memory_stats(0)  # someone else resets inside the scope
    r = src.close(s)
    assert ca.max_memory_allocated(0) < 5 * MiB  # the program's peak is gone
    assert r["peak_allocated"] < 64 * KiB  # and the scope's peak is wrong: not exact


def test_without_cachealloc_the_profiler_warns_once_that_peaks_are_not_exact(ca, monkeypatch):
    torch = pytest.importorskip("torch")

    from cachealloc.profiler import scopes as profiler_scopes

    monkeypatch.setattr(profiler_scopes, "_cachealloc_initialized", lambda: False)
    monkeypatch.setattr(profiler_scopes, "_warned_not_exact", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="nothing to profile"):
        profiler_scopes.make_scope_source(0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.warns(RuntimeWarning, match="NOT exact"):
        src = profiler_scopes.make_scope_source("cuda:0")
    assert isinstance(src, profiler_scopes.PeakResetScopes) and not src.exact
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profiler_scopes.make_scope_source(0)  # no second warning


def test_c_api_free_of_unknown_pointer_reports_and_changes_nothing(ca, capfd):
    lib = ca.lib()
    p = ca._malloc(4096)
    before = ca.memory_stats()
    lib.cachealloc_free(ctypes.c_void_p(0x12345000), 0, 0, None)        # PyTorch's entry point
    assert b"did not allocate" in lib.cachealloc_last_error()
    lib.cachealloc_free_ctx(ctypes.c_void_p(0x12346000), 0, None, None)
    assert b"0x12346000" in lib.cachealloc_last_error()
    assert capfd.readouterr().err.count("did not allocate") == 2
    assert ca.memory_stats() == before
    ca._free(p)


# --- the package's own API ------------------------------------------------

def test_memory_summary_keeps_native_precision():
    r = _py("""
import cachealloc as ca, torch.cuda.memory as m
ca.init("", "simulated:8589934592")
ca._malloc(1946 << 20)
s = ca.memory_stats()
m.memory_stats = lambda device=None: s
print(ca.memory_summary().splitlines()[7]); print(m.memory_summary(0).splitlines()[7])
""")
    if "No module named 'torch'" in r.stderr:
        pytest.skip("torch is not installed")
    ours, native = r.stdout.splitlines()
    assert "1946 MiB" in native
    assert "1 GiB" not in ours, ours  # was: 1.90 GiB shown as '1 GiB'


@pytest.mark.parametrize("abbreviated", [False, True])
def test_memory_summary_is_natives_table_but_for_the_title(ca, monkeypatch, abbreviated):
    memory = pytest.importorskip("torch.cuda.memory")
    blocks = [ca._malloc(1946 * MiB)] + [ca._malloc(1000) for _ in range(3000)]
    ca._free(blocks.pop())
    stats = ca.memory_stats()
    monkeypatch.setattr(memory, "memory_stats", lambda device=None: stats)
    ours = ca.memory_summary(0, abbreviated=abbreviated).splitlines()
    native = memory.memory_summary(0, abbreviated=abbreviated).splitlines()
    assert "cachealloc CUDA memory summary" in ours[1] and len(ours[1]) == len(native[1])
    assert ours[:1] + ours[2:] == native[:1] + native[2:]
    for p in blocks:
        ca._free(p)


def test_summary_units_follow_the_all_row_and_change_at_768_kib_and_750_k():
    from cachealloc.summary import _format_count, _format_size

    assert _format_size(767 * KiB, 767 * KiB) == "785408 B  "
    assert _format_size(768 * KiB, 768 * KiB) == "   768 KiB"
    assert _format_size(1946 * MiB, 1946 * MiB) == "  1946 MiB"  # floored, never "1 GiB"
    assert _format_size(2 * MiB, 1946 * MiB) == "     2 MiB"   # a pool row: the "all" row's unit
    assert _format_size(1000, 1946 * MiB) == "     0 MiB"
    assert _format_count(749_999, 749_999) == " 749999   "
    assert _format_count(750_000, 750_000) == "    750 K "


def test_malloc_size_overflow_is_refused():
    r = _py("import cachealloc as ca\nca.init('', 'simulated:8589934592')\n"
            "p = ca._malloc(2**64 + 1000)\nprint(ca.memory_allocated())")
    assert r.returncode != 0, f"allocated {r.stdout.strip()} bytes for a 2**64+1000 request"
    assert "OverflowError: size 18446744073709552616" in r.stderr


@pytest.mark.parametrize("args,error,message", [
    ((2**64 + 1000,), OverflowError, "size 18446744073709552616"),  # ctypes made it 1000
    ((2**63,), OverflowError, "size 9223372036854775808"),
    ((-1,), ValueError, "size must be >= 0"),
    ((True,), TypeError, "size must be an int"),
    ((4096, 2**32), ValueError, "device 4294967296 out of range"),  # ctypes made it 0
    ((4096, -1), ValueError, "device -1 out of range"),
    ((4096, 0, 2**64), OverflowError, "stream 18446744073709551616"),
    ((4096, 0, -1), ValueError, "stream must be >= 0"),
])
def test_malloc_arguments_outside_their_c_range_are_refused(ca, args, error, message):
    with pytest.raises(error, match=message):
        ca._malloc(*args)
    assert ca.memory_stats()["allocation.all.allocated"] == 0


def test_free_of_an_unknown_or_freed_pointer_raises_and_changes_nothing(ca, capfd):
    p = ca._malloc(4096)
    before = ca.memory_stats()
    with pytest.raises(ca.CacheallocError, match="0x12345000 was not allocated by cachealloc"):
        ca._free(0x12345000)
    with pytest.raises(OverflowError, match="ptr"):
        ca._free(2**64 + p)  # ctypes would have freed p
    assert ca.memory_stats() == before
    ca._free(0)  # as free(NULL)
    ca._free(p)
    with pytest.raises(ca.CacheallocError, match="already freed"):
        ca._free(p)
    assert ca.memory_allocated() == 0
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("conf, backend, error, message", [
    (123, "simulated", TypeError, "conf must be a str"),
    (b"max_split_size_mb:64", "simulated", TypeError, "conf must be a str"),
    ("", 5, TypeError, "backend must be a str"),
    # ctypes passes a char* that ends at the NUL: the rest was silently ignored.
    ("max_split_size_mb:64\x00no_such_option:1", "simulated", ValueError, "conf .*NUL"),
    ("", "simulated:1024\x00junk", ValueError, "backend .*NUL"),
])
def test_init_rejects_wrong_types_and_nul_characters_and_changes_nothing(ca, conf, backend, error,
                                                                         message):
    with pytest.raises(error, match=message):
        ca.init(conf, backend)
    assert ca.backend() == "simulated:8589934592"
    assert ca.memory_stats()["max_split_size"] == -1


@pytest.mark.parametrize("bad, error", [
    ("0.5", TypeError), (None, TypeError), (True, TypeError), ([0.5], TypeError),
    (-0.1, ValueError), (1.5, ValueError), (float("nan"), ValueError),
])
def test_memory_fraction_wrong_type_is_a_type_error_and_changes_nothing(ca, bad, error):
    # As torch.cuda.set_per_process_memory_fraction: TypeError for a
    # fraction that is not a number, ValueError outside [0, 1].
    with pytest.raises(error, match="fraction"):
        ca.set_per_process_memory_fraction(bad, 0)
    fraction = ctypes.c_double()
    assert ca.lib().cachealloc_memory_fraction(0, ctypes.byref(fraction)) == 0
    assert fraction.value == 1.0


def test_install_again_with_another_config_is_refused_not_ignored(ca, monkeypatch):
    # A second install() returned silently, leaving the first config in
    # force: a user's max_split_size_mb was dropped without a word.
    monkeypatch.setattr(ca._core, "_mode", "plain")  # as after a first install()
    ca.install()  # nothing asked for: still a no-op
    ca.install(conf="", backend="simulated:8589934592")  # what is in force: a no-op
    with pytest.raises(RuntimeError, match="already installed.*max_split_size_mb:64"):
        ca.install(conf="max_split_size_mb:64")
    with pytest.raises(RuntimeError, match="already installed.*simulated:1024"):
        ca.install(backend="simulated:1024")
    assert ca.memory_stats(0)["max_split_size"] == -1 and ca.backend() == "simulated:8589934592"


def test_uninitialized_device_error_names_the_cause():
    r = _py("import cachealloc as ca\nca.memory_stats(0)")
    # Without a GPU, initializing on the CUDA backend fails, and the error
    # says so (not "device 0 out of range (-1 devices)").
    if r.returncode == 0:
        pytest.skip("cachealloc initializes on this machine (a CUDA device is present)")
    assert "CacheallocError: backend 'cuda': no CUDA device is available" in r.stderr, r.stderr


def test_device_index_before_init_reports_what_memory_stats_reports():
    r = _py("""
import cachealloc as ca
for call in (lambda: ca.memory_stats(), lambda: ca.memory_stats(0), lambda: ca._malloc(1, 1)):
    try:
        call()
        print("ok")
    except Exception as e:
        print(type(e).__name__, e)
""")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 3, r.stderr
    if lines[0] == "ok":
        pytest.skip("cachealloc initializes on this machine (a CUDA device is present)")
    assert lines[0].startswith("CacheallocError") and lines[1] == lines[0] and lines[2] == lines[0]


def test_record_history_state_keeps_a_one_entry_ring_as_native(ca):
    # torch/csrc/cuda/memory_snapshot.cpp: max_entries = enabled == "all" ? max_entries : 1,
    # and history is recorded whenever enabled is not None.
    ca.record_memory_history("state", max_entries=1000)
    blocks = [ca._malloc(MiB) for _ in range(5)]
    (trace,) = ca.snapshot()["device_traces"]
    assert len(trace) == 1 and (trace[0]["action"], trace[0]["addr"]) == ("alloc", blocks[-1])
    ca.record_memory_history("all", max_entries=3)
    blocks += [ca._malloc(MiB) for _ in range(5)]
    assert len(ca.snapshot()["device_traces"][0]) == 3
    for p in blocks:
        ca._free(p)


@pytest.mark.parametrize("bad", [True, False, 0, 1.5, "10"])
def test_record_history_rejects_max_entries_that_are_not_positive_ints(ca, bad):
    with pytest.raises(ValueError, match="max_entries"):
        ca.record_memory_history("all", max_entries=bad)


def test_record_history_skip_actions_as_native(ca):
    # torch's _record_memory_history(skip_actions=[...]): those actions are
    # left out; every call replaces the set.
    ca.record_memory_history("all", max_entries=1000, skip_actions=["free_requested", "segment_alloc"])
    ca._free(ca._malloc(MiB))
    assert [e["action"] for e in ca.snapshot()["device_traces"][0]] == ["alloc", "free_completed"]
    ca.record_memory_history(None)
    ca.record_memory_history("all", max_entries=1000)
    ca._free(ca._malloc(MiB))
    assert [e["action"] for e in ca.snapshot()["device_traces"][0]] == [
        "alloc", "free_requested", "free_completed"]


@pytest.mark.parametrize("bad", [["allocs"], ["alloc,free_completed"], [""], [3], ["user_defined"],
                                 "alloc"])
def test_record_history_rejects_unknown_skip_actions_and_changes_nothing(ca, bad):
    ca.record_memory_history("all", max_entries=1000, skip_actions=["alloc"])
    with pytest.raises(ValueError, match="unknown action|list of action names"):
        ca.record_memory_history("all", max_entries=1000, skip_actions=bad)
    ca._free(ca._malloc(MiB))
    # The earlier set is still in force.
    assert "alloc" not in [e["action"] for e in ca.snapshot()["device_traces"][0]]
    ca.record_memory_history(None)


def test_history_action_names_are_natives():
    # torch 2.11's TraceEntry::Action names that the CUDA allocator records
    # (user_defined is an annotation, not an action skip_actions can name).
    from cachealloc import _native
    names = _native.lib().cachealloc_history_action_names().decode().split(",")
    assert names == ["alloc", "free_requested", "free_completed", "segment_alloc",
                     "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"]


@pytest.mark.parametrize("bad", [b"allocs", b"alloc,", b",alloc", b"alloc,,oom", b"user_defined"])
def test_c_api_skip_actions_rejects_unknown_and_empty_names(ca, bad):
    lib = ca._native.lib()
    assert lib.cachealloc_set_history_skip_actions(b"alloc,oom") == 0
    assert lib.cachealloc_set_history_skip_actions(bad) == -1
    assert b"unknown action" in lib.cachealloc_last_error()
    assert lib.cachealloc_set_history_skip_actions(None) == 0
