"""What profiling costs from Python, on the simulated backend (no GPU):

- an allocate+free pair through the C API (cachealloc_try_malloc +
  cachealloc_free, via ctypes) with 0, 1 and 8 profiler scopes open: the
  scope's cost on the allocation path, as a Python caller sees it (ctypes
  dominates; the engine-level figures are benchmarks/profiler_overhead_bench);
- one MemoryProfiler.profile_context enter+exit around nothing, with and
  without the CPU RSS read.

Each figure is the median of --repeats runs of --n operations, in µs.

    CACHEALLOC_LIBRARY=build/bindings/libcachealloc.so python3 benchmarks/profiler_overhead.py
"""
import argparse
import ctypes
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bindings" / "python"))

import cachealloc  # noqa: E402
from cachealloc import _native  # noqa: E402
from cachealloc.profiler import MemoryProfiler  # noqa: E402


def median_us(fn, n: int, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(n)
        runs.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(runs)


def pairs_with_open_scopes(depth: int, n: int, repeats: int) -> float:
    lib = _native.lib()
    ids = []
    for _ in range(depth):
        scope_id = ctypes.c_uint64()
        _native.check(lib.cachealloc_scope_open(0, ctypes.byref(scope_id)))
        ids.append(scope_id.value)
    out = ctypes.c_void_p()
    try_malloc, free = lib.cachealloc_try_malloc, lib.cachealloc_free
    ref = ctypes.byref(out)

    def run(count):
        for _ in range(count):
            try_malloc(65536, 0, None, ref)
            free(out, 0, 0, None)
    run(1000)  # warm: the segment is reserved once
    result = median_us(run, n, repeats)
    for scope_id in reversed(ids):
        _native.check(lib.cachealloc_scope_close(0, scope_id, None))
    return result


def profile_context_cost(track_cpu_memory: bool, n: int, repeats: int) -> float:
    prof = MemoryProfiler(0, track_cpu_memory=track_cpu_memory)

    def run(count):
        for _ in range(count):
            with prof.profile_context("s"):
                pass
        prof.clear_results()
    return median_us(run, n, repeats)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=20000, help="operations per run")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    cachealloc.init("", "simulated:8589934592")
    for depth in (0, 1, 8):
        us = pairs_with_open_scopes(depth, args.n, args.repeats)
        print(f"C API alloc+free pair (64 KiB, ctypes), {depth} open scopes: {us * 1000:.0f} ns")
    for rss in (True, False):
        us = profile_context_cost(rss, args.n // 4, args.repeats)
        print(f"profile_context enter+exit, track_cpu_memory={rss}: {us:.1f} µs")


if __name__ == "__main__":
    main()
