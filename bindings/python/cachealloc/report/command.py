"""`cachealloc report RUN_DIR`: every rank of a run directory, merged."""
from __future__ import annotations

import argparse
import io
import json
import pathlib
import sys
import time
from typing import List, Optional

from .._core import LabError
from .html_page import gib, headline, render
from .rank_peak import SnapshotError
from .run_merge import DEFAULT_ADVISE_RANKS, advise_worst, merge_ranks

USAGE = """\
cachealloc report RUN_DIR [--html PAGE] [--json FILE] [--advise-ranks N] [--jobs N]
    Reads every rank folder of RUN_DIR (cachealloc run --snapshot-dir, or
    install(snapshot_dir=...)): per rank peak reserved and allocated, when
    the allocated peak came and the live blocks then by allocation site; the
    advisor on the N ranks that peak highest (default 8; 0: skip) for one
    config that fits the worst of them. --html: one page, a row per rank.
"""


def report(run_dir, html=None, json_path=None, advise_ranks: int = DEFAULT_ADVISE_RANKS,
           jobs: Optional[int] = None, out=sys.stdout) -> dict:
    """Merges RUN_DIR, prints the answer and the per-rank table to `out`,
    writes the page and the JSON when asked. Returns {"ranks", "advice",
    "seconds"}. Raises as merge_ranks."""
    start = time.monotonic()
    ranks = merge_ranks(run_dir, jobs=jobs)
    merged = time.monotonic() - start
    advice = advise_worst(ranks, advise_ranks, jobs=jobs) if advise_ranks > 0 else None
    for line in headline(ranks, advice):
        print(line, file=out)
    print(f"{'rank':>6} {'peak reserved':>18} {'peak allocated':>18}  allocated peak at", file=out)
    for r in ranks:
        when = "-" if r.get("peak_time_us") is None else f"t={r['peak_time_us']} us"
        print(f"{r['rank']:>6} {r['peak_reserved']:>18,} {r['peak_allocated']:>18,}  {when}",
              file=out)
    result = {"ranks": ranks, "advice": advice, "merge_seconds": merged,
              "seconds": time.monotonic() - start}
    if html:
        page = render(ranks, advice, f"cachealloc report: {pathlib.Path(run_dir).name}")
        pathlib.Path(html).write_text(page, encoding="utf-8")
        print(f"page: {html} ({len(page.encode()):,} bytes)", file=out)
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(result, indent=1))
    return result


def report_run(run_dir, html=None, advise_ranks: int = DEFAULT_ADVISE_RANKS,
               jobs: Optional[int] = None) -> dict:
    """`cachealloc report RUN_DIR` as a dict, printing nothing: "ranks" (one
    summary per rank: peak_reserved, peak_allocated, peak_time_us,
    sites_at_peak...), "advice" (the advisor over the `advise_ranks` highest
    ranks, one config for the worst of them), "seconds". html: also write
    the page. Raises as merge_ranks, and LabError from the advisor."""
    return report(run_dir, html=html, advise_ranks=advise_ranks, jobs=jobs, out=io.StringIO())


def main(args: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="cachealloc report", usage=USAGE)
    parser.add_argument("run_dir")
    parser.add_argument("--html")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--advise-ranks", type=int, default=DEFAULT_ADVISE_RANKS)
    parser.add_argument("--jobs", type=int)
    ns = parser.parse_args(args)
    if ns.advise_ranks < 0 or (ns.jobs is not None and ns.jobs < 1):
        parser.error("--advise-ranks must be >= 0 and --jobs >= 1")
    try:
        report(ns.run_dir, ns.html, ns.json_path, ns.advise_ranks, ns.jobs)
    except (OSError, ValueError, SnapshotError, LabError) as e:
        print(f"cachealloc report: {e}", file=sys.stderr)
        return 2
    return 0
