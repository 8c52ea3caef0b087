#!/usr/bin/env python3
"""Driver calls per steady step for expandable segments' pages, by
allocator, under a memory limit: the lab's count of what the CUDA backend
would call (cuMemCreate, cuMemMap, cuMemUnmap, cuMemRelease, cuMemSetAccess
and the stream synchronization before each unmapping;
allocator/base/page_handles.h), for issue 48's `two_streams` gap (rescue's
2 MiB pages against native expandable's 20 MiB ones).

    ninja -C build cachealloc
    python3 benchmarks/fragmentation/page_driver_calls.py --build build
        [--traces tests/data/strand] [--only two_streams] [--limits-mib 6234,6562,7334]
        [--json OUT.json]

Per trace and limit: native expandable segments (`expandable_segments:True`),
and each --policy (default rescue) on native defaults otherwise. "Per steady
step" is the second half of the replay (from the middle allocation on; the
strand traces hold 8 steps, step 1 at the full size, so steps 5-8) divided
by half the trace's steps. Limits default to native's best minimum memory
for the trace (`cachealloc advise`, as policy_limit_calls.py) and that / 0.95
and / 0.85 (the timing rounds run with headroom: docs/fragmentation.md).
"""
import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import policy_table  # noqa: E402

KEYS = ("creates", "maps", "unmaps", "releases", "set_access", "syncs", "total")


def replay(cli, path, conf, policy, limit):
    out = policy_table.run([cli, "compare", "--json", "--quiet", path, "--conf", conf, "--policy",
                            policy, "--memory-limit", limit])["configs"][0]
    return {"late": out["page_calls_late"], "all": out["page_calls"], "ooms": out["ooms"],
            "peak_reserved": out["peak_reserved"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--policy", action="append", help="policies to count (default: rescue)")
    ap.add_argument("--traces", default=str(REPO / "tests/data/strand"))
    ap.add_argument("--only", help="comma-separated trace names")
    ap.add_argument("--limits-mib", help="comma-separated limits, MiB (default: from advise)")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    policies = a.policy or ["rescue"]
    cli = pathlib.Path(a.build).resolve() / "tools" / "cachealloc"
    found = policy_table.traces([pathlib.Path(a.traces)])
    if a.only:
        want = set(a.only.split(","))
        found = [t for t in found if t[0] in want]
        if missing := want - {t[0] for t in found}:
            ap.error(f"--only: no trace named {', '.join(sorted(missing))} in {a.traces}")
    if not found:
        ap.error(f"--traces: {a.traces} holds no *.pickle.gz traces")
    rows = []
    print("| trace | limit MiB | allocator | per steady step: creates | maps | unmaps | releases | "
          "set_access | syncs | all | OOMs |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, path, meta in found:
        half_steps = max(1, (meta or {}).get("steps", 2) // 2)
        if a.limits_mib:
            limits = [int(x) << 20 for x in a.limits_mib.split(",")]
        else:
            limit, total = policy_table.recorded_limit(meta)
            rec = ["--recorded-limit", limit] if limit else []
            adv = policy_table.run([cli, "advise", "--json", "--quiet", path, *rec,
                                    *(["--memory-limit", limit, "--device-memory", total] if limit else [])])
            best = min(c["min_memory"] for c in adv["configs"])
            limits = [best, int(best / 0.95) >> 20 << 20, int(best / 0.85) >> 20 << 20]
        for lim in limits:
            runs = [("native expandable", "expandable_segments:True", "native")]
            runs += [(p, "", p) for p in policies]
            for label, conf, policy in runs:
                r = replay(cli, path, conf, policy, lim)
                per = {k: r["late"][k] / half_steps for k in KEYS}
                rows.append({"trace": name, "limit_mib": lim >> 20, "allocator": label,
                             "per_step": per, "second_half": r["late"], "whole": r["all"],
                             "ooms": r["ooms"], "peak_reserved": r["peak_reserved"]})
                print(f"| {name} | {lim >> 20:,} | {label} | " +
                      " | ".join(f"{per[k]:,.1f}" for k in KEYS) + f" | {r['ooms']} |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
