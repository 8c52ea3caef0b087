"""What the OOM flight recorder costs at an out-of-memory error, on the
simulated device (no GPU): the time from the failed request to the raised
error, with the recorder off and on, for a history of N requests recorded
before the OOM (a fragmenting mix of allocations and frees).

    python3 benchmarks/oom_recorder_cost.py [--requests 20000] [--repeat 3] [--ring]

Prints one line per history length: off (ms), on (ms: snapshot, file and
diagnosis with its what-if search), the snapshot's bytes. --ring: history
off, the requests from the recorder's own request ring (issue 46; as
`cachealloc run --oom-snapshot DIR` alone) instead of PyTorch's history with
Python frames. Needs a build (CACHEALLOC_LIBRARY, or
build/bindings/libcachealloc.so).
"""
import argparse
import os
import pathlib
import random
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
os.environ.setdefault("CACHEALLOC_LIBRARY", str(ROOT / "build" / "bindings" / "libcachealloc.so"))

MiB = 1 << 20


def one(ca, requests, recorder_on, workdir, ring=False):
    from cachealloc import oom_recorder

    ca.init("", "simulated:8589934592")
    ca.set_per_process_memory_fraction(0.25, 0)  # 2 GiB
    oom_recorder.stop()
    if not ring:
        ca.record_memory_history("all", stacks="python", max_entries=100000)
        oom_recorder._recorder = oom_recorder.FlightRecorder(workdir) if recorder_on else None
    elif recorder_on:
        oom_recorder.start(workdir, torch_observer=False)
    rng = random.Random(1)
    live = []
    for _ in range(requests // 2):
        live.append(ca._malloc(rng.choice([3, 7, 12, 30]) * MiB))
        if len(live) > 40:
            ca._free(live.pop(rng.randrange(len(live))))
    start = time.perf_counter()
    try:
        ca._malloc(1900 * MiB)
    except ca.OutOfMemoryError:
        pass
    seconds = time.perf_counter() - start
    for p in live:
        ca._free(p)
    size = os.path.getsize(oom_recorder._recorder.last_path) if recorder_on else 0
    oom_recorder.stop()
    return seconds, size


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, nargs="*", default=[2000, 20000, 100000])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--ring", action="store_true", help="history off: the recorder's request ring")
    args = p.parse_args()
    import cachealloc as ca

    print(f"{'history requests':>16} {'off (ms)':>9} {'on (ms)':>9} {'snapshot bytes':>15}")
    with tempfile.TemporaryDirectory() as d:
        for n in args.requests:
            off = min(one(ca, n, False, d, args.ring)[0] for _ in range(args.repeat))
            runs = [one(ca, n, True, d, args.ring) for _ in range(args.repeat)]
            on = min(r[0] for r in runs)
            print(f"{n:>16} {off * 1e3:>9.2f} {on * 1e3:>9.1f} {runs[0][1]:>15}")


if __name__ == "__main__":
    main()
