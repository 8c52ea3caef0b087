#!/usr/bin/env python3
"""A placement policy against native on every bundled trace: minimum memory,
peak reserved without a limit, and device calls under the minimum limit,
under native classic, native's best and the policy. Prints the table and
writes it into docs/fragmentation.md (between the POLICY markers).

    ninja -C build cachealloc
    python3 benchmarks/fragmentation/policy_table.py --build build [--policy stitch] [--no-write]

Per trace (tests/data/traces, tests/data/traces_expandable, or the folders
given with --traces; copies by content once):
  - native classic: native defaults (`--conf ""`), no expandable segments;
  - native's best: the config of the lowest minimum memory over `cachealloc
    advise`'s whole native search (large_segment_size_mb included; a trace
    recorded under a memory fraction is searched under that limit, so
    garbage collection is searched too, as advise_all.py does);
  - the policy, with native defaults for everything it does not decide
    (`--conf "" --policy NAME`).
Floor: peak allocated under native defaults (512-byte rounding): no
allocator reserves less. Device calls: segment reservations and releases
(mappings and unmappings) plus retries, of one replay under native's best
minimum as the memory limit (the tightest limit native runs in). Geomean
and worst case are of policy / native's best. Exit status 1 when a target
is missed (issue 36), naming it.
"""
import argparse
import hashlib
import json
import math
import os
import pathlib
import platform
import shlex
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- BEGIN GENERATED (policy_table.py) -->", "<!-- END GENERATED (policy_table.py) -->"
MiB = 1 << 20


def run(cmd):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {shlex.join(map(str, cmd))}\n{proc.stderr}")
    return json.loads(proc.stdout)


BUNDLED = (REPO / "tests/data/traces", REPO / "tests/data/traces_expandable")


def traces(folders=BUNDLED):
    seen, out = set(), []
    for folder in folders:
        for p in sorted(folder.glob("*.pickle.gz")):
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            meta_path = p.with_name(p.name[: -len(".pickle.gz")] + ".json")
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
            out.append((p.name[: -len(".pickle.gz")], p, meta))
    return out


def recorded_limit(meta):
    if not meta or not meta.get("memory_fraction"):
        return None, None
    total = meta["device_total_memory"]
    return math.floor(meta["memory_fraction"] * total), total


def mib(n):
    return f"{n / MiB:,.0f}"


def measure(cli, name, path, meta, policy):
    limit, total = recorded_limit(meta)
    rec = ["--recorded-limit", limit] if limit else []
    advise = run([cli, "advise", "--json", "--quiet", path, *rec,
                  *(["--memory-limit", limit, "--device-memory", total] if limit else [])])
    best = min(advise["configs"], key=lambda c: c["min_memory"])  # ranked order breaks ties
    best_line = best["line"]

    def compare(conf, pol, memory_limit=None):
        out = run([cli, "compare", "--json", "--quiet", path, "--conf", conf, "--policy", pol, *rec,
                   *(["--memory-limit", memory_limit] if memory_limit else [])])
        return out["configs"][0]

    def min_memory(conf, pol):
        return run([cli, "min-memory", "--json", "--quiet", path, "--conf", conf, "--policy", pol,
                    *rec])["configs"][0]["min_memory"]

    classic = compare("", "native")
    at_best_min_native = compare(best_line, "native", best["min_memory"])
    at_best_min_policy = compare("", policy, best["min_memory"])
    pol = compare("", policy)
    calls = lambda r: r["device_allocs"] + r["device_frees"] + r["retries"]
    return {
        "trace": name, "limited": bool(limit),
        "floor": classic["peak_allocated"],
        "best_line": best_line or "defaults",
        "min": {"classic": min_memory("", "native"), "best": best["min_memory"],
                "policy": min_memory("", policy)},
        "peak": {"classic": classic["peak_reserved"], "best": best["peak_reserved_unlimited"],
                 "policy": pol["peak_reserved"]},
        "calls": {"best": calls(at_best_min_native), "policy": calls(at_best_min_policy)},
        "ooms": {"best": at_best_min_native["ooms"], "policy": at_best_min_policy["ooms"]},
        "reserved_at_min": {"best": at_best_min_native["peak_reserved"],
                            "policy": at_best_min_policy["peak_reserved"]},
    }


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--policy", default="stitch")
    p.add_argument("--out", default=str(REPO / "docs" / "fragmentation.md"))
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--traces", action="append", metavar="DIR",
                   help="trace folders to use instead of the bundled ones (repeatable; e.g. the "
                        "strand suite's traces/, benchmarks/strand/measure.py)")
    args = p.parse_args()
    folders = [pathlib.Path(d) for d in args.traces] if args.traces else BUNDLED
    for d in folders:
        if not d.is_dir() or not list(d.glob("*.pickle.gz")):
            p.error(f"--traces: {d} holds no *.pickle.gz traces")
    cli = pathlib.Path(args.build).resolve() / "tools" / "cachealloc"
    start = time.time()
    rows = [measure(cli, *t, args.policy) for t in traces(folders)]
    pol = args.policy
    lines = [
        "| trace | floor (peak allocated) | min memory: classic | native's best | " + pol +
        " | peak reserved, no limit: classic | native's best | " + pol +
        " | device calls + retries at best's min: native's best | " + pol +
        " | OOMs there: native's best | " + pol + " | peak reserved there: native's best | " + pol +
        " | native's best config |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(
            f"| {r['trace']}{'*' if r['limited'] else ''} | {mib(r['floor'])} | {mib(r['min']['classic'])} | "
            f"{mib(r['min']['best'])} | {mib(r['min']['policy'])} | {mib(r['peak']['classic'])} | "
            f"{mib(r['peak']['best'])} | {mib(r['peak']['policy'])} | {r['calls']['best']} | "
            f"{r['calls']['policy']} | {r['ooms']['best']} | {r['ooms']['policy']} | "
            f"{mib(r['reserved_at_min']['best'])}{'†' if r['reserved_at_min']['best'] > r['min']['best'] else ''} | "
            f"{mib(r['reserved_at_min']['policy'])} | `{r['best_line']}` |")
    ratio = {k: [r[k]["policy"] / r[k]["best"] for r in rows] for k in ("min", "peak")}
    call_ratio = [(r["calls"]["policy"] + 1) / (r["calls"]["best"] + 1) for r in rows]
    worst = {k: max(zip(ratio[k], rows), key=lambda x: x[0]) for k in ratio}
    worst_calls = max(zip(call_ratio, rows), key=lambda x: x[0])
    to_floor = [r["peak"]["policy"] / r["floor"] for r in rows]
    lines += [
        "",
        f"{pol} / native's best, geometric mean over {len(rows)} traces: min memory "
        f"{geomean(ratio['min']):.3f}, peak reserved {geomean(ratio['peak']):.3f} "
        f"({100 * (1 - geomean(ratio['peak'])):.1f} % lower), device calls + retries "
        f"{geomean(call_ratio):.3f} (each +1). Worst case: min memory {worst['min'][0]:.3f} "
        f"({worst['min'][1]['trace']}), peak reserved {worst['peak'][0]:.3f} ({worst['peak'][1]['trace']}), "
        f"device calls {worst_calls[1]['calls']['policy']} vs {worst_calls[1]['calls']['best']} "
        f"({worst_calls[1]['trace']}). {pol}'s peak reserved over the floor: geomean "
        f"{geomean(to_floor):.3f}, worst {max(to_floor):.3f}."]
    missed = []
    for r in rows:
        if r["min"]["policy"] > r["min"]["best"]:
            missed.append(f"{r['trace']}: min memory {mib(r['min']['policy'])} > native's best {mib(r['min']['best'])} MiB")
        if r["peak"]["policy"] > r["peak"]["best"]:
            missed.append(f"{r['trace']}: peak reserved {mib(r['peak']['policy'])} > native's best {mib(r['peak']['best'])} MiB")
        if r["calls"]["policy"] > r["calls"]["best"]:
            missed.append(f"{r['trace']}: {r['calls']['policy']} device calls + retries > native's best {r['calls']['best']}")
        if r["ooms"]["policy"] > 0:
            missed.append(f"{r['trace']}: {r['ooms']['policy']} OOMs at native's best minimum")
    if geomean(ratio["peak"]) > 0.9 and max(to_floor) > 1.01:
        missed.append("peak reserved geomean not 10 % below native's best, and not within 1 % of the floor everywhere")
    if any(r["reserved_at_min"]["best"] > r["min"]["best"] for r in rows):
        # min-memory counts a run that reserves past its limit as not fitting
        # (lab/min_memory.h), so this marks a broken premise, not a result.
        lines += ["", "† native reserved more than its minimum, which min-memory should not allow "
                  "(lab/min_memory.h: a run fits when it never reserves more than the limit)."]
    lines += ["", "Targets missed: " + ("; ".join(missed) if missed else "none") + "."]
    table = "\n".join(lines)
    print(table)
    if not args.no_write:
        header = (f"Generated by `python3 benchmarks/fragmentation/policy_table.py --policy {pol}` in "
                  f"{time.time() - start:.0f} s on {platform.machine()} ({os.cpu_count()} cores, shared), "
                  f"{time.strftime('%Y-%m-%d')}. MiB throughout; * recorded under a memory fraction "
                  "(searched under that limit).")
        block = "\n".join([BEGIN, "", header, "", table, "", END])
        doc = pathlib.Path(args.out)
        text = doc.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            text = head + block + rest.split(END, 1)[1]
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        doc.write_text(text)
        print(f"wrote {doc}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
