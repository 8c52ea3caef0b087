"""What recording history with Python stacks costs per allocation, on the
GPU: torch.empty + free in a loop under cachealloc with history off, on
without stacks (context None), and on with Python stacks.

    python benchmarks/history_cost.py [--n 200000]
"""
import argparse
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bindings" / "python"))


def loop(torch, n):
    t0 = time.perf_counter()
    for _ in range(n):
        torch.empty(1024, device="cuda")
    return (time.perf_counter() - t0) / n * 1e9


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200000)
    a = p.parse_args()
    import torch
    import cachealloc

    cachealloc.install()
    loop(torch, 10000)
    off = loop(torch, a.n)
    cachealloc.record_memory_history(enabled="all", context=None, max_entries=100000)
    nostack = loop(torch, a.n)
    cachealloc.record_memory_history(enabled="all", context="all", max_entries=100000)
    stacks = loop(torch, a.n)
    cachealloc.record_memory_history(enabled=None)
    print(f"torch.empty+free, ns per iteration: history off {off:.0f}, "
          f"history on without frames {nostack:.0f} (+{nostack - off:.0f}), "
          f"history on with Python frames {stacks:.0f} (+{stacks - off:.0f})")


if __name__ == "__main__":
    main()
