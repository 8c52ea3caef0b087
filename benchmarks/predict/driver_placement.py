#!/usr/bin/env python3
"""Does the CUDA driver place cudaMalloc segments by a rule simple enough
to model? Measured on recorded native (classic) traces, on a CPU.

A classic prediction's residual is the driver's segment addresses
(benchmarks/predict/address_effect.py): native's best fit breaks ties
among equal-size free blocks by address, so the order of segment base
addresses decides splits and hence peaks. The what-if replay places
segments first fit upward from a base; the driver does not (the recorded
addresses mostly go down, in 32 MiB-aligned steps, with jumps).

For each trace and each candidate placement model this prints:

  cond    the fraction of segment addresses the model predicts exactly
          when given the recorded history (every earlier segment where the
          driver put it): one step ahead, the fairest test of a rule;
  order   the fraction of segment pairs whose address order the model's
          own addresses (a full simulation from the first segment) share
          with the recording: only this order matters to the engine;
  peaks   the recording replayed with every segment moved to the model's
          address (blocks move with their segment), as a difference to
          the recording's own replay (= the GPU's peaks).

Models (all on the 2 MiB grid; a segment never straddles a reservation):
  firstfit   lowest free address from a base, upward (the replay today);
  topdown    each new segment just below the lowest one;
  topdown32  the same, a segment over 2 MiB on a 32 MiB boundary;
  preamble   topdown, but segments 2 and 3 above the first, 72 MiB up;
  chunkG     the driver reserves VA in chunks of the request rounded up to
             G MiB, each new chunk just below the lowest; a segment goes
             into a free gap of an existing chunk if one fits (the first
             fit at or after where the previous segment ended, else the
             lowest), else into a new chunk.

    python3 benchmarks/predict/driver_placement.py [TRACE ...]

Default traces: the five H200 classic histories, tests/data/predict's
encoder_small and tests/data/traces (all classic). Traces that free segments are skipped for the peaks
(moving a reused range is not modelled here).
"""
from __future__ import annotations

import bisect
import itertools
import os
import pathlib
import pickle
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))

MIB = 1 << 20
GRID = 2 * MIB
# Inside the what-if device ([0x7f0000000000, + 1 TiB)): a hint outside it
# is not taken and the replay silently falls back to first fit.
BASE = 0x7F0000000000 + (1 << 39)


def _load(path) -> dict:
    """A snapshot, plain data only (never a loader that can run code)."""
    from cachealloc.report import load_snapshot
    return load_snapshot(path)


def _up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


class Space:
    """Occupied address ranges, sorted by start."""

    def __init__(self):
        self.ranges = []

    def add(self, start: int, size: int):
        bisect.insort(self.ranges, (start, start + size))

    def remove(self, start: int):
        i = bisect.bisect_left(self.ranges, (start, 0))
        del self.ranges[i]

    def gaps(self, lo: int, hi: int):
        """Maximal free ranges inside [lo, hi), lowest first."""
        cur = lo
        for s, e in self.ranges:
            if e <= lo or s >= hi:
                continue
            if s > cur:
                yield cur, s
            cur = max(cur, e)
        if cur < hi:
            yield cur, hi


def firstfit(space, size, state):
    for g0, g1 in space.gaps(BASE, BASE + (1 << 38)):
        a = _up(g0, GRID)
        if a + size <= g1:
            return a


def topdown(space, size, state):
    lo = min((s for s, _ in space.ranges), default=BASE)
    return (lo - size) // GRID * GRID


def topdown_aligned(space, size, state):
    """Top-down, a large segment starting on a 32 MiB boundary."""
    lo = min((s for s, _ in space.ranges), default=BASE)
    if size <= GRID:
        return lo - size
    return (lo - _up(size, 32 * MIB)) // (32 * MIB) * (32 * MIB)


def preamble(space, size, state):
    """Top-down, except that the second segment lands 72 MiB above the
    first's end and the third right after it: most recordings start so
    (something outside the caching allocator takes the 72 MiB)."""
    n = state["n"] = state.get("n", 0) + 1
    if n == 1:
        return BASE
    if n <= 3:
        return max(e for _, e in space.ranges) + (72 * MIB if n == 2 else 0)
    return topdown(space, size, state)


def chunks(granule: int):
    def place(space, size, state):
        reserved = state.setdefault("chunks", [])
        fits = sorted(a for c0, c1 in reserved for g0, g1 in space.gaps(c0, c1)
                      for a in [_up(g0, GRID)] if a + size <= g1)
        if fits:
            after = [a for a in fits if a >= state.get("end", 0)]
            a = (after or fits)[0]
        else:
            lo = min((c0 for c0, _ in reserved), default=BASE)
            a = (lo - _up(size, granule)) // granule * granule
            reserved.append((a, a + _up(size, granule)))
        state["end"] = a + size
        return a
    return place


MODELS = {"firstfit": firstfit, "topdown": topdown, "topdown32": topdown_aligned,
          "preamble": preamble, "chunk32": chunks(32 * MIB), "chunk64": chunks(64 * MIB)}


def one_step_rate(trace, granule: int) -> tuple:
    """chunkG's exact hits one step ahead, given the recorded history.
    Chunks are inferred: a segment outside every known chunk opens one of
    its size rounded up to G at its address; a chunk whose segments are all
    freed is forgotten."""
    known, space, where, end = [], Space(), {}, 0
    hits = tried = 0
    for e in trace:
        if e["action"] == "segment_alloc":
            size, addr = e["size"], e["addr"]
            if known:
                fits = sorted(a for c in known for g0, g1 in space.gaps(c[0], c[1])
                              for a in [_up(g0, GRID)] if a + size <= g1)
                if fits:
                    pred = ([a for a in fits if a >= end] or fits)[0]
                else:
                    lo = min(c[0] for c in known)
                    pred = (lo - _up(size, granule)) // granule * granule
                tried += 1
                hits += pred == addr
            space.add(addr, size)
            end = addr + size
            chunk = next((c for c in known if c[0] <= addr < c[1]), None)
            if chunk is None:
                chunk = [addr, addr + _up(size, granule), 0]
                known.append(chunk)
            chunk[1] = max(chunk[1], addr + _up(size, granule))
            chunk[2] += 1
            where[addr] = chunk
        elif e["action"] == "segment_free":
            space.remove(e["addr"])
            chunk = where.pop(e["addr"])
            chunk[2] -= 1
            if chunk[2] == 0:
                known.remove(chunk)
    return hits, tried


def simulate(trace, model) -> list:
    """The model's address for each segment_alloc (no segment frees)."""
    space, state, out = Space(), {}, []
    for e in trace:
        if e["action"] == "segment_alloc":
            a = model(space, e["size"], state)
            space.add(a, e["size"])
            out.append(a)
    return out


def order_agreement(real: list, model: list) -> float:
    pairs = list(itertools.combinations(range(len(real)), 2))
    same = sum((real[i] < real[j]) == (model[i] < model[j]) for i, j in pairs)
    return same / max(len(pairs), 1)


def moved(snapshot: dict, trace: list, addrs: list) -> dict:
    """The recording with segment k at addrs[k], its blocks moved with it."""
    segs, out, k = [], [], 0
    for e in trace:
        e = dict(e)
        if e["action"] == "segment_alloc":
            bisect.insort(segs, (e["addr"], e["size"], addrs[k]))
            e["addr"] = addrs[k]
            k += 1
        elif e["action"] in ("alloc", "free_requested", "free_completed"):
            i = bisect.bisect_right(segs, (e["addr"], 1 << 62, 0)) - 1
            start, size, new = segs[i]
            if not start <= e["addr"] < start + size:
                raise ValueError(f"block at {e['addr']:#x} is in no segment")
            e["addr"] = new + e["addr"] - start
        out.append(e)
    return {"segments": [], "device_traces": [out],
            "allocator_settings": snapshot.get("allocator_settings")}


def peaks(path) -> tuple:
    from cachealloc import lab
    r = lab.compare(path, [""])[0]
    return r["peak_allocated"], r["peak_reserved"]


def main(argv) -> int:
    paths = argv or sorted(str(p) for p in
                           (ROOT / "benchmarks/results/predict_history_H200").glob("*_classic_*.pickle.gz"))
    if not argv:
        paths.append(str(ROOT / "tests/data/predict/encoder_small.pickle.gz"))
        paths += sorted(str(p) for p in (ROOT / "tests/data/traces").glob("*.pickle.gz"))
    exact = {name: 0 for name in MODELS}
    error = {name: 0 for name in MODELS}
    for path in paths:
        snap = _load(path)
        trace = snap["device_traces"][0]
        real = [e["addr"] for e in trace if e["action"] == "segment_alloc"]
        frees = any(e["action"] == "segment_free" for e in trace)
        if not real:
            continue
        rates = "  ".join(f"chunk{g}: {h}/{n}" for g in (32, 64)
                          for h, n in [one_step_rate(trace, g * MIB)])
        print(f"{pathlib.Path(path).name}: {len(real)} segments; one step ahead {rates}")
        if frees:
            print("  frees segments: peaks not measured")
            continue
        gpu = peaks(path)
        print(f"  {'recorded':9s} order 1.000  peak allocated {gpu[0]:15,d}  reserved {gpu[1]:15,d}")
        for name, model in MODELS.items():
            addrs = simulate(trace, model)
            with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as f:
                pickle.dump(moved(snap, trace, addrs), f)
            try:
                got = peaks(f.name)
            finally:
                os.unlink(f.name)
            exact[name] += got == gpu
            error[name] += abs(got[0] - gpu[0]) + abs(got[1] - gpu[1])
            print(f"  {name:9s} order {order_agreement(real, addrs):.3f}  peak allocated "
                  f"{got[0] - gpu[0]:+15,d}  reserved {got[1] - gpu[1]:+15,d}")
    print("peaks exact (allocated and reserved), and the summed |error| in MiB:")
    for name in MODELS:
        print(f"  {name:9s} {exact[name]:3d} exact  {error[name] / MIB:8.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
