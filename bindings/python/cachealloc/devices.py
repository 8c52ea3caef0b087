"""Device arguments as cachealloc's functions take them: None (the current
device), an int, "cuda", "cuda:N" or a torch.device."""
from __future__ import annotations

import sys
from typing import Any

from ._core import is_installed
from ._native import CacheallocError, lib


def device_index(device: Any) -> int:
    if device is None:
        if "torch" in sys.modules and is_installed():
            return sys.modules["torch"].cuda.current_device()
        return 0
    if isinstance(device, int):
        index = device
    elif isinstance(device, str):
        if device == "cuda":
            return device_index(None)
        if not device.startswith("cuda:") or not device[5:].isdigit():
            raise ValueError(f"expected a CUDA device like 'cuda:0', got {device!r}")
        index = int(device[5:])
    elif hasattr(device, "type") and hasattr(device, "index"):  # torch.device
        if device.type != "cuda":
            raise ValueError(f"expected a CUDA device, got {device}")
        return device_index(None) if device.index is None else device_index(device.index)
    else:
        raise TypeError(f"device must be None, int, str or torch.device, not {type(device).__name__}")
    count = lib().cachealloc_device_count()
    if count < 0:  # not a count: initializing failed (no CUDA, bad config...)
        raise CacheallocError(lib().cachealloc_last_error().decode())
    if index < 0 or index >= count:
        raise ValueError(f"device {index} out of range ({count} devices)")
    return index
