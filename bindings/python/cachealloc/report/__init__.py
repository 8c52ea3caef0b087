"""Merged per-rank reports of a run directory (`cachealloc report`)."""
from .command import report
from .rank_peak import SnapshotError, analyze_rank, analyze_trace, load_snapshot
from .run_merge import advise_worst, highest_ranks, merge_ranks

__all__ = ["report", "SnapshotError", "analyze_rank", "analyze_trace", "load_snapshot",
           "advise_worst", "highest_ranks", "merge_ranks"]
