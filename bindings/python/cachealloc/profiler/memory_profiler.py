"""cachealloc.profiler: exact memory per scope, monitoring, leak checks.

    import cachealloc, cachealloc.profiler as cp
    cachealloc.install()
    prof = cp.MemoryProfiler()
    with prof.profile_context("step"):
        with prof.profile_context("forward"):
            loss = model(x)
        with prof.profile_context("backward"):
            loss.backward()
    print(prof.format_results())
    prof.export_html("memory.html")

Each closed scope gives a ScopeResult (results.py): memory before
and after, its peak, bytes allocated and freed, time. "Total" numbers
include nested scopes; "self" numbers count only the time the scope was the
innermost one. A scope's peak is the highest allocated level while it was
open, not the sum of what it allocated (docs/profiling.md).

Exactness. Under cachealloc (install() or init()) each scope is kept by the
allocator itself, updated on every allocation under the device's lock: peaks
are exact at any depth and nothing global is reset (max_memory_allocated()
is untouched). Under PyTorch's native allocator the profiler falls back to
torch.cuda.reset_peak_memory_stats() at every scope boundary: nested peaks
are then NOT exact (anything else that resets peaks or allocates from
another thread while a scope is open skews them) and the resets clobber
outer measurements (max_memory_allocated() no longer reports the program's
peak). A warning says so once.

Scopes of one device nest across all profilers and threads: close them in
reverse order of opening (profile_context does); closing out of order
raises RuntimeError (CacheallocError) naming the scopes still open. Use one
profiling thread per device.

Units: bytes, seconds; timestamps are time.time().
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import traceback
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional

from . import export, html_report
from ..history import record_memory_history, snapshot
from ..lifecycle import mode
from .leaks import (NOTHING_STILL_ALLOCATED, LeakReport, LeakSite, allocation_sites,
                    growing_scopes)
from .monitor import MemoryAlert, MemoryMonitor, MemorySample
from .results import ScopeResult, ScopeSnapshot, ScopeSummary, format_table, summarize
from .scopes import make_scope_source

__all__ = ["MemoryProfiler", "ProfileScope", "ScopeResult", "ScopeSnapshot", "ScopeSummary",
           "MemoryAlert", "MemorySample", "LeakReport", "LeakSite"]

# History ring used when collect_stack_traces=True (entries, not bytes).
HISTORY_ENTRIES = 200_000
# cachealloc's own folder: frames in it are not the user's code.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_statm = (None, None)  # (pid, fd): the fd names the process that opened it


def cpu_rss_bytes() -> Optional[int]:
    """Resident memory of this process in bytes (/proc/self/statm), None
    where that is not available. The file stays open: a read is then one
    pread (about 3 µs instead of 30 for open+read+close); a forked child
    opens its own."""
    global _statm
    try:
        pid, fd = _statm
        if pid != os.getpid():
            fd = os.open("/proc/self/statm", os.O_RDONLY)
            _statm = (os.getpid(), fd)
        return int(os.pread(fd, 256, 0).split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


class ProfileScope:
    """What profile_context yields: the scope's name and id while open, and
    its ScopeResult once closed."""

    def __init__(self, name: str, scope_id: int, parent_id: Optional[int], token: int,
                 before: ScopeSnapshot, stack: Optional[List[str]]):
        self.name, self.id, self.parent_id = name, scope_id, parent_id
        self.result: Optional[ScopeResult] = None
        self._token, self._before, self._stack = token, before, stack
        self._start = time.perf_counter()


class MemoryProfiler:
    """Profiles device memory per named scope.

    device: None (current device), an int, "cuda", "cuda:N" or a
    torch.device. track_tensors: also report tensors_created/deleted, taken
    from the allocator's block counts (blocks handed out/freed while the
    scope was open: one per tensor storage the caching allocator served;
    views and tensors sharing a storage are not counted, and blocks freed
    by a scope may have been allocated before it). track_cpu_memory: record
    this process's resident CPU memory at each boundary. collect_stack_traces:
    record where each scope was opened, and turn on allocation history
    (HISTORY_ENTRIES entries, Python frames) so find_leaks() can name
    allocation sites.

    Raises TypeError/ValueError for bad arguments, RuntimeError when there is
    nothing to profile (cachealloc not initialized and no CUDA device).
    """

    def __init__(self, device: Any = None, track_tensors: bool = False,
                 track_cpu_memory: bool = True, collect_stack_traces: bool = False):
        for flag, value in (("track_tensors", track_tensors), ("track_cpu_memory", track_cpu_memory),
                            ("collect_stack_traces", collect_stack_traces)):
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be True or False, got {value!r}")
        self._source = make_scope_source(device)
        self.device: int = self._source.device
        self.exact: bool = self._source.exact
        self.track_tensors = track_tensors
        self.track_cpu_memory = track_cpu_memory
        self.collect_stack_traces = collect_stack_traces
        self._lock = threading.Lock()  # results and samples (the monitor thread adds samples)
        self._results: List[ScopeResult] = []
        self._samples: Deque[MemorySample] = deque(maxlen=1_000_000)
        self._open: List[ProfileScope] = []
        self._next_id = 1
        self._monitor: Optional[MemoryMonitor] = None
        # Capacity of the history ring when this profiler enabled history
        # (find_leaks tells a full ring that dropped entries from one that
        # did not); None when history is someone else's.
        self._history_entries: Optional[int] = None
        if collect_stack_traces:
            self._enable_history()

    # --- scopes -----------------------------------------------------------

    @contextlib.contextmanager
    def profile_context(self, name: str) -> Iterator[ProfileScope]:
        """Profiles the body as scope `name` (nestable). The result is kept
        even when the body raises; the exception propagates."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"scope name must be a non-empty string, got {name!r}")
        scope = self._open_scope(name)
        try:
            yield scope
        except BaseException as e:
            self._close_scope(scope, f"{type(e).__name__}: {e}", raising=True)
            raise
        self._close_scope(scope, None, raising=False)

    def profile_function(self, fn: Callable, *args, **kwargs):
        """Calls fn(*args, **kwargs) inside a scope named after fn
        (its __qualname__); returns what fn returns."""
        if not callable(fn):
            raise TypeError(f"profile_function needs a callable, got {type(fn).__name__}")
        with self.profile_context(getattr(fn, "__qualname__", repr(fn))):
            return fn(*args, **kwargs)

    def profile(self, fn: Any = None, *, name: Optional[str] = None):
        """Decorator: @prof.profile, @prof.profile("name") or
        @prof.profile(name="name"); every call is a scope."""
        if isinstance(fn, str):
            fn, name = None, fn
        if fn is None:
            return lambda f: self.profile(f, name=name)
        if not callable(fn):
            raise TypeError(f"profile decorates a callable, got {type(fn).__name__}")
        scope_name = name or getattr(fn, "__qualname__", repr(fn))

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.profile_context(scope_name):
                return fn(*args, **kwargs)
        return wrapper

    def _snapshot(self, name: str) -> ScopeSnapshot:
        now = self._source.current_bytes()
        return ScopeSnapshot(
            name=name, device=self.device, timestamp=time.time(), allocated=now["allocated"],
            reserved=now["reserved"], active=now["active"], inactive=now["inactive_split"],
            cpu_rss=cpu_rss_bytes() if self.track_cpu_memory else None)

    def _open_scope(self, name: str) -> ProfileScope:
        stack = None
        if self.collect_stack_traces:
            stack = [f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_stack()
                     if not f.filename.startswith(_PACKAGE_DIR) and "contextlib" not in f.filename]
        before = self._snapshot(name)
        token = self._source.open()
        parent = self._open[-1].id if self._open else None
        scope = ProfileScope(name, self._next_id, parent, token, before, stack)
        self._next_id += 1
        self._open.append(scope)
        self._add_sample(MemorySample(before.timestamp, before.allocated, before.reserved))
        return scope

    def _close_scope(self, scope: ProfileScope, exception: Optional[str], raising: bool) -> None:
        try:
            c = self._source.close(scope._token)
        except Exception as e:
            if not raising:
                raise
            # Do not hide the body's exception behind a bookkeeping error.
            import warnings

            warnings.warn(f"cachealloc.profiler: scope {scope.name!r} could not be closed: {e}",
                          RuntimeWarning)
            return
        duration = time.perf_counter() - scope._start
        self._open.remove(scope)
        # The scope's own values at open/close are exact; the reads around
        # them could see another thread's allocations.
        before, after = scope._before, self._snapshot(scope.name)
        before.allocated, before.reserved = c["allocated_at_open"], c["reserved_at_open"]
        after.allocated, after.reserved = c["allocated_at_close"], c["reserved_at_close"]
        result = ScopeResult(
            name=scope.name, id=scope.id, parent_id=scope.parent_id, depth=c["depth"],
            device=self.device, before=before, after=after,
            peak_allocated=c["peak_allocated"], peak_above_start=c["peak_above_open"],
            self_peak_allocated=c["self_peak_allocated"],
            self_peak_above_start=c["self_peak_above_open"],
            peak_reserved=c["peak_reserved"], self_peak_reserved=c["self_peak_reserved"],
            bytes_allocated=c["bytes_allocated"], bytes_freed=c["bytes_freed"],
            self_bytes_allocated=c["self_bytes_allocated"], self_bytes_freed=c["self_bytes_freed"],
            allocations=c["allocations"], frees=c["frees"],
            self_allocations=c["self_allocations"], self_frees=c["self_frees"],
            net_change=c["allocated_at_close"] - c["allocated_at_open"],
            tensors_created=c["allocations"] if self.track_tensors else None,
            tensors_deleted=c["frees"] if self.track_tensors else None,
            duration_s=duration, exact=self.exact, exception=exception, stack=scope._stack)
        scope.result = result
        with self._lock:
            self._results.append(result)
        self._add_sample(MemorySample(after.timestamp, after.allocated, after.reserved))

    # --- results ----------------------------------------------------------

    @property
    def results(self) -> List[ScopeResult]:
        """Closed scopes, in close order (a child before its parent)."""
        with self._lock:
            return list(self._results)

    @property
    def samples(self) -> List[MemorySample]:
        """Memory over time: scope boundaries and monitoring samples, by time."""
        with self._lock:
            return sorted(self._samples, key=lambda s: s.timestamp)

    def get_summary(self) -> Dict[str, ScopeSummary]:
        """Per scope name: calls, time, average bytes, maximum peaks."""
        return summarize(self.results)

    def format_results(self) -> str:
        """The results as a text table (close order, indented by depth)."""
        return format_table(self.results)

    def clear_results(self) -> None:
        """Forgets closed scopes and samples (open scopes are unaffected)."""
        with self._lock:
            self._results.clear()
            self._samples.clear()

    def _add_sample(self, sample: MemorySample) -> None:
        with self._lock:
            self._samples.append(sample)

    # --- exports ----------------------------------------------------------

    def export_json(self, path: str) -> None:
        """Results, summary and samples as JSON."""
        export.write_json(path, self.device, self.exact, self.results,
                                   self.get_summary(), self.samples)

    def export_csv(self, path: str) -> None:
        """One row per closed scope; snapshot fields flattened (before_allocated, ...)."""
        export.write_csv(path, self.results)

    def export_html(self, path: str, title: str = "cachealloc memory profile") -> None:
        """A self-contained HTML page (inline SVG, no network): allocated and
        reserved over time with scope bands and peaks, and the results table."""
        html_report.write_html(path, title, self.device, self.exact, self.results, self.samples)

    # --- monitoring and leaks ---------------------------------------------

    def start_monitoring(self, interval_s: float = 0.1, allocated_threshold: Optional[int] = None,
                         reserved_threshold: Optional[int] = None,
                         callback: Optional[Callable[[MemoryAlert], None]] = None) -> MemoryMonitor:
        """Samples memory every interval_s seconds on a background thread
        (samples join the timeline) and calls callback(MemoryAlert) when
        allocated or reserved bytes go above a threshold (default callback:
        a RuntimeWarning). Raises RuntimeError if already monitoring."""
        if self._monitor is not None and self._monitor.running:
            raise RuntimeError("monitoring is already running; call stop_monitoring() first")
        self._monitor = MemoryMonitor(self._source.current_bytes, self.device, interval_s,
                                      allocated_threshold, reserved_threshold, callback,
                                      on_sample=self._add_sample)
        self._monitor.start()
        return self._monitor

    def stop_monitoring(self) -> List[MemoryAlert]:
        """Stops the sampler thread; returns the alerts it raised."""
        if self._monitor is None:
            return []
        self._monitor.stop()
        return list(self._monitor.alerts)

    def find_leaks(self, min_calls: int = 3) -> List[LeakReport]:
        """Scope names whose last min_calls (or more) calls each retained
        memory: left it allocated, and it was still allocated when the next
        call of the name began (or now). See leaks.py: an ordinary
        forward/backward loop is not a leak. With allocation history
        (collect_stack_traces=True or cachealloc.record_memory_history()),
        reports name the allocation sites of the blocks still allocated, and
        a name none of whose flagged calls' blocks is still allocated is
        dropped."""
        if isinstance(min_calls, bool) or not isinstance(min_calls, int) or min_calls < 1:
            raise ValueError(f"min_calls must be an int >= 1, got {min_calls!r}")
        runs = growing_scopes(self.results, min_calls, self._source.current_bytes()["allocated"])
        if not runs:
            return []
        snapshot = self._memory_snapshot()
        reports = []
        for name, run in runs.items():
            windows = [(r.before.timestamp, r.after.timestamp) for r, _ in run]
            sites, note = allocation_sites(snapshot, self.device, windows, self._trace_slack_us(),
                                           self._history_entries)
            if note == NOTHING_STILL_ALLOCATED:
                continue
            retained = [kept for _, kept in run]
            reports.append(LeakReport(name, len(run), sum(retained),
                                      [r.net_change for r, _ in run], retained, sites, note))
        return reports

    def _torch_records_history(self) -> bool:
        return not self.exact or mode() == "torch-extension"

    def _trace_slack_us(self) -> int:
        # cachealloc's own history stamps entries with the system clock, as
        # time.time(); PyTorch's recorder uses its approximate clock.
        return 1000 if self._torch_records_history() else 1

    def _enable_history(self) -> None:
        self._history_entries = HISTORY_ENTRIES
        if self.exact:
            record_memory_history("all", context="alloc", stacks="python",
                                  max_entries=self._history_entries)
        else:
            import torch

            torch.cuda.memory._record_memory_history("all", context="alloc", stacks="python",
                                                     max_entries=self._history_entries)

    def _memory_snapshot(self) -> dict:
        if self.exact:
            return snapshot()
        import torch

        return torch.cuda.memory._snapshot()
