"""cachealloc.profiler: exact memory per scope, monitoring, leak checks
(docs/profiling.md).

    import cachealloc, cachealloc.profiler as cp
    profiler = cp.GPUMemoryProfiler()          # the usage guide's API
    result = profiler.profile_function(step, batch)
    prof = cp.MemoryProfiler()                 # scopes, exports
    with prof.profile_context("step"):
        ...
    print(prof.format_results())

Modules: gpu_profiler (GPUMemoryProfiler), profile_result (ProfileResult),
snapshot (MemorySnapshot), memory_profiler (MemoryProfiler), scopes (where a
scope's numbers come from), results (what a closed scope gives),
scope_table (per-name table: sums vs exact peaks), monitor (sampling and
alerts), leaks (memory calls keep), export and html_report (files).
"""
from .gpu_profiler import GPUMemoryProfiler, ProfiledBlock
from .leaks import LeakReport, LeakSite
from .memory_profiler import MemoryProfiler, ProfileScope, cpu_rss_bytes
from .monitor import MemoryAlert, MemoryMonitor, MemorySample
from .profile_result import ProfileResult
from .results import ScopeResult, ScopeSnapshot, ScopeSummary
from .scope_table import format_scope_table
from .snapshot import MemorySnapshot

__all__ = ["GPUMemoryProfiler", "ProfiledBlock", "ProfileResult", "MemorySnapshot",
           "MemoryProfiler", "ProfileScope", "ScopeResult", "ScopeSnapshot", "ScopeSummary",
           "MemoryAlert", "MemoryMonitor", "MemorySample", "LeakReport", "LeakSite",
           "cpu_rss_bytes", "format_scope_table"]
