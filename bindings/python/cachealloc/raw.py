"""Low-level access for tests and tools that drive the allocator directly:
_malloc and _free, through the same C entry points PyTorch calls."""
from __future__ import annotations

import ctypes
from typing import Any

from . import oom_recorder
from ._native import CacheallocError, OutOfMemoryError, check, lib
from .devices import device_index


# ctypes converts a Python int to a C integer by dropping the high bits
# (2**64 + 1000 becomes 1000, device 2**32 becomes 0), so every integer
# argument is checked against its C type's range here first.
_SSIZE_MAX = 2 ** (8 * ctypes.sizeof(ctypes.c_ssize_t) - 1) - 1
_POINTER_END = 2 ** (8 * ctypes.sizeof(ctypes.c_void_p))


def _checked_int(name: str, value: Any, end: int) -> int:
    """value, an int in [0, end). TypeError for a non-int (bool included),
    ValueError below 0, OverflowError from end; each names the argument."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if value >= end:
        raise OverflowError(f"{name} {value} does not fit in {end.bit_length() - 1} bits "
                            f"(at most {end - 1})")
    return value


def _malloc(size: int, device: Any = 0, stream: int = 0) -> int:
    """Allocates at least `size` bytes on `device` for `stream` (a
    cudaStream_t as an int, 0 for the default stream) through the allocator
    PyTorch uses; returns the address (0 for size 0). Raises TypeError,
    ValueError or OverflowError for an argument out of its C range (size up
    to 2**63 - 1, a device index this process has, stream a 64-bit
    pointer), OutOfMemoryError, or CacheallocError."""
    size = _checked_int("size", size, _SSIZE_MAX + 1)
    stream = _checked_int("stream", stream, _POINTER_END)
    index = device_index(device)
    out = ctypes.c_void_p()
    status = lib().cachealloc_try_malloc(size, index, stream, ctypes.byref(out))
    if status == 1:
        message = lib().cachealloc_last_error().decode()
        raise OutOfMemoryError(message + oom_recorder.note_for_raw_oom())
    check(status)
    return out.value or 0


def _free(ptr: int, device: Any = 0) -> None:
    """Takes back an address from _malloc; 0 is ignored. Raises
    CacheallocError for an address cachealloc did not hand out or already
    took back (nothing changes then), TypeError/ValueError/OverflowError
    for arguments out of range.

    The C entry point (cachealloc_free, PyTorch's) returns nothing and never
    clears cachealloc_last_error() on success, so it cannot tell its caller
    that a free failed; the address is therefore looked up first
    (cachealloc_block_size). Two threads freeing the same address at once
    can both pass that check: the second free is then only reported on
    stderr by the library."""
    ptr = _checked_int("ptr", ptr, _POINTER_END)
    index = device_index(device)
    if ptr == 0:
        return
    l = lib()
    if l.cachealloc_block_size(ptr, ctypes.byref(ctypes.c_size_t())) != 0:
        raise CacheallocError(f"cachealloc._free: {ptr:#x} was not allocated by cachealloc or "
                              "was already freed; nothing was freed")
    l.cachealloc_free(ptr, 0, index, None)
