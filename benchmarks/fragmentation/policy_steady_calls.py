#!/usr/bin/env python3
"""Device calls (mappings + unmappings, or segment reservations + releases)
per training step in a steady state, on the bundled training-like traces,
for native (defaults and expandable segments) and a policy, without a
memory limit. A CPU proxy for a policy's step-time cost on the GPU: every
such call is a driver call (cuMemMap/cuMemUnmap + cuMemCreate/Release)
on the step's critical path, where native's steady state makes none.

    ninja -C build cachealloc
    python3 benchmarks/fragmentation/policy_steady_calls.py --build build [--policy stitch]

The step: the recorded workloads train 5 steps (benchmarks/workloads.py),
so a step is the period p, between n/6 and n/4 of the trace's n
allocations, at which the allocation sizes repeat most often (sizes[i] ==
sizes[i + p]). The figure: calls during the last p allocations, and
during the last 2p per step (they agree in a steady state).
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bindings" / "python"))
from cachealloc import plain_pickle  # noqa: E402
TRACES = ["mlp", "large_segment_mlp", "resnet18", "transformer", "transformer_pow2",
          "x_mlp", "x_large_segment_mlp", "x_resnet18", "x_transformer", "x_transformer_pow2"]
CALLS = {"segment_map", "segment_unmap", "segment_alloc", "segment_free"}


def trace_path(name):
    folder = "traces_expandable" if name.startswith("x_") else "traces"
    return REPO / "tests/data" / folder / f"{name}.pickle.gz"


def replay_events(cli, path, conf, policy):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([str(cli), "compare", "--quiet", str(path), "--conf", conf, "--policy", policy,
                        "--snapshot-dir", d], check=True, capture_output=True)
        (snap,) = pathlib.Path(d).iterdir()
        with open(snap, "rb") as f:
            data = plain_pickle.load(f)
    (events,) = data["device_traces"]
    return events


def step_period(sizes, steps=5):
    """The period in allocations at which sizes repeat most (ties: shortest)."""
    n = len(sizes)
    candidates = range(max(1, n // (steps + 1)), n // (steps - 1) + 1)
    return max(candidates, key=lambda p: (sum(sizes[i] == sizes[i + p] for i in range(n - p)), -p))


def steady_calls(events):
    allocs = [i for i, e in enumerate(events) if e["action"] == "alloc"]
    p = step_period([events[i]["size"] for i in allocs])
    def calls_from(k):  # device calls from the k-th last step's first alloc to the end
        start = allocs[len(allocs) - k * p]
        return sum(1 for e in events[start:] if e["action"] in CALLS)
    return p, calls_from(1), calls_from(2) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--policy", default="stitch")
    args = ap.parse_args()
    cli = pathlib.Path(args.build).resolve() / "tools" / "cachealloc"
    runs = [("native", "", "native"), ("native expandable", "expandable_segments:True", "native"),
            (args.policy, "", args.policy)]
    print("| trace | allocations per step | " + " | ".join(
        f"{label}: calls in last step (per step, last two)" for label, _, _ in runs) + " |")
    print("|---|---:|" + "---:|" * len(runs))
    totals = [0.0] * len(runs)
    for name in TRACES:
        cells = []
        for k, (_, conf, pol) in enumerate(runs):
            r = steady_calls(replay_events(cli, trace_path(name), conf, pol))
            period = r[0]
            cells.append(f"{r[1]} ({r[2]:g})")
            totals[k] += r[2]
        print(f"| {name} | {period} | " + " | ".join(cells) + " |")
    print("\nsum over the traces, calls per step (last two steps): " +
          ", ".join(f"{label} {t:g}" for (label, _, _), t in zip(runs, totals)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
