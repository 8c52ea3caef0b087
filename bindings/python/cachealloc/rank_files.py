"""Names of the files one rank of a (possibly distributed) job writes into
a shared directory: the rank first, then the time, so that `ls` groups a
rank's files and orders them by time, and no two ranks or processes ever
pick the same name.

    oom_rank0003_20261128T083112.123456Z_pid4242.pickle
"""
from __future__ import annotations

import datetime
import os
from typing import Optional


def rank() -> int:
    """This process's rank: $RANK (torchrun, SLURM launchers exporting it),
    else $LOCAL_RANK, else 0. A value that is not a non-negative integer
    raises ValueError naming the variable."""
    for name in ("RANK", "LOCAL_RANK"):
        text = os.environ.get(name)
        if text is None or text == "":
            continue
        if not text.isdigit():
            raise ValueError(f"${name} must be a non-negative integer, got {text!r}")
        return int(text)
    return 0


def rank_file_name(kind: str, suffix: str, when: Optional[float] = None,
                   rank_: Optional[int] = None, pid: Optional[int] = None) -> str:
    """"{kind}_rank{RRRR}_{UTC time to the microsecond}Z_pid{pid}{suffix}".
    when: seconds since the epoch (default now); rank_ and pid default to
    this process's. kind must be a plain word (letters, digits, _ and -)."""
    if not kind or not all(c.isalnum() or c in "_-" for c in kind):
        raise ValueError(f"kind must be a plain word, got {kind!r}")
    stamp = datetime.datetime.fromtimestamp(
        when if when is not None else datetime.datetime.now().timestamp(), datetime.timezone.utc)
    r = rank() if rank_ is None else rank_
    p = os.getpid() if pid is None else pid
    return f"{kind}_rank{r:04d}_{stamp.strftime('%Y%m%dT%H%M%S.%f')}Z_pid{p}{suffix}"
