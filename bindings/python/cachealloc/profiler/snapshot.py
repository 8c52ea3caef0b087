"""MemorySnapshot: the device's memory at one moment, with the field names
of the GPUMemoryProfiler usage guide (docs/profiling.md, "GPUMemoryProfiler").

Units: bytes; timestamp in seconds since the Unix epoch (time.time()).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional


@dataclass
class MemorySnapshot:
    """One reading of a device's memory.

    allocated_memory: bytes of blocks handed out to tensors
    (allocated_bytes.all.current). reserved_memory: bytes the allocator
    holds from the driver (reserved_bytes.all.current). active_memory:
    allocated blocks plus freed ones still waiting on a stream
    (active_bytes.all.current). inactive_memory: free pieces of split
    segments (inactive_split_bytes.all.current).

    Departures from the guide, on purpose:
    - cpu_memory is this process's resident memory (RSS), not the whole
      machine's used memory, and None (not 0) when CPU memory is not tracked.
    - In a ProfileResult's memory_peak, allocated_memory is the exact peak and
      reserved_memory the exact highest reserved level during the call (the
      two may be different moments); active_memory and inactive_memory are
      None there, because the allocator does not record them at the peak's
      moment. Its timestamp is when the peak was read (the call's end).
    """

    timestamp: float                # seconds since the Unix epoch
    allocated_memory: int           # bytes
    reserved_memory: int            # bytes
    active_memory: Optional[int]    # bytes; None only in a peak snapshot
    inactive_memory: Optional[int]  # bytes; None only in a peak snapshot
    cpu_memory: Optional[int]       # bytes of process RSS; None when not tracked
    device_id: int
    operation: Optional[str] = None  # e.g. "before_train_step", "monitor", "baseline"
    stack_trace: Optional[str] = None  # collect_stack_traces: where the call was made

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)
