"""Does a workload make the same allocator calls, in the same order, every run?

Runs tests/gpu/run_workload.py many times per allocator, each in a fresh
process with history recording on (no frames), and groups the runs by the
exact sequence of allocator calls they made (action, size, address). Two
native runs can differ (the driver places segments differently, and best
fit breaks ties by address), so a native-vs-cachealloc comparison of one
run each can differ for that reason alone. This tells such differences
from the allocator's own.

    python benchmarks/call_order.py --workload transformer --runs 40 --jobs 8 \
        --allocators native cachealloc

Prints, per allocator: runs, distinct call sequences, and for each sequence
that is not the most common one where it first departs from it, why
(call_sequence.explain: different requests, different segment placement by
the driver, or an allocator difference), the entries around that point and
the keys of memory_stats that differ. Needs a GPU.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import call_sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNNER = ROOT / "tests" / "gpu" / "run_workload.py"


def one_run(allocator, workload, extra, path):
    """One fresh process; returns (its history entries, its memory_stats)."""
    cmd = [sys.executable, str(RUNNER), allocator, workload, "--sequence-out", path, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return call_sequence.read(path), result["memory_stats"]


def report(name, raw_runs, window):
    """Prints the runs of one allocator grouped by call sequence; returns
    (a summary dict, the Counter of canonical sequences)."""
    groups = collections.Counter()
    entries_of, stats_of = {}, {}  # per sequence: its first run's
    for entries, stats in raw_runs:
        seq = tuple(call_sequence.canonical(entries))
        groups[seq] += 1
        entries_of.setdefault(seq, entries)
        stats_of.setdefault(seq, stats)
    common, common_count = groups.most_common(1)[0]
    print(f"== {name}: {len(raw_runs)} runs, {len(groups)} distinct call sequence(s); "
          f"most common: {common_count} runs, {len(common)} entries")
    base_stats = stats_of[common]
    verdicts = collections.Counter()
    for seq, count in groups.most_common()[1:]:
        why = call_sequence.explain(entries_of[common], entries_of[seq])
        verdicts[why.verdict] += count
        i = why.index
        diff = sorted(k for k in base_stats if base_stats[k] != stats_of[seq].get(k))
        print(f"-- variant seen {count}x, {len(seq)} entries: {why}; "
              f"{len(diff)} memory_stats keys differ: {diff[:12]}")
        lo, hi = max(0, i - window), min(i + window, max(len(common), len(seq)))
        print("   most common        | variant")
        for j in range(lo, hi):
            x = common[j] if j < len(common) else ""
            y = seq[j] if j < len(seq) else ""
            mark = "*" if x != y else " "
            print(f" {mark} {j:6d} {x:<40} | {y}")
    return {"runs": len(raw_runs), "distinct": len(groups), "most_common": common_count,
            "variant_runs_by_cause": dict(verdicts)}, groups


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="transformer")
    p.add_argument("--runs", type=int, default=20, help="runs per allocator")
    p.add_argument("--jobs", type=int, default=4, help="processes at once")
    p.add_argument("--allocators", nargs="+", default=["native", "cachealloc"],
                   choices=["native", "cachealloc", "cachealloc-plain"])
    p.add_argument("--window", type=int, default=8, help="entries shown around a departure")
    p.add_argument("--save", default=None, help="folder to keep every run's sequence in")
    args = p.parse_args()
    summary = {}
    if args.save:
        os.makedirs(args.save, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {}
        # Interleave allocators so machine load affects both alike.
        for r in range(args.runs):
            for name in args.allocators:
                alloc, extra = (("cachealloc", ["--plain"]) if name == "cachealloc-plain"
                                else (name, []))
                path = os.path.join(args.save or tmp, f"{name}-{r}.txt")
                futures[pool.submit(one_run, alloc, args.workload, extra, path)] = name
        runs = collections.defaultdict(list)
        for fut in concurrent.futures.as_completed(futures):
            runs[futures[fut]].append(fut.result())
    groups = {}
    for name in args.allocators:
        summary[name], groups[name] = report(name, runs[name], args.window)
    # Across allocators: is cachealloc's most common sequence native's?
    if "native" in groups:
        native_common = groups["native"].most_common(1)[0][0]
        for name in args.allocators:
            if name == "native":
                continue
            same = groups[name].get(native_common, 0)
            print(f"== {name}: {same} of {len(runs[name])} runs made exactly native's most "
                  f"common call sequence")
            summary[name]["same_as_native_common"] = same
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
