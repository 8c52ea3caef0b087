#!/usr/bin/env python3
"""Device calls late in a run under a memory limit, native's best against a
policy: a CPU proxy for the step time of the strand suite's timing rounds
(benchmarks/strand/measure.py runs them under the limit). Every mapping,
unmapping and retry is a driver call on the step's critical path; once a
run is warm, native makes few or none.

    ninja -C build cachealloc
    python3 benchmarks/fragmentation/policy_limit_calls.py --build build [--policy rescue]
        [--traces tests/data/strand] [--headroom 0.95]

Per trace: native's best config and its minimum memory (`cachealloc advise`,
as policy_table.py), then two limits: that minimum (the tightest native
runs in) and the minimum / --headroom (the timing rounds run at 95 % of the
largest size, so about 5 % below the limit). Under each, one replay of
native's best, one of native expandable segments, and one of the policy
(native defaults otherwise): device
calls + retries in all, mappings + unmappings in the trace's second half (native expandable
segments beside them: native's best on the GPU for most strand workloads) (by allocations; the
strand traces hold 8 steps, step 1 at the full size, so the second half is
steps 5-8), the MiB those calls mapped and unmapped (on the GPU every page is
a driver call of its own), and OOMs.
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bindings" / "python"))
sys.path.insert(0, str(HERE))
from cachealloc import plain_pickle  # noqa: E402
import policy_table  # noqa: E402

CALLS = {"segment_map", "segment_unmap", "segment_alloc", "segment_free"}


def replay(cli, path, conf, policy, limit):
    with tempfile.TemporaryDirectory() as d:
        out = policy_table.run([cli, "compare", "--json", "--quiet", path, "--conf", conf, "--policy",
                                policy, "--memory-limit", limit, "--snapshot-dir", d])["configs"][0]
        (snap,) = pathlib.Path(d).iterdir()
        with open(snap, "rb") as f:
            events = plain_pickle.load(f)["device_traces"][0]
    allocs = [i for i, e in enumerate(events) if e["action"] == "alloc"]
    half = allocs[len(allocs) // 2] if allocs else len(events)
    late = sum(1 for e in events[half:] if e["action"] in CALLS)
    # On the GPU every page is a driver call of its own (cuMemCreate +
    # cuMemMap, or cuMemUnmap + cuMemRelease): bytes moved tell the pages.
    late_mib = sum(e["size"] for e in events[half:] if e["action"] in CALLS) / (1 << 20)
    # Retries are not in the device trace: the whole run's count.
    return {"calls": out["device_allocs"] + out["device_frees"] + out["retries"],
            "late": late, "late_mib": late_mib, "ooms": out["ooms"], "retries": out["retries"],
            "reserved": out["peak_reserved"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--policy", default="rescue")
    ap.add_argument("--traces", default=str(REPO / "tests/data/strand"))
    ap.add_argument("--headroom", type=float, default=0.95)
    a = ap.parse_args()
    if not 0 < a.headroom <= 1:
        ap.error("--headroom: a fraction in (0, 1]")
    cli = pathlib.Path(a.build).resolve() / "tools" / "cachealloc"
    found = policy_table.traces([pathlib.Path(a.traces)])
    if not found:
        ap.error(f"--traces: {a.traces} holds no *.pickle.gz traces")
    print(f"| trace | limit (MiB) | native's best config | calls + retries: native's best | expandable | "
          f"{a.policy} | maps + unmaps in the second half: native's best | expandable | {a.policy} | OOMs: native's best "
          f"| expandable | {a.policy} | MiB mapped + unmapped in the second half: native's best | expandable | "
          f"{a.policy} |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    sums = {"best": 0, "exp": 0, "policy": 0}
    mib = {"best": 0.0, "exp": 0.0, "policy": 0.0}
    for name, path, meta in found:
        limit, total = policy_table.recorded_limit(meta)
        rec = ["--recorded-limit", limit] if limit else []
        adv = policy_table.run([cli, "advise", "--json", "--quiet", path, *rec,
                                *(["--memory-limit", limit, "--device-memory", total] if limit else [])])
        best = min(adv["configs"], key=lambda c: c["min_memory"])
        for lim in (best["min_memory"], int(best["min_memory"] / a.headroom) >> 20 << 20):
            b = replay(cli, path, best["line"], "native", lim)
            e = replay(cli, path, "expandable_segments:True", "native", lim)
            p = replay(cli, path, "", a.policy, lim)
            for k, r in (("best", b), ("exp", e), ("policy", p)):
                sums[k] += r["late"]
                mib[k] += r["late_mib"]
            print(f"| {name} | {lim / (1 << 20):,.0f} | `{best['line'] or 'defaults'}` | {b['calls']} | "
                  f"{e['calls']} | {p['calls']} | {b['late']} | {e['late']} | {p['late']} | {b['ooms']} | "
                  f"{e['ooms']} | {p['ooms']} | {b['late_mib']:,.0f} | {e['late_mib']:,.0f} | {p['late_mib']:,.0f} |")
    print(f"\nsecond-half mappings + unmappings summed over the rows: native's best {sums['best']}, "
          f"native expandable {sums['exp']}, {a.policy} {sums['policy']}; MiB moved: native's best "
          f"{mib['best']:,.0f}, native expandable {mib['exp']:,.0f}, {a.policy} {mib['policy']:,.0f} "
          f"(pages: native's large pool 20 MiB, {a.policy}'s 2 MiB; small pools 2 MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
