#!/usr/bin/env python3
"""Times the same Google Benchmark program from several builds, interleaved.

Why: a change to the hot path moves a pair by a few ns, while a shared
machine drifts by more than that from one minute to the next. Running the
builds in turn, round after round, on one pinned CPU exposes them to the
same drift, and the per-round ratios against the first build cancel most of
it.

    python3 benchmarks/compare_builds.py --filter 'BM_FrontPair/stats.*' \\
        --rounds 5 base=build-old/benchmarks/engine_bench new=build/benchmarks/engine_bench

Prints, per benchmark: each build's median and minimum ns over the rounds
(each round's figure is the median of --repetitions runs) and the median
per-round ratio to the first build.
"""
import argparse
import csv
import io
import os
import statistics
import subprocess
import sys


def run_once(binary, bench_filter, min_time, repetitions, cpu):
    """One run of `binary`: {benchmark name: median ns over repetitions}."""
    cmd = [binary, f"--benchmark_filter={bench_filter}", f"--benchmark_min_time={min_time}",
           f"--benchmark_repetitions={repetitions}", "--benchmark_format=csv"]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu)] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    times = {}
    rows = [r for r in csv.reader(io.StringIO(out)) if r]
    header = next((r for r in rows if r[0] == "name"), None)
    if header is None:
        raise SystemExit(f"{binary}: no CSV header in its output")
    col = header.index("real_time")
    unit = header.index("time_unit")
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    for r in rows:
        if r[0] == "name" or len(r) <= col:
            continue
        name = r[0]
        if any(name.endswith(s) for s in ("_mean", "_median", "_stddev", "_cv")):
            continue
        times.setdefault(name, []).append(float(r[col]) * scale[r[unit]])
    return {name: statistics.median(v) for name, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("builds", nargs="+", help="NAME=PATH of a benchmark binary; the first is the base")
    ap.add_argument("--filter", default=".", help="--benchmark_filter for every run")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--min-time", default="0.2", help="--benchmark_min_time per repetition (s)")
    ap.add_argument("--cpu", type=int, default=None, help="pin every run to this CPU (taskset)")
    args = ap.parse_args()

    builds = []
    for spec in args.builds:
        name, sep, path = spec.partition("=")
        if not sep or not name or not os.access(path, os.X_OK):
            raise SystemExit(f"bad build '{spec}': want NAME=PATH to an executable")
        builds.append((name, path))

    # results[build][benchmark] = [per-round ns]
    results = {name: {} for name, _ in builds}
    for rnd in range(args.rounds):
        for name, path in builds:
            for bench, ns in run_once(path, args.filter, args.min_time, args.repetitions, args.cpu).items():
                results[name].setdefault(bench, []).append(ns)
        print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)

    base = builds[0][0]
    benches = list(results[base])
    width = max(len(b) for b in benches) if benches else 10
    head = f"{'benchmark':{width}}" + "".join(f" {n + ' med/min ns':>22}" for n, _ in builds)
    head += "".join(f" {n + '/' + base:>14}" for n, _ in builds[1:])
    print(head)
    for bench in benches:
        line = f"{bench:{width}}"
        for name, _ in builds:
            v = results[name].get(bench, [])
            line += f" {statistics.median(v):12.1f} /{min(v):7.1f}" if v else f" {'-':>22}"
        b = results[base][bench]
        for name, _ in builds[1:]:
            v = results[name].get(bench, [])
            ratios = [x / y for x, y in zip(v, b)]
            line += f" {statistics.median(ratios):14.3f}" if ratios else f" {'-':>14}"
        print(line)


if __name__ == "__main__":
    main()
