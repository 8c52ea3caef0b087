"""GPUMemoryProfiler: the API of the GPUMemoryProfiler usage guide (the
`gpumemprof` module, published as `stormlog`), on cachealloc's exact scope
counters.

    import cachealloc
    cachealloc.install()
    from cachealloc.profiler import GPUMemoryProfiler

    profiler = GPUMemoryProfiler(device="cuda:0")
    result = profiler.profile_function(train_step, model, data)
    print(result.memory_allocated, result.peak_memory_usage(), result.execution_time)
    with profiler.profile_context(name="data_loading"):
        ...
    print(profiler.get_summary()["peak_memory_usage"])

Every call or block is a scope of MemoryProfiler (memory_profiler.py), so
nested calls get exact total and self peaks; results are ProfileResults
(profile_result.py) holding MemorySnapshots (snapshot.py). docs/profiling.md
has the table of where this departs from the guide, and why.

Under PyTorch's native allocator (cachealloc not installed) it keeps
working on PyTorch's counters (torch.cuda.memory_stats), and `exact` is
False. Figures then become approximate where PyTorch's counters cannot
separate a call from the rest of the program:
- peaks come from torch.cuda.reset_peak_memory_stats() at every call's
  start and end (as the guide does): a reset elsewhere during a call makes
  its peak too low, and max_memory_allocated() stops meaning the program's
  peak;
- memory_allocated / memory_freed / tensor counts are differences of
  accumulated counters: wrong if reset_accumulated_memory_stats() runs
  during a call.
In both modes, allocations made by other threads during a call count as
the call's (the allocator's counters are per device).
"""
from __future__ import annotations

import contextlib
import sys
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional

from .leaks import LeakReport
from .memory_profiler import MemoryProfiler, cpu_rss_bytes
from .monitor import MemoryAlert, MemoryMonitor
from .profile_result import ProfileResult, from_scope
from .results import format_table
from .scope_table import format_scope_table
from .snapshot import MemorySnapshot


class ProfiledBlock:
    """What profile_context yields (the guide's yields nothing): the block's
    name, and its ProfileResult once the block has ended."""

    def __init__(self, name: str):
        self.name = name
        self.result: Optional[ProfileResult] = None


class GPUMemoryProfiler:
    """The guide's profiler, exact under cachealloc.

    device: "cuda:N", N, a torch.device, or None (the current device);
    an invalid one raises ValueError/TypeError here, in the constructor.
    track_tensors: fill tensors_created/deleted (allocator block counts).
    track_cpu_memory: record this process's resident memory in snapshots.
    collect_stack_traces: record where each call was made (snapshots'
    stack_trace), and turn on allocation history so find_leaks() names
    allocation sites. max_snapshots (extra): monitoring snapshots kept.

    Departures from the guide, on purpose (docs/profiling.md has the table):
    peaks are exact and no peak statistic is reset, neither per call nor by
    clear_results(); tensors_created/deleted count allocator blocks; the
    summary's totals count each byte once when profiled calls nest.
    """

    def __init__(self, device: Any = None, track_tensors: bool = False,
                 track_cpu_memory: bool = True, collect_stack_traces: bool = False,
                 max_snapshots: int = 10_000):
        if isinstance(max_snapshots, bool) or not isinstance(max_snapshots, int) or max_snapshots < 1:
            raise ValueError(f"max_snapshots must be an int >= 1, got {max_snapshots!r}")
        self._engine = MemoryProfiler(device, track_tensors, track_cpu_memory,
                                      collect_stack_traces)
        self.device: int = self._engine.device  # the CUDA device index
        self.exact: bool = self._engine.exact
        self.track_tensors = track_tensors
        self.track_cpu_memory = track_cpu_memory
        self.collect_stack_traces = collect_stack_traces
        self.results: List[ProfileResult] = []  # close order: a nested call before its caller
        self.snapshots: Deque[MemorySnapshot] = deque(maxlen=max_snapshots)
        self._monitor: Optional[MemoryMonitor] = None
        self.baseline_snapshot = self.take_snapshot("baseline")

    # --- profiling ----------------------------------------------------------

    def profile_function(self, func: Callable, *args, **kwargs) -> ProfileResult:
        """Calls func(*args, **kwargs) and returns its ProfileResult (named
        func.__name__); func's return value is dropped, as in the guide. If
        func raises, the result is still recorded (results[-1], with
        `exception` set) and the exception propagates."""
        if not callable(func):
            raise TypeError(f"profile_function needs a callable, got {type(func).__name__}")
        with self.profile_context(name=getattr(func, "__name__", repr(func))) as block:
            func(*args, **kwargs)
        return block.result

    @contextlib.contextmanager
    def profile_context(self, name: str = "context") -> Iterator[ProfiledBlock]:
        """Profiles the block as a call named `name`; the result joins
        `results` when the block ends, also when it raises (the exception
        propagates). Blocks and calls nest."""
        block = ProfiledBlock(name)
        scope = None  # stays None when the name is refused: nothing to record
        try:
            with self._engine.profile_context(name) as scope:
                yield block
                self._synchronize()
        finally:
            if scope is not None and scope.result is not None:
                block.result = from_scope(scope.result)
                self.results.append(block.result)

    def _synchronize(self) -> None:
        # execution_time covers the call's GPU work, as in the guide. Only
        # where PyTorch has started CUDA: the simulated device has no
        # streams, and starting CUDA here would be a side effect.
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize(self.device)

    # --- snapshots and monitoring ------------------------------------------

    def take_snapshot(self, operation: Optional[str] = None) -> MemorySnapshot:
        """The device's memory now, as a MemorySnapshot."""
        now = self._engine._source.current_bytes()
        return MemorySnapshot(
            timestamp=time.time(), allocated_memory=now["allocated"],
            reserved_memory=now["reserved"], active_memory=now["active"],
            inactive_memory=now["inactive_split"],
            cpu_memory=cpu_rss_bytes() if self.track_cpu_memory else None,
            device_id=self.device, operation=operation)

    def start_monitoring(self, interval: float = 0.1, allocated_threshold: Optional[int] = None,
                         reserved_threshold: Optional[int] = None,
                         callback: Optional[Callable[[MemoryAlert], None]] = None) -> None:
        """Takes a MemorySnapshot (operation "monitor") every `interval`
        seconds on a background thread into `snapshots`. Extras: alerts
        when allocated/reserved bytes go above a threshold (monitor.py).
        Raises ValueError for an interval that is not > 0 and RuntimeError
        when already monitoring (the guide ignores a second start)."""
        if self._monitor is not None and self._monitor.running:
            raise RuntimeError("monitoring is already running; call stop_monitoring() first")
        self._monitor = MemoryMonitor(self._monitor_read, self.device, interval,
                                      allocated_threshold, reserved_threshold, callback)
        self._monitor.start()

    def _monitor_read(self) -> Dict[str, int]:
        snap = self.take_snapshot("monitor")
        self.snapshots.append(snap)
        return {"allocated": snap.allocated_memory, "reserved": snap.reserved_memory}

    def stop_monitoring(self) -> List[MemoryAlert]:
        """Stops the monitoring thread (no-op when not monitoring); returns
        the alerts it raised (extra)."""
        if self._monitor is None:
            return []
        self._monitor.stop()
        return list(self._monitor.alerts)

    @property
    def monitoring(self) -> bool:
        return self._monitor is not None and self._monitor.running

    # --- summary ------------------------------------------------------------

    def get_summary(self) -> Dict[str, Any]:
        """The guide's summary. Totals (time, bytes, net change) add up the
        outermost profiled calls only, so a nested call's bytes count once
        (the guide adds up every result); peak_memory_usage is the highest
        exact peak of any call. With no results the same keys hold zeros.
        Each function_summaries entry adds self_peak_memory (highest peak
        while no nested call was running) and exceptions (calls that
        raised) to the guide's keys."""
        outer = [r for r in self.results if r.scope.parent_id is None]
        allocated = sum(r.memory_allocated for r in outer)
        freed = sum(r.memory_freed for r in outer)
        current = self.take_snapshot("current")
        return {
            "device": f"cuda:{self.device}",
            "exact": self.exact,
            "total_functions_profiled": len({r.function_name for r in self.results}),
            "total_function_calls": len(self.results),
            "total_execution_time": sum(r.execution_time for r in outer),
            "total_memory_allocated": allocated,
            "total_memory_freed": freed,
            "net_memory_change": allocated - freed,
            "peak_memory_usage": max((r.peak_memory_usage() for r in self.results), default=0),
            "current_memory_usage": current.allocated_memory,
            "baseline_memory_usage": self.baseline_snapshot.allocated_memory,
            "memory_change_from_baseline":
                current.allocated_memory - self.baseline_snapshot.allocated_memory,
            "function_summaries": self._function_summaries(),
            "monitoring_active": self.monitoring,
            "snapshots_collected": len(self.snapshots),
        }

    def _function_summaries(self) -> Dict[str, Dict[str, Any]]:
        groups: Dict[str, List[ProfileResult]] = {}
        for r in self.results:
            groups.setdefault(r.function_name, []).append(r)
        out = {}
        for name, rs in groups.items():
            n, total_time = len(rs), sum(r.execution_time for r in rs)
            total_allocated = sum(r.memory_allocated for r in rs)
            out[name] = {
                "call_count": n, "total_time": total_time, "avg_time": total_time / n,
                "total_memory_allocated": total_allocated,
                "avg_memory_allocated": total_allocated / n,
                "peak_memory": max(r.peak_memory_usage() for r in rs),
                "self_peak_memory": max(r.self_peak_memory_usage() for r in rs),
                "exceptions": sum(r.exception is not None for r in rs),
            }
        return out

    def clear_results(self) -> None:
        """Forgets results and snapshots and takes a new baseline snapshot
        ("new_baseline"). Unlike the guide it resets no peak statistic:
        peaks are per call already."""
        self.results.clear()
        self.snapshots.clear()
        self._engine.clear_results()
        self.baseline_snapshot = self.take_snapshot("new_baseline")

    # --- extras: what exact scopes add -------------------------------------

    def format_results(self) -> str:
        """Every call in close order, indented by nesting, with total and
        self peaks (results.format_table)."""
        return format_table([r.scope for r in self.results])

    def scope_table(self) -> str:
        """Per name: torch.profiler's "CUDA Mem"/"Self CUDA Mem" sums beside
        the exact total and self peaks, and where the highest peak was
        reached (scope_table.py)."""
        return format_scope_table([r.scope for r in self.results])

    def find_leaks(self, min_calls: int = 3) -> List[LeakReport]:
        """Names whose last min_calls calls each left memory allocated that
        was still allocated when the next call began (or now); an ordinary
        training loop is not a leak (leaks.py)."""
        return self._engine.find_leaks(min_calls)

    def __enter__(self) -> "GPUMemoryProfiler":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_monitoring()
