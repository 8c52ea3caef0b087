"""Which tensors are alive at each rank's allocated peak, and when they were
released: the analysis behind a peak that differs between ranks or runs.

    python tests/gpu/peak_sites.py RUN_DIR [RUN_DIR ...] [--top 15]

For every rank folder (rank_files' layout) of every RUN_DIR: the peak of
allocated bytes in its history, its event index and time, and the live
blocks at that moment grouped by allocation site (the first Python frame
outside torch and cachealloc), largest first. Then, between the rank
(of any run) that peaks highest and the one that peaks lowest: the sites
whose live bytes differ, and for each, when its blocks were allocated and
released relative to each peak (µs; a block released after its rank's peak
was counted in it; one released before was not). That is how a difference
of one fp32 copy of the parameters shows which copy (e.g. gradients, or a
bucket view, or the optimizer's fp32 state) lived across the peak on one
rank and not on the other, and whether its release came later in time or
only later in order.
"""
import argparse
import collections
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))

from cachealloc import rank_files  # noqa: E402
from cachealloc.library_frames import prefixes_of  # noqa: E402
from cachealloc.report.rank_peak import (BEFORE_HISTORY, _busiest_device, allocation_site,  # noqa: E402
                                         analyze_trace, load_snapshot)


def live_at_peak(snapshot, device):
    """(summary, blocks): blocks live at the allocated peak, each
    {addr, size, site, alloc_us, free_us (None: never freed in the history)}."""
    summary = analyze_trace(snapshot, device)
    events = snapshot["device_traces"][device]
    peak = summary["peak_event"]
    live = {}
    for e in events[:peak + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = {"addr": e["addr"], "size": e["size"],
                               "site": allocation_site(e.get("frames"), prefixes_of(snapshot)),
                               "alloc_us": e.get("time_us"), "free_us": None}
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    for e in events[peak + 1:]:
        if e["action"] == "free_completed" and e["addr"] in live \
                and live[e["addr"]]["free_us"] is None:
            live[e["addr"]]["free_us"] = e.get("time_us")
    return summary, list(live.values())


def released_before_peak(snapshot, device, summary, site, count=3):
    """The `count` blocks of `site` released last before the peak: (size,
    alloc_us, free_us) relative to the peak, so a release that moved from
    after the peak (counted) to before it (not counted) shows."""
    events = snapshot["device_traces"][device]
    peak_us = summary["peak_time_us"] or 0
    born = {}
    out = []
    for e in events[:summary["peak_event"] + 1]:
        if e["action"] == "alloc":
            born[e["addr"]] = (e.get("time_us", 0), allocation_site(e.get("frames"), prefixes_of(snapshot)))
        elif e["action"] == "free_completed" and e["addr"] in born:
            t, where = born.pop(e["addr"])
            if where == site:
                out.append((e["size"], t - peak_us, e.get("time_us", 0) - peak_us))
    return out[-count:]


def by_site(blocks):
    sites = collections.defaultdict(lambda: [0, 0])
    for b in blocks:
        sites[b["site"]][0] += b["size"]
        sites[b["site"]][1] += 1
    return sites


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dirs", nargs="+")
    ap.add_argument("--top", type=int, default=15)
    ns = ap.parse_args()
    ranks = []
    for run_dir in ns.run_dirs:
        for rank, folder in rank_files.ranks_in(run_dir).items():
            snaps = rank_files.rank_snapshots(folder)
            if not snaps:
                continue
            snap = load_snapshot(snaps[0])
            device = _busiest_device(snap)
            summary, blocks = live_at_peak(snap, device)
            label = f"{pathlib.Path(run_dir).name}/rank {rank}"
            ranks.append((label, summary, blocks, snap, device))
            print(f"== {label}: peak allocated {summary['trace_peak_allocated']:,} B at event "
                  f"{summary['peak_event']:,} of {summary['events']:,} "
                  f"(t={summary['peak_time_us']} us); live blocks by site:")
            sites = by_site(blocks)
            before = next((s for s in summary["sites_at_peak"] if s["site"] == BEFORE_HISTORY), None)
            if before:
                sites[BEFORE_HISTORY] = [before["bytes"], 0]
            for site, (size, n) in sorted(sites.items(), key=lambda kv: -kv[1][0])[:ns.top]:
                print(f"  {size:>15,} B {n:>5} blocks  {site}")
    if len(ranks) < 2:
        return
    hi = max(ranks, key=lambda r: r[1]["trace_peak_allocated"])
    lo = min(ranks, key=lambda r: r[1]["trace_peak_allocated"])
    diff = hi[1]["trace_peak_allocated"] - lo[1]["trace_peak_allocated"]
    print(f"\n== highest {hi[0]} against lowest {lo[0]}: {diff:,} B more at the peak")
    hs, ls = by_site(hi[2]), by_site(lo[2])
    changed = sorted(((hs.get(s, [0, 0])[0] - ls.get(s, [0, 0])[0], s) for s in set(hs) | set(ls)),
                     key=lambda t: -abs(t[0]))
    for delta, site in changed[:ns.top]:
        if delta == 0:
            continue
        print(f"  {delta:>+15,} B  {site}")
        for label, summary, blocks, snap, device in (hi, lo):
            for size, born, gone in released_before_peak(snap, device, summary, site):
                print(f"      {label}: a {size:,} B block of this site was allocated {born:+,} us "
                      f"and released {gone:+,} us from the peak (before it: not counted)")
            peak_us = summary["peak_time_us"] or 0
            mine = [b for b in blocks if b["site"] == site]
            if not mine:
                print(f"      {label}: no block of this site live at its peak")
                continue
            freed = [b["free_us"] - peak_us for b in mine if b["free_us"] is not None]
            allocd = [b["alloc_us"] - peak_us for b in mine if b["alloc_us"] is not None]
            print(f"      {label}: {len(mine)} blocks, {sum(b['size'] for b in mine):,} B; "
                  f"allocated {min(allocd, default=0):+,}..{max(allocd, default=0):+,} us and "
                  f"released {min(freed, default=0):+,}..{max(freed, default=0):+,} us "
                  f"from the peak ({len(mine) - len(freed)} never released in the history)")


if __name__ == "__main__":
    main()
