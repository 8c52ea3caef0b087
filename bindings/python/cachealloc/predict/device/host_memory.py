"""How much host memory the cpu-init mode's real CPU tensors may hold
(cpu_side.py). Measured, not guessed: the operating system's available
memory when the recording starts, less a reserve for everything else the
process and the machine need; what the script's real tensors hold is
counted by cpu_side, storage by storage.

available: Linux MemAvailable (/proc/meminfo: what can be allocated
without swapping); elsewhere the free physical pages (sysconf), which
undercounts reclaimable cache, so the guard errs on falling back.
Reserve: a fifth of it, at least 1 GiB (the fake recording, torch, and
whatever else the machine runs meanwhile).
"""
from __future__ import annotations

import os

GIB = 1 << 30


def available_bytes() -> int:
    """Host memory available now, in bytes (0 when it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024      # the file says kB (KiB)
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def budget(available: int) -> int:
    """Bytes the real CPU tensors may hold, given `available` bytes."""
    return max(0, available - max(GIB, available // 5))


class HostMemoryExceeded(BaseException):
    """The real CPU side would hold more than the budget: the worker drops
    this recording and runs the step again all-fake (a BaseException, so the
    script's `except Exception` does not swallow it)."""

    def __init__(self, needed: int, budget_bytes: int, available: int, where: str):
        self.needed, self.budget, self.available, self.where = needed, budget_bytes, available, where
        super().__init__(
            f"the step's CPU tensors would hold {needed / GIB:.1f} GiB of host memory at {where}, "
            f"over the {budget_bytes / GIB:.1f} GiB budget ({available / GIB:.1f} GiB available "
            f"when the recording started, less a reserve)")
