"""Per-rank snapshots in a run directory (rank_files.py names them).

Set up by install(snapshot_dir=DIR) or `cachealloc run --snapshot-dir DIR`
(which passes $CACHEALLOC_SNAPSHOT_DIR to every process it starts). From
then on each process records allocation history (at most `history_entries`
events, oldest dropped) and writes, into DIR/rank-NNNNN/:
  - at the end of the run (interpreter exit): snapshot-end.pickle and
    memory_stats.json;
  - on demand: write_snapshot() -> snapshot-api-NNNN.pickle (and the stats);
  - at an OOM: snapshot-oom-NNNN.pickle, written by the OOM recorder through
    rank_files.snapshot_path (not here).
Every rank writes its own files; nothing passes through another process.
"""
from __future__ import annotations

import atexit
import json
import os
import pathlib
import pickle
import sys
from typing import Optional

from . import plain_pickle, rank_files
from ._core import mode
from ._native import lib
from .history import record_memory_history, snapshot_bytes
from .library_frames import with_prefixes
from .stats import memory_stats

ENV_DIR = "CACHEALLOC_SNAPSHOT_DIR"
ENV_ENTRIES = "CACHEALLOC_SNAPSHOT_ENTRIES"
DEFAULT_HISTORY_ENTRIES = 200_000

_run_dir: Optional[pathlib.Path] = None
_at_exit_armed = False


def configure(run_dir, history_entries: Optional[int] = None) -> pathlib.Path:
    """Makes `run_dir` this process's run directory and starts recording
    history (`history_entries` events, default $CACHEALLOC_SNAPSHOT_ENTRIES
    or 200,000). Creates the directory; raises ValueError for an empty path
    or a bad count, OSError when it cannot be created."""
    global _run_dir, _at_exit_armed
    if run_dir is None or os.fspath(run_dir) == "":
        raise ValueError("snapshot_dir must name a directory")
    if history_entries is None:
        text = os.environ.get(ENV_ENTRIES, "")
        if text and not text.isdigit():
            raise ValueError(f"{ENV_ENTRIES}={text!r} is not a positive integer")
        history_entries = int(text) if text else DEFAULT_HISTORY_ENTRIES
    if isinstance(history_entries, bool) or not isinstance(history_entries, int) \
            or history_entries < 1:
        raise ValueError(f"history_entries must be a positive int, got {history_entries!r}")
    path = pathlib.Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    record_memory_history("all", context="all", stacks="python", max_entries=history_entries)
    _run_dir = path
    if not _at_exit_armed:
        atexit.register(_write_at_exit)
        _at_exit_armed = True
    return path


def run_dir() -> Optional[pathlib.Path]:
    """The run directory in force, or None."""
    return _run_dir


def _snapshot_pickle() -> bytes:
    """The snapshot as written to the folder: native's schema plus the
    install folders of torch and cachealloc (library_frames), so that the
    report tells the user's frames from the libraries' on any machine."""
    if mode() == "torch-extension":
        import torch

        snap = torch.cuda.memory._snapshot()
    else:
        snap = plain_pickle.loads(snapshot_bytes())
    return pickle.dumps(with_prefixes(snap), protocol=4)


def _stats_by_device() -> dict:
    count = lib().cachealloc_device_count()
    out = {}
    for device in range(max(count, 0)):
        stats = memory_stats(device)
        if stats["reserved_bytes.all.peak"] or stats["allocated_bytes.all.peak"]:
            out[str(device)] = dict(stats)
    return out


def _write_atomically(path: pathlib.Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)  # readers never see half a file


def write_snapshot(kind: str = "api", run_dir=None) -> pathlib.Path:
    """Writes this rank's snapshot (history included) and memory_stats.json
    into the run directory (`run_dir`, else the configured one). kind "api"
    numbers the files; "end" is the end-of-run file. Returns the snapshot's
    path. Raises RuntimeError when no run directory is set."""
    target = pathlib.Path(run_dir) if run_dir is not None else _run_dir
    if target is None:
        raise RuntimeError("no snapshot directory: call cachealloc.install(snapshot_dir=DIR), "
                           "run under `cachealloc run --snapshot-dir DIR`, or pass run_dir")
    rank = rank_files.current_rank()
    path = (rank_files.snapshot_path(target, rank, "end") if kind == "end"
            else rank_files.next_snapshot_path(target, rank, kind))
    _write_atomically(path, _snapshot_pickle())
    stats = {"rank": rank, "devices": _stats_by_device()}
    _write_atomically(rank_files.stats_path(target, rank), json.dumps(stats).encode())
    return path


def _write_at_exit() -> None:
    if _run_dir is None:
        return
    try:
        # A process that never allocated device memory has nothing to say,
        # and must not write: torchrun's launcher inherits the run directory
        # (through `cachealloc run`'s start-up hook) but has no $RANK, so it
        # would take rank 0's name and replace that rank's files at exit.
        if not _stats_by_device():
            return
        write_snapshot("end")
    except Exception as e:  # at exit nothing can be raised to; say it
        sys.stderr.write(f"cachealloc: writing the end-of-run snapshot into {_run_dir} failed: "
                         f"{type(e).__name__}: {e}\n")
