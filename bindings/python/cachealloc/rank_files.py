"""Where each rank's files go in a run directory: the one naming rule that
every writer (end of run, on demand, at an OOM) and every reader (`cachealloc
report`, the lab) share.

    RUN_DIR/rank-00003/snapshot-end.pickle
    RUN_DIR/rank-00003/snapshot-api-0001.pickle
    RUN_DIR/rank-00003/snapshot-oom-0001.pickle
    RUN_DIR/rank-00003/memory_stats.json

Each rank writes only into its own folder, so no file passes through another
process and ranks never race on a name. Ranks are numbered as torch.distributed
numbers them (the RANK variable torchrun sets, else the process group's rank,
else 0).
"""
from __future__ import annotations

import os
import pathlib
import re
from typing import Dict, List, Optional

RANK_DIR_PATTERN = re.compile(r"^rank-(\d{5,})$")
# Snapshot kinds: why it was written.
KINDS = ("end", "api", "oom")
STATS_FILE = "memory_stats.json"


def current_rank() -> int:
    """This process's rank: $RANK (torchrun, torch.distributed.launch),
    else torch.distributed's rank when a process group is up, else 0.
    Raises ValueError when $RANK is not a non-negative integer."""
    value = os.environ.get("RANK")
    if value is not None and value != "":
        if not value.isdigit():
            raise ValueError(f"RANK={value!r} is not a non-negative integer")
        return int(value)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except ImportError:
        pass
    return 0


def rank_dir(run_dir, rank: int) -> pathlib.Path:
    """RUN_DIR/rank-NNNNN (five digits at least, so names sort by rank)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a non-negative int, got {rank!r}")
    return pathlib.Path(run_dir) / f"rank-{rank:05d}"


def snapshot_path(run_dir, rank: int, kind: str, sequence: Optional[int] = None) -> pathlib.Path:
    """The snapshot file of `rank` for `kind` ("end"; "api" and "oom" take a
    sequence number >= 1, one file per call or OOM)."""
    if kind not in KINDS:
        raise ValueError(f"snapshot kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "end":
        if sequence is not None:
            raise ValueError("the end-of-run snapshot takes no sequence number")
        return rank_dir(run_dir, rank) / "snapshot-end.pickle"
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 1:
        raise ValueError(f"a {kind!r} snapshot needs a sequence number >= 1, got {sequence!r}")
    return rank_dir(run_dir, rank) / f"snapshot-{kind}-{sequence:04d}.pickle"


def next_snapshot_path(run_dir, rank: int, kind: str) -> pathlib.Path:
    """snapshot_path with the first sequence number not yet written by this
    rank (only this rank writes its folder, so the answer cannot race)."""
    n = 1
    while snapshot_path(run_dir, rank, kind, n).exists():
        n += 1
    return snapshot_path(run_dir, rank, kind, n)


def stats_path(run_dir, rank: int) -> pathlib.Path:
    return rank_dir(run_dir, rank) / STATS_FILE


def ranks_in(run_dir) -> Dict[int, pathlib.Path]:
    """{rank: its folder} for every rank folder in RUN_DIR, by rank.
    Raises FileNotFoundError / NotADirectoryError for a missing RUN_DIR."""
    root = pathlib.Path(run_dir)
    if not root.exists():
        raise FileNotFoundError(f"run directory {root} does not exist")
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    found = {}
    for entry in root.iterdir():
        m = RANK_DIR_PATTERN.match(entry.name)
        if m and entry.is_dir():
            found[int(m.group(1))] = entry
    return dict(sorted(found.items()))


def rank_snapshots(folder) -> List[pathlib.Path]:
    """A rank folder's snapshots, the end-of-run one first, then on-demand
    and OOM ones by sequence."""
    folder = pathlib.Path(folder)
    end = folder / "snapshot-end.pickle"
    others = sorted(p for p in folder.glob("snapshot-*.pickle") if p != end)
    return ([end] if end.exists() else []) + others


def rank_file_name(kind: str, suffix: str, when: Optional[float] = None,
                   rank_: Optional[int] = None, pid: Optional[int] = None) -> str:
    """A file name for a directory that many ranks share (the OOM flight
    recorder's): "{kind}_rank{RRRR}_{UTC time to the microsecond}Z_pid{pid}{suffix}",
    so `ls` groups a rank's files in time order and no two processes pick
    the same name. when: seconds since the epoch (default now); rank_ and
    pid default to this process's. kind must be a plain word."""
    import datetime

    if not kind or not all(c.isalnum() or c in "_-" for c in kind):
        raise ValueError(f"kind must be a plain word, got {kind!r}")
    stamp = datetime.datetime.fromtimestamp(
        when if when is not None else datetime.datetime.now().timestamp(), datetime.timezone.utc)
    r = current_rank() if rank_ is None else rank_
    p = os.getpid() if pid is None else pid
    return f"{kind}_rank{r:04d}_{stamp.strftime('%Y%m%dT%H%M%S.%f')}Z_pid{p}{suffix}"
