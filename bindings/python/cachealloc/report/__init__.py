"""Merged per-rank reports of a run directory (`cachealloc report`)."""
from .command import report, report_run
from .rank_peak import SnapshotError, analyze_rank, analyze_trace, load_snapshot
from .run_merge import advise_worst, highest_ranks, merge_ranks

__all__ = ["report", "report_run", "SnapshotError", "analyze_rank", "analyze_trace", "load_snapshot",
           "advise_worst", "highest_ranks", "merge_ranks"]
