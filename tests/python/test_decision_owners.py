"""One owner per decision (docs/design.md, "Who decides what").

- Whether an allocation or free records a context is decided by the runtime
  alone: framework glue hands it a capture callback with PyTorch's settings
  (cachealloc_record_history_from) and then calls the plain entry points; the
  runtime calls back exactly when the settings say so, with the flags that
  say what to gather.
- A profiler's numbers (block size, allocated and reserved totals) come back
  from the call that made the change, measured under its lock: with many
  threads allocating at once, each report's totals are the totals right
  after that call's own change (a second call to read them would see other
  threads' changes too)."""
import ctypes
import threading

import pytest

from cachealloc import _native


class Source:
    """A capture callback that hands out numbered contexts and logs every
    call and release."""

    def __init__(self, nothing_without_frames=False):
        self.calls = []     # flags of each capture call, in order
        self.released = []  # context ids released
        self.next_id = 0x1000
        self.nothing_without_frames = nothing_without_frames
        self.capture = _native.CAPTURE_FN(self._capture)
        self.release = _native.RELEASE_FN(self._release)

    def _capture(self, user, flags):
        self.calls.append(flags)
        if self.nothing_without_frames and not flags & 1:
            return None  # "nothing to stamp": no context recorded
        self.next_id += 16
        return self.next_id

    def _release(self, ctx):
        self.released.append(ctx)

    def install(self, lib, enabled, context, max_entries=100):
        _native.check(lib.cachealloc_record_history_from(enabled, context, max_entries,
                                                         self.capture, None, self.release))


def malloc_free(lib, size=4096, reported=False):
    out = ctypes.c_void_p()
    if reported:
        report = _native.BlockReportStruct()
        assert lib.cachealloc_try_malloc_report(size, 0, None, ctypes.byref(out),
                                                ctypes.byref(report)) == 0
        assert lib.cachealloc_free_report(out, 0, ctypes.byref(report)) == 0
    else:
        assert lib.cachealloc_try_malloc(size, 0, None, ctypes.byref(out)) == 0
        lib.cachealloc_free(out, 0, 0, None)


# (enabled, RecordContext) -> (alloc's flags, free's flags); None: no call.
# 1 = CACHEALLOC_CAPTURE_FRAMES, 2 = CACHEALLOC_CAPTURE_FRAMES_IN_TRACE.
DECISIONS = {
    (1, 0): (0, 0),   # history without context: frameless contexts (metadata)
    (1, 1): (1, 0),   # "state": frames on blocks, not in the trace
    (1, 2): (3, 2),   # "alloc": frames on alloc entries
    (1, 3): (3, 3),   # "all": frees too
    (0, 1): (None, None),
    (0, 3): (None, None),
}


@pytest.mark.parametrize("settings", sorted(DECISIONS))
@pytest.mark.parametrize("reported", [False, True])
def test_the_runtime_decides_when_a_context_is_captured(ca, settings, reported):
    lib = ca.lib()
    src = Source()
    src.install(lib, *settings)
    assert lib.cachealloc_history_enabled() == settings[0]
    malloc_free(lib, reported=reported)  # the caller passes no context and decides nothing
    expected = [f for f in DECISIONS[settings] if f is not None]
    assert src.calls == expected


def test_plain_record_history_drops_the_source_and_init_turns_everything_off(ca):
    lib = ca.lib()
    src = Source()
    src.install(lib, 1, 3)
    malloc_free(lib)
    assert len(src.calls) == 2
    _native.check(lib.cachealloc_record_history(1, 3, 0, 100))  # no source: runtime's own frames
    malloc_free(lib)
    assert len(src.calls) == 2
    src.install(lib, 1, 3)
    ca.init("", "simulated:8589934592")  # a new generation records nothing
    assert lib.cachealloc_history_enabled() == 0
    malloc_free(lib)
    assert len(src.calls) == 2


class Visitor(ctypes.Structure):
    SEG = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64,
                           ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64,
                           ctypes.c_uint64, ctypes.c_int)
    BLOCK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int,
                             ctypes.c_int, ctypes.c_void_p)
    TRACE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_uint64,
                             ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
    _fields_ = [("segment", SEG), ("block", BLOCK), ("trace", TRACE)]


def visit(lib):
    blocks, trace = [], []
    v = Visitor(Visitor.SEG(lambda *a: None),
                Visitor.BLOCK(lambda u, size, req, alloc, active, ctx:
                              blocks.append((alloc, ctx))),
                Visitor.TRACE(lambda u, dev, action, addr, size, stream, t, ctx:
                              trace.append((action, ctx))))
    lib.cachealloc_visit_snapshot.argtypes = [ctypes.POINTER(Visitor), ctypes.c_void_p]
    _native.check(lib.cachealloc_visit_snapshot(ctypes.byref(v), None))
    return blocks, trace


def test_captured_contexts_reach_blocks_and_entries_and_are_released(ca):
    lib = ca.lib()
    src = Source(nothing_without_frames=True)
    src.install(lib, 1, 3)
    p = ca._malloc(4096)
    alloc_ctx = src.next_id
    blocks, trace = visit(lib)
    assert (1, alloc_ctx) in blocks
    assert (2, alloc_ctx) in trace  # action 2: alloc
    ca._free(p)
    free_ctx = src.next_id
    assert free_ctx != alloc_ctx
    _, trace = visit(lib)
    assert (3, free_ctx) in trace or (4, free_ctx) in trace  # free_requested / free_completed
    src.install(lib, 0, 0)  # off: the ring is cleared
    _native.check(lib.cachealloc_empty_cache(0))  # the segment kept its allocation's context
    assert {alloc_ctx, free_ctx} <= set(src.released)


def test_a_capture_that_returns_null_records_no_context(ca):
    lib = ca.lib()
    src = Source(nothing_without_frames=True)
    src.install(lib, 1, 1)  # "state": frees get a frameless call, which returns NULL
    p = ca._malloc(4096)
    alloc_ctx = src.next_id
    ca._free(p)
    assert src.calls == [1, 0] and src.next_id == alloc_ctx
    _, trace = visit(lib)
    # No context of its own: as native, a free's entries show the block's.
    frees = [ctx for action, ctx in trace if action in (3, 4)]
    assert frees and all(ctx == alloc_ctx for ctx in frees)


def current_totals(ca):
    s = ca.memory_stats()
    return s["allocated_bytes.all.current"], s["reserved_bytes.all.current"]


def test_a_report_gives_the_block_and_the_totals_of_that_moment(ca):
    lib = ca.lib()
    out = ctypes.c_void_p()
    report = _native.BlockReportStruct()
    held = []
    for size in (1000, 1 << 20, 3 << 20, 700):
        assert lib.cachealloc_try_malloc_report(size, 0, None, ctypes.byref(out),
                                                ctypes.byref(report)) == 0
        held.append(out.value)
        assert report.device == 0
        size_of = ctypes.c_size_t()
        _native.check(lib.cachealloc_block_size(out, ctypes.byref(size_of)))
        assert report.size == size_of.value
        assert (report.allocated, report.reserved) == current_totals(ca)
    for p in held:
        assert lib.cachealloc_free_report(p, -1, ctypes.byref(report)) == 0
        assert report.device == 0 and report.size > 0
        assert (report.allocated, report.reserved) == current_totals(ca)
    # Nothing made, nothing freed: device -1.
    assert lib.cachealloc_try_malloc_report(0, 0, None, ctypes.byref(out),
                                            ctypes.byref(report)) == 0
    assert out.value is None and report.device == -1
    assert lib.cachealloc_free_report(ctypes.c_void_p(0x12345000), 0, ctypes.byref(report)) == -1
    assert b"0x12345000" in lib.cachealloc_last_error() and report.device == -1


def test_reports_under_concurrency_are_each_calls_own_moment(ca):
    """Threads allocate distinct sizes at once. Sorted by their allocated
    total, the reports must form a chain in which each step is exactly that
    report's own block: the total right after its own change. Totals read by
    a second call would include other threads' later allocations (equal or
    skipped steps)."""
    lib = ca.lib()
    threads, per_thread = 8, 150
    base_allocated, _ = current_totals(ca)
    reports = [[] for _ in range(threads)]
    blocks = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def allocate(t):
        out, r = ctypes.c_void_p(), _native.BlockReportStruct()
        start.wait()
        for i in range(per_thread):
            size = 512 * (1 + t + threads * (i % 7))
            assert lib.cachealloc_try_malloc_report(size, 0, None, ctypes.byref(out),
                                                    ctypes.byref(r)) == 0
            blocks[t].append(out.value)
            reports[t].append((r.allocated, r.size, r.reserved))

    def free(t):
        r = _native.BlockReportStruct()
        start.wait()
        for p in blocks[t]:
            assert lib.cachealloc_free_report(p, 0, ctypes.byref(r)) == 0
            reports[t].append((r.allocated, r.size, r.reserved))

    for phase in (allocate, free):
        for r in reports:
            r.clear()
        workers = [threading.Thread(target=phase, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        chain = sorted(x for r in reports for x in r)
        if phase is allocate:
            previous, reserved = base_allocated, 0
            for allocated, size, res in chain:
                assert allocated == previous + size
                assert res >= reserved and res >= allocated  # reserved only grows here
                previous, reserved = allocated, res
            assert previous == current_totals(ca)[0]
            allocated_before_frees = previous
        else:
            previous = base_allocated
            for allocated, size, _ in chain:  # ascending: each free's total is the next minus it
                assert allocated == previous
                previous = allocated + size
            assert previous == allocated_before_frees
            assert current_totals(ca)[0] == base_allocated


def unreported_pairs(lib, n, size=4096):
    """n pairs through the glue's entry points with no report asked (the
    profiler off): each free counts toward detaching the reporters."""
    out = ctypes.c_void_p()
    for _ in range(n):
        assert lib.cachealloc_try_malloc_report(size, 0, None, ctypes.byref(out), None) == 0
        assert lib.cachealloc_free_report(out, -1, None) == 0


def test_reports_come_back_after_the_reporters_were_detached(ca):
    """Profile, stop (4,096 unreported frees in a row detach the reporters:
    benchmarks/count_profiler_path.sh shows the pair's cost fall back),
    profile again: the first reported call re-attaches them and gets its
    numbers."""
    lib = ca.lib()
    out, report = ctypes.c_void_p(), _native.BlockReportStruct()
    for _ in range(3):
        malloc_free(lib, reported=True)
        unreported_pairs(lib, 4097)
        assert lib.cachealloc_try_malloc_report(8192, 0, None, ctypes.byref(out),
                                                ctypes.byref(report)) == 0
        assert report.device == 0 and report.size == 8192
        assert (report.allocated, report.reserved) == current_totals(ca)
        assert lib.cachealloc_free_report(out, -1, ctypes.byref(report)) == 0
        assert report.device == 0 and report.size == 8192


# Detaches racing with reported calls on other threads:
# tests/cpp/front_stress_test.cc, ReportersDetachWhileOthersReport (native
# threads, under ThreadSanitizer in CI; Python threads here would hardly
# ever hit the window).
