"""torch.cuda's statistics functions, same names and meaning, answered by
cachealloc's allocator. Sizes in bytes."""
from __future__ import annotations

import collections
import ctypes
from typing import Any

from ._native import check, lib
from .devices import device_index
from .summary import format_summary


def memory_stats(device: Any = None) -> "collections.OrderedDict[str, int]":
    """All 122 statistics of torch.cuda.memory_stats, same keys and meaning."""
    l = lib()
    n = l.cachealloc_stat_count()
    values = (ctypes.c_int64 * n)()
    check(l.cachealloc_memory_stats(device_index(device), values, n))
    return collections.OrderedDict(
        (l.cachealloc_stat_name(i).decode(), values[i]) for i in range(n))


def memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    check(lib().cachealloc_reset_peak_stats(device_index(device)))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    check(lib().cachealloc_reset_accumulated_stats(device_index(device)))


def empty_cache() -> None:
    """Returns every unsplit cached segment of every device to the driver."""
    check(lib().cachealloc_empty_cache(-1))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Caps the memory this process reserves on the device at
    floor(fraction * capacity); beyond it requests raise OutOfMemoryError.
    TypeError for a fraction that is not an int or float (a bool included),
    ValueError outside [0, 1], as torch.cuda's."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError(f"fraction must be a float, not {type(fraction).__name__}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction!r}")
    check(lib().cachealloc_set_memory_fraction(float(fraction), device_index(device)))


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A readable table of the statistics, like torch.cuda.memory_summary."""
    index = device_index(device)
    return format_summary(memory_stats(index), index, abbreviated)
