"""All ranks of a run directory in one picture.

Ranks are analysed in parallel worker processes (rank_peak.analyze_rank,
linear in each rank's events) and their small summaries streamed back as
they finish, so memory stays at one snapshot per worker whatever the rank
count. Then the advisor (lab.advise) replays the ranks that peak highest,
up to `advise_ranks` of them, and the one config whose worst rank needs the
least memory is advised: it fits the worst rank, not just an average one.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import time
from typing import Callable, List, Optional

from .. import lab, rank_files
from .rank_peak import analyze_rank

DEFAULT_ADVISE_RANKS = 8


def _analyze(task):
    rank, folder = task
    return analyze_rank(rank, folder)


def merge_ranks(run_dir, jobs: Optional[int] = None,
                on_rank: Optional[Callable[[dict], None]] = None) -> List[dict]:
    """Every rank's summary, by rank. jobs: worker processes (default: the
    CPUs this process may use). on_rank(summary) is called as each rank
    finishes. Raises FileNotFoundError for a missing run directory,
    ValueError when it holds no rank folder, rank_peak.SnapshotError for an
    unreadable rank."""
    folders = rank_files.ranks_in(run_dir)
    if not folders:
        raise ValueError(f"{run_dir}: no rank folders (rank-NNNNN) in this run directory")
    jobs = jobs or len(os.sched_getaffinity(0))
    out = []
    tasks = list(folders.items())
    if jobs <= 1 or len(tasks) == 1:
        results = map(_analyze, tasks)
        for r in results:
            out.append(r)
            if on_rank:
                on_rank(r)
    else:
        # spawn: workers need no state of this process (and fork under
        # threads or CUDA is unsafe).
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(processes=min(jobs, len(tasks))) as pool:
            for r in pool.imap_unordered(_analyze, tasks, chunksize=1):
                out.append(r)
                if on_rank:
                    on_rank(r)
    out.sort(key=lambda r: r["rank"])
    return out


def highest_ranks(ranks: List[dict], count: int) -> List[dict]:
    """The `count` ranks that peak highest (reserved, then allocated)."""
    order = sorted(ranks, key=lambda r: (-r["peak_reserved"], -r["peak_allocated"], r["rank"]))
    return order[:count]


def advise_worst(ranks: List[dict], count: int = DEFAULT_ADVISE_RANKS,
                 jobs: Optional[int] = None, memory_limit: Optional[int] = None) -> dict:
    """Runs the advisor on the `count` highest ranks (those with history)
    and picks the config whose largest minimum memory over them is least.
    Returns {"ranks": [...], "recommendation": conf text, "worst_rank",
    "worst_min_memory", "per_rank": {rank: min_memory}, "configs": [...],
    "seconds"}; {"skipped": reason} when no rank has a snapshot."""
    chosen = [r for r in highest_ranks(ranks, len(ranks)) if r.get("snapshot")][:count]
    if not chosen:
        return {"skipped": "no rank wrote a snapshot with history"}
    start = time.monotonic()
    jobs = jobs or len(os.sched_getaffinity(0))

    def one(r):
        return r["rank"], lab.advise(r["snapshot"], memory_limit=memory_limit, threads=1)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        advice = dict(ex.map(one, chosen))  # each call is its own process
    # A config counts only if every chosen rank replayed it.
    by_line = {}
    for rank, a in advice.items():
        for c in a.get("configs", []):
            by_line.setdefault(c["line"], {})[rank] = c
    complete = {line: per for line, per in by_line.items() if len(per) == len(advice)}
    if not complete:
        return {"skipped": "the advisor's configs differ between ranks", "ranks": list(advice)}

    def worst(per):
        if any(c.get("ooms") for c in per.values()):
            return float("inf")
        return max(c["min_memory"] for c in per.values())

    table = sorted(((worst(per), line, per) for line, per in complete.items()),
                   key=lambda t: t[0])
    best_worst, best_line, best_per = table[0]
    worst_rank = max(best_per, key=lambda rank: best_per[rank]["min_memory"])
    defaults = complete.get("")
    return {
        "ranks": [r["rank"] for r in chosen],
        "recommendation": best_line,
        "worst_rank": worst_rank,
        "worst_min_memory": best_worst,
        "defaults_worst_min_memory": worst(defaults) if defaults else None,
        "per_rank": {rank: c["min_memory"] for rank, c in best_per.items()},
        "configs": [{"line": line, "worst_min_memory": w} for w, line, _ in table[:10]],
        "seconds": time.monotonic() - start,
    }
