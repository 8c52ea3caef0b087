"""The package's leaf: the mode this process runs cachealloc in and the
errors the package raises. It imports nothing of the package, so any
module may import it; everything else imports down toward it and
_native (tests/python/test_import_graph.py keeps it so).

The mode is set by lifecycle.install() alone (set_mode); the rest of the
package reads it through mode() (history and snapshots take PyTorch's way
in "torch-extension" mode, cachealloc's own otherwise).
"""
from __future__ import annotations

from typing import Optional

MODES = ("not installed", "plain", "torch-extension")

_mode = "not installed"


class CacheallocError(RuntimeError):
    """An error reported by the native library; the message says what."""


class OutOfMemoryError(CacheallocError, MemoryError):
    """The device (or the memory limit) could not satisfy a request made
    through cachealloc's own API. (Inside PyTorch, OOMs surface as
    torch.OutOfMemoryError.)"""


class LabError(RuntimeError):
    """The lab could not run: no tool, or the tool refused the input.

    returncode: the tool's exit status (None when it could not start);
    stderr: what it printed.
    """

    def __init__(self, message: str, returncode: Optional[int] = None, stderr: str = ""):
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


def mode() -> str:
    """"torch-extension" (PyTorch's memory API works unchanged), "plain"
    (C entry points through CUDAPluggableAllocator: PyTorch's memory API
    raises, cachealloc's functions work; on a torch without CUDA nothing is
    registered), or "not installed" (init() alone leaves it so)."""
    return _mode


def is_installed() -> bool:
    return _mode != "not installed"


def set_mode(value: str) -> None:
    """For lifecycle.install() only. Raises ValueError for a mode not in MODES."""
    global _mode
    if value not in MODES:
        raise ValueError(f"unknown mode {value!r}: expected one of {', '.join(MODES)}")
    _mode = value
