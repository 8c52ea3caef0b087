"""ProfileResult: what GPUMemoryProfiler records for one profiled call or
context, with the usage guide's fields, on top of the exact per-scope
counters (ScopeResult, results.py).

Units: bytes; seconds.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional

from .results import ScopeResult, ScopeSnapshot
from .snapshot import MemorySnapshot


@dataclass
class ProfileResult:
    """One profiled call (profile_function) or block (profile_context).

    The guide's fields:
    - memory_allocated / memory_freed: block bytes handed out / freed during
      the call, transient blocks included (allocated_bytes.all.allocated and
      .freed, as the allocator counts them; nested calls included).
    - memory_before / memory_after / memory_peak: MemorySnapshots.
    - tensors_created / tensors_deleted: see the departures below.
    - execution_time: wall seconds, GPU work of the call included (the
      device is synchronized before the call's end is taken).

    Departures from the guide, on purpose:
    - peak_memory_usage() is exact, read from the allocator's own scope
      counters; nobody's peak statistics are reset (the guide resets them
      before every call). Under PyTorch's native allocator it comes from
      peak resets after all (see `exact`).
    - tensors_created / tensors_deleted count allocator blocks handed out /
      freed during the call: one per tensor storage the caching allocator
      served, exact (the guide counts CUDA tensors visible to the garbage
      collector, which misses temporaries and counts views). None unless
      track_tensors.
    - A call that raised is recorded with its real figures up to the raise
      (the guide records 0 allocated and freed), and `exception` says what
      was raised.

    Extras: `scope` holds every exact counter (self and total peaks and
    bytes for nested scopes, see docs/profiling.md); `exact` is False under
    PyTorch's native allocator.
    """

    function_name: str
    execution_time: float           # seconds
    memory_before: MemorySnapshot
    memory_after: MemorySnapshot
    memory_peak: MemorySnapshot
    memory_allocated: int           # bytes
    memory_freed: int               # bytes
    tensors_created: Optional[int]  # allocator blocks; None unless track_tensors
    tensors_deleted: Optional[int]
    call_count: int = 1
    exception: Optional[str] = None  # "ValueError: ..." when the call raised
    exact: bool = True
    scope: Optional[ScopeResult] = None

    def memory_diff(self) -> int:
        """Net change of allocated bytes: after - before
        (= memory_allocated - memory_freed)."""
        return self.memory_after.allocated_memory - self.memory_before.allocated_memory

    def peak_memory_usage(self) -> int:
        """Highest allocated bytes during the call, absolute: what
        torch.cuda.max_memory_allocated() would read had its peak been reset
        at the call's start. Exact under cachealloc."""
        return self.memory_peak.allocated_memory

    # --- extras: what the allocator's scope counters add ---------------

    def peak_memory_increase(self) -> int:
        """How far the call pushed allocated memory above its start (bytes)."""
        return self.peak_memory_usage() - self.memory_before.allocated_memory

    def self_peak_memory_usage(self) -> int:
        """Highest allocated bytes while this call was the innermost profiled
        scope (nested profiled calls excluded), absolute."""
        return self.scope.self_peak_allocated

    def to_dict(self) -> Dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "scope"}
        for key in ("memory_before", "memory_after", "memory_peak"):
            d[key] = d[key].to_dict()
        d["memory_diff"] = self.memory_diff()
        d["peak_memory_usage"] = self.peak_memory_usage()
        d["self_peak_memory_usage"] = self.self_peak_memory_usage()
        return d


def guide_snapshot(s: ScopeSnapshot, operation: str, stack: Optional[str]) -> MemorySnapshot:
    """A scope boundary's ScopeSnapshot in the guide's MemorySnapshot form."""
    return MemorySnapshot(timestamp=s.timestamp, allocated_memory=s.allocated,
                          reserved_memory=s.reserved, active_memory=s.active,
                          inactive_memory=s.inactive, cpu_memory=s.cpu_rss, device_id=s.device,
                          operation=operation, stack_trace=stack)


def from_scope(r: ScopeResult) -> ProfileResult:
    """The ProfileResult of a closed scope."""
    stack = "\n".join(r.stack) if r.stack is not None else None
    peak = MemorySnapshot(timestamp=r.after.timestamp, allocated_memory=r.peak_allocated,
                          reserved_memory=r.peak_reserved, active_memory=None,
                          inactive_memory=None, cpu_memory=None, device_id=r.device,
                          operation=f"peak_{r.name}")
    return ProfileResult(
        function_name=r.name, execution_time=r.duration_s,
        memory_before=guide_snapshot(r.before, f"before_{r.name}", stack),
        memory_after=guide_snapshot(r.after, f"after_{r.name}", stack), memory_peak=peak,
        memory_allocated=r.bytes_allocated, memory_freed=r.bytes_freed,
        tensors_created=r.tensors_created, tensors_deleted=r.tensors_deleted,
        exception=r.exception, exact=r.exact, scope=r)
