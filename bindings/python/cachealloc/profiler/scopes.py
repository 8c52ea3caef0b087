"""Where the profiler's per-scope numbers come from.

Two sources give the same counters (the fields of cachealloc_scope_result,
see cachealloc.h; bytes, except counts and depth):

- ExactScopes: cachealloc's own allocator. Each scope is a ScopeTracker
  scope in the engine (stats/scope_tracker.h), updated on every allocation
  under the device's lock. Peaks are exact at any nesting depth and no
  global peak statistic is reset.
- PeakResetScopes: PyTorch's native allocator (cachealloc not installed).
  Peaks come from torch.cuda.reset_peak_memory_stats() at every scope
  boundary and torch.cuda.memory_stats() read just before each reset.
  See its docstring for why that is not exact.
"""
from __future__ import annotations

import ctypes
import warnings
from typing import Any, Dict, List, Optional

from .. import _native
from ..devices import device_index

COUNTER_FIELDS = [name for name, _ in _native.ScopeResultStruct._fields_]
CURRENT_FIELDS = [name for name, _ in _native.CurrentBytesStruct._fields_]


class ExactScopes:
    """Scopes kept by cachealloc's engine on one device (exact)."""

    exact = True

    def __init__(self, device: int):
        self.device = device

    def current_bytes(self) -> Dict[str, int]:
        """{"allocated", "reserved", "active", "inactive_split"}: the
        device's current bytes (memory_stats' *.all.current), one C call."""
        out = _native.CurrentBytesStruct()
        _native.check(_native.lib().cachealloc_current_bytes_of(self.device, ctypes.byref(out)))
        return {name: getattr(out, name) for name in CURRENT_FIELDS}

    def open(self) -> int:
        """Opens a scope nested in the innermost open one; returns its id."""
        scope_id = ctypes.c_uint64()
        _native.check(_native.lib().cachealloc_scope_open(self.device, ctypes.byref(scope_id)))
        return scope_id.value

    def close(self, token: int) -> Dict[str, int]:
        """Closes scope `token` (must be the device's innermost) and returns
        its counters. Raises CacheallocError naming the scopes still open
        when it is not the innermost."""
        out = _native.ScopeResultStruct()
        _native.check(_native.lib().cachealloc_scope_close(self.device, token, ctypes.byref(out)))
        return {name: getattr(out, name) for name in COUNTER_FIELDS}


class _OpenScope:
    """One scope of PeakResetScopes; mirrors ScopeTracker's bookkeeping."""

    def __init__(self, token: int, depth: int, stats: Dict[str, int]):
        self.token = token
        self.counters = dict.fromkeys(COUNTER_FIELDS, 0)
        c = self.counters
        c["depth"] = depth
        c["allocated_at_open"] = c["self_peak_allocated"] = stats["allocated_bytes.all.current"]
        c["reserved_at_open"] = c["self_peak_reserved"] = stats["reserved_bytes.all.current"]
        self.children = dict.fromkeys(
            ["peak_allocated", "peak_reserved", "bytes_allocated", "bytes_freed", "allocations",
             "frees"], 0)


_ACCUMULATED = {  # self counter <- accumulated memory_stats key
    "self_bytes_allocated": "allocated_bytes.all.allocated",
    "self_bytes_freed": "allocated_bytes.all.freed",
    "self_allocations": "allocation.all.allocated",
    "self_frees": "allocation.all.freed",
}

_warned_not_exact = False


def warn_not_exact_once() -> None:
    global _warned_not_exact
    if _warned_not_exact:
        return
    _warned_not_exact = True
    warnings.warn(
        "cachealloc.profiler: cachealloc is not installed, so scope peaks come from "
        "torch.cuda.reset_peak_memory_stats() at every scope boundary. Nested peaks are then "
        "NOT exact (anything else that resets peaks, or allocates from another thread, while a "
        "scope is open skews them), and the resets clobber outer measurements: "
        "torch.cuda.max_memory_allocated() no longer reports the program's peak. "
        "Call cachealloc.install() first for exact peaks.", RuntimeWarning, stacklevel=3)


class PeakResetScopes:
    """Scopes on PyTorch's native allocator, from memory_stats and peak resets.

    At each boundary (open or close of any scope) it reads memory_stats and
    then calls reset_peak_memory_stats, so the peak read at the next boundary
    covers exactly the time in between, which belongs to the innermost scope;
    peaks and totals then fold outward as in cachealloc's ScopeTracker. This
    is NOT exact, and it has side effects:

    - resetting peaks clobbers every outer measurement made with
      torch.cuda.max_memory_allocated(): after a scope, it reports the peak
      since the last boundary, not the program's;
    - anything else that resets peaks while a scope is open (user code, a
      second profiler, a library) makes the scope's peak too low;
    - allocations from other threads between the read and the reset are
      missing from the peak; accumulated resets break the byte counts.

    `cuda` is torch.cuda (replaceable for tests).
    """

    exact = False

    def __init__(self, device: int, cuda: Any = None):
        if cuda is None:
            import torch

            cuda = torch.cuda
        self.device = device
        self._cuda = cuda
        self._stack: List[_OpenScope] = []
        self._mark: Optional[Dict[str, int]] = None  # stats at the start of the current period
        self._next_token = 1

    def current_bytes(self) -> Dict[str, int]:
        """As ExactScopes.current_bytes, from torch.cuda.memory_stats."""
        stats = self._cuda.memory_stats(self.device)
        return {name: stats[f"{name}_bytes.all.current"] for name in CURRENT_FIELDS}

    def _end_period(self) -> Dict[str, int]:
        """Charges the time since the last boundary to the innermost scope
        and starts a new period; returns the stats read at the boundary."""
        stats = self._cuda.memory_stats(self.device)
        if self._stack:
            c = self._stack[-1].counters
            c["self_peak_allocated"] = max(c["self_peak_allocated"], stats["allocated_bytes.all.peak"])
            c["self_peak_reserved"] = max(c["self_peak_reserved"], stats["reserved_bytes.all.peak"])
            for field, key in _ACCUMULATED.items():
                c[field] += stats[key] - self._mark[key]
        self._cuda.reset_peak_memory_stats(self.device)
        self._mark = stats
        return stats

    def open(self) -> int:
        stats = self._end_period()
        token = self._next_token
        self._next_token += 1
        self._stack.append(_OpenScope(token, len(self._stack), stats))
        return token

    def close(self, token: int) -> Dict[str, int]:
        open_tokens = [s.token for s in self._stack]
        if not open_tokens or open_tokens[-1] != token:
            if token in open_tokens:
                raise RuntimeError(
                    f"cannot close scope {token}: it is not the innermost open scope "
                    f"({len(open_tokens) - 1 - open_tokens.index(token)} scope(s) opened inside "
                    f"it are still open, innermost {open_tokens[-1]}; close them first)")
            raise RuntimeError(f"cannot close scope {token}: it is not open")
        stats = self._end_period()
        top = self._stack.pop()
        c, kids = top.counters, top.children
        c["allocated_at_close"] = stats["allocated_bytes.all.current"]
        c["reserved_at_close"] = stats["reserved_bytes.all.current"]
        c["peak_allocated"] = max(c["self_peak_allocated"], kids["peak_allocated"])
        c["peak_reserved"] = max(c["self_peak_reserved"], kids["peak_reserved"])
        for total, self_field in (("bytes_allocated", "self_bytes_allocated"),
                                  ("bytes_freed", "self_bytes_freed"),
                                  ("allocations", "self_allocations"), ("frees", "self_frees")):
            c[total] = c[self_field] + kids[total]
        c["peak_above_open"] = c["peak_allocated"] - c["allocated_at_open"]
        c["self_peak_above_open"] = c["self_peak_allocated"] - c["allocated_at_open"]
        if self._stack:
            parent = self._stack[-1]
            pk = parent.children
            pk["peak_allocated"] = max(pk["peak_allocated"], c["peak_allocated"])
            pk["peak_reserved"] = max(pk["peak_reserved"], c["peak_reserved"])
            for total in ("bytes_allocated", "bytes_freed", "allocations", "frees"):
                pk[total] += c[total]
            pc = parent.counters  # innermost again from here
            pc["self_peak_allocated"] = max(pc["self_peak_allocated"], c["allocated_at_close"])
            pc["self_peak_reserved"] = max(pc["self_peak_reserved"], c["reserved_at_close"])
        return dict(c)


def _cachealloc_initialized() -> bool:
    try:
        return bool(_native.lib().cachealloc_is_initialized())
    except OSError:  # FileNotFoundError included: no library to load
        return False


def make_scope_source(device: Any):
    """The source for `device` (None, int, "cuda", "cuda:N", torch.device):
    ExactScopes when cachealloc's allocator is initialized (install() or
    init()), else PeakResetScopes on PyTorch's allocator (with a warning,
    once per process). Raises ValueError/TypeError for a bad device and
    RuntimeError when neither allocator is available."""
    if isinstance(device, bool) or not (device is None or isinstance(device, (int, str))
                                        or (hasattr(device, "type") and hasattr(device, "index"))):
        raise TypeError("device must be None, an int, 'cuda', 'cuda:N' or a torch.device, "
                        f"not {type(device).__name__}")
    if _cachealloc_initialized():
        return ExactScopes(device_index(device))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        raise RuntimeError(
            "nothing to profile: cachealloc is not initialized (call cachealloc.install(), or "
            "cachealloc.init(backend='simulated') without a GPU) and PyTorch has no CUDA device")
    warn_not_exact_once()
    return PeakResetScopes(_torch_device_index(device, torch))


def _torch_device_index(device: Any, torch: Any) -> int:
    if device is None or device == "cuda":
        return torch.cuda.current_device()
    if isinstance(device, int):
        index = device
    elif isinstance(device, str):
        if not device.startswith("cuda:") or not device[5:].isdigit():
            raise ValueError(f"expected a CUDA device like 'cuda:0', got {device!r}")
        index = int(device[5:])
    else:
        if device.type != "cuda":
            raise ValueError(f"expected a CUDA device, got {device}")
        return torch.cuda.current_device() if device.index is None else device.index
    if not 0 <= index < torch.cuda.device_count():
        raise ValueError(f"device {index} out of range ({torch.cuda.device_count()} devices)")
    return index

