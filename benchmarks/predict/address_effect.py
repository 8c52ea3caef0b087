#!/usr/bin/env python3
"""Where a classic-allocator prediction differs from the GPU with the same
requests: the addresses the CUDA driver gives new segments.

Native's best fit orders free blocks by (stream, size, address), so among
free blocks of equal size the lowest address wins, and which block wins
decides what is split, what stays whole (a large-pool remainder under
1 MiB is not split: the whole block is allocated and counted) and hence
peak allocated and reserved. The fake device's run has the GPU's requests
(sizes, order, pairing) but not the driver's segment addresses: the
what-if replay places segments first fit from a base. This script shows
the effect on a recorded GPU history, three ways:

  1. the GPU recording replayed with its own addresses (= the GPU's stats);
  2. the same recording with each allocation moved to the fake run's
     address for the same request (the requests must be equal);
  3. the fake run's own trace (the prediction).

If 2 equals 3 and differs from 1, the whole difference is the driver's
segment placement, not a request the fake run missed or added.

    python3 benchmarks/predict/address_effect.py WORKLOAD BATCH [--history GZ]
        [--truth benchmarks/results/predict_truth_H200.json]
        [--builder FILE.py:NAME]    # a zoo setup: benchmarks/zoo/setups.py:NAME

When the requests differ the script says where: the first request that
differs, with the GPU's Python frames there, and the allocation sizes only
one side made (a missed or an extra request, not a placement effect).

Runs on a CPU (no GPU needed): the fake run records the step, the replays
use the engine. WORKLOAD is one of benchmarks/predict/workloads.py's.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import pickle
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))


def _load(path) -> dict:
    """A snapshot, plain data only (never a loader that can run code)."""
    from cachealloc.report import load_snapshot
    return load_snapshot(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload")
    ap.add_argument("batch", type=int)
    ap.add_argument("--history", help="the GPU recording (default: "
                    "benchmarks/results/predict_history_H200/WORKLOAD_classic_bBATCH.pickle.gz)")
    ap.add_argument("--truth", default=str(ROOT / "benchmarks/results/predict_truth_H200.json"))
    ap.add_argument("--builder", help="FILE.py:NAME to record instead of WORKLOAD (a zoo setup; "
                    "its truth file's top level gives the GPU and the steps)")
    a = ap.parse_args()
    from cachealloc import lab, predict
    from cachealloc.predict.request_stream import request_stream

    history = a.history or str(ROOT / "benchmarks/results/predict_history_H200"
                               / f"{a.workload}_classic_b{a.batch}.pickle.gz")
    truth = json.load(open(a.truth))
    base = predict.resolve_gpu(memory=truth["device_total_memory"])
    gpu = predict.Gpu(truth["device"], truth["device_total_memory"], base.capability,
                      base.multi_processor_count, base.context_bytes, truth["device"])
    work = pathlib.Path(tempfile.mkdtemp(prefix="cachealloc-address-effect-"))
    sys.path.insert(0, str(ROOT / "benchmarks" / "predict"))
    import workloads
    target, how = f"{ROOT / 'benchmarks/predict/workloads.py'}:{a.workload}", {}
    if a.builder:
        target = a.builder
    elif a.workload in workloads.SCRIPTS:     # an unmodified script, sized by its batch argument
        script, script_args, batch_arg = workloads.SCRIPTS[a.workload]
        target = [sys.executable, workloads.script_path(a.workload)] + list(script_args)
        how = {"batch_arg": batch_arg}
    rec = predict.record(target, gpu, size=a.batch, steps=truth["steps"], workdir=work, **how)
    gpu_trace = _load(history)["device_traces"][0]
    fake = _load(rec.trace)
    fake_trace = fake["device_traces"][0]
    want, got = request_stream(gpu_trace), request_stream(fake_trace)
    if got[:len(want)] != want:
        first = next((i for i, (x, y) in enumerate(zip(want, got)) if x != y), len(got))
        # Equal up to the frees of what the script still held when the
        # recording ended, in another order (Python's teardown): the
        # allocations and their addresses are unaffected.
        tail_frees = (all(x[0] == "free" for x in want[first:] + got[first:len(want)])
                      and sorted(want[first:]) == sorted(got[first:len(want)]))
        if not tail_frees:
            _where_they_differ(gpu_trace, fake_trace, want, got, first)
            return 1
        print(f"requests equal up to {first} of {len(want)}; then only frees, in another order")
    # The GPU's events, each allocation at the fake run's address for the
    # same request (both in program order), in the fake trace's format.
    fake_addr = [e["addr"] for e in fake_trace if e["action"] == "alloc"]
    template = fake_trace[0]
    moved, where, k = [], {}, 0
    for e in gpu_trace:
        act = e["action"]
        if act == "alloc":
            where[e["addr"]] = fake_addr[k]
            k += 1
        elif act not in ("free_requested", "free_completed"):
            continue  # segment events: the replay makes its own
        addr = where[e["addr"]] if act != "free_completed" else where.pop(e["addr"])
        moved.append(dict(template, action=act, addr=addr, size=e["size"], stream=e["stream"]))
    moved_path = work / "gpu_requests_at_fake_addresses.pickle"
    with open(moved_path, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [moved]}, f)

    rows = [("GPU recording, the driver's addresses", history),
            ("GPU requests, the fake run's addresses", str(moved_path)),
            ("fake run (the prediction)", str(rec.trace))]
    print(f"{a.workload} batch {a.batch}, classic; {len(want):,} requests compared")
    print(f"  {'':42s} {'peak allocated':>16s} {'peak reserved':>16s}")
    for name, path in rows:
        r = lab.compare(path, [""])[0]
        print(f"  {name:42s} {r['peak_allocated']:16,d} {r['peak_reserved']:16,d}")
    return 0


def _frames(entry, n: int = 4) -> str:
    fr = entry.get("frames") or []
    return " <- ".join(f"{f.get('filename', '?').rsplit('/', 1)[-1]}:{f.get('line', '?')} "
                       f"{f.get('name', '?')}" for f in fr[:n]) or "(no frames)"


def _where_they_differ(gpu_trace, fake_trace, want, got, first: int) -> None:
    """Prints the first differing request (each side's, the GPU's frames) and
    the allocation sizes only one side made, largest first."""
    from collections import Counter
    from cachealloc.predict.request_stream import requests
    print(f"the requests differ from request {first} on ({len(want):,} GPU, {len(got):,} fake)")
    g, f = requests(gpu_trace), requests(fake_trace)
    for i in range(max(0, first - 2), min(first + 4, max(len(want), len(got)))):
        mark = ">>" if i == first else "  "
        mine = str(want[i]) if i < len(want) else "(ended)"
        theirs = str(got[i]) if i < len(got) else "(ended)"
        print(f"{mark} {i:7d} GPU {mine:24s} fake {theirs:24s} "
              f"{_frames(g[i]) if i < len(g) else ''}")
    sizes_gpu = Counter(x[1] for x in want if x[0] == "alloc")
    sizes_fake = Counter(x[1] for x in got if x[0] == "alloc")
    only_gpu, only_fake = sizes_gpu - sizes_fake, sizes_fake - sizes_gpu
    for name, extra, trace, other in (("GPU only", only_gpu, g, sizes_fake),
                                      ("fake only", only_fake, f, sizes_gpu)):
        total = sum(size * n for size, n in extra.items())
        print(f"{name}: {sum(extra.values()):,} allocations, {total:,} bytes")
        for size, n in sorted(extra.items(), key=lambda kv: -kv[0])[:8]:
            # The first allocation of this size past the other side's count of
            # it: the first one the other side has no match for, by order.
            same = [e for e in trace if e["action"] == "alloc" and e["size"] == size]
            print(f"  {size:>14,d} x{n}  first unmatched at {_frames(same[other[size]])}")


if __name__ == "__main__":
    sys.exit(main())
