"""cachealloc.profiler: exact memory per scope, monitoring, leak checks
(memory_profiler.py; docs/profiling.md).

    import cachealloc, cachealloc.profiler as cp
    prof = cp.MemoryProfiler()
    with prof.profile_context("step"):
        ...
    print(prof.format_results())

Modules: memory_profiler (MemoryProfiler), scopes (where a scope's numbers
come from), results (what a closed scope gives), monitor (sampling and
alerts), leaks (growing scopes and their allocation sites), export and
html_report (files).
"""
from .leaks import LeakReport, LeakSite
from .memory_profiler import MemoryProfiler, ProfileScope, cpu_rss_bytes
from .monitor import MemoryAlert, MemoryMonitor, MemorySample
from .results import MemorySnapshot, ScopeResult, ScopeSummary

__all__ = ["MemoryProfiler", "ProfileScope", "ScopeResult", "MemorySnapshot", "ScopeSummary",
           "MemoryAlert", "MemoryMonitor", "MemorySample", "LeakReport", "LeakSite",
           "cpu_rss_bytes"]
