"""Allocation history and snapshots: torch.cuda.memory's
_record_memory_history, _snapshot and _dump_snapshot. In torch-extension
mode PyTorch's own recorder and snapshot serve them; otherwise the
library's."""
from __future__ import annotations

import ctypes
import sys
from typing import Optional

from . import plain_pickle
from ._core import mode
from ._native import check, lib


_CONTEXT_LEVELS = {None: 0, "state": 1, "alloc": 2, "all": 3}


def _trace_actions() -> tuple:
    """Native's trace action names, which skip_actions may name (the
    library's list, so that it is written down once)."""
    return tuple(lib().cachealloc_history_action_names().decode().split(","))


def record_memory_history(enabled: Optional[str] = "all", context: Optional[str] = "all",
                          stacks: str = "all", max_entries: int = sys.maxsize,
                          skip_actions: Optional[list] = None) -> None:
    """PyTorch's torch.cuda.memory._record_memory_history, same meaning.

    enabled: None (off, clears history), "state" (frames on live blocks; as
    in native, the history ring then holds only the latest event), "all"
    (history of every event, at most max_entries, oldest dropped).
    context: None, "state", "alloc" or "all": where frames are kept.
    stacks: "python" or "all" (both capture Python frames; C++ frames are
    not captured by cachealloc). max_entries: an int >= 1 (not a bool).
    skip_actions: action names left out of the history from now on
    ("alloc", "free_requested", "free_completed", "segment_alloc",
    "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"); each
    call replaces the set, as in native. An unknown name raises (native
    ignores it).
    """
    if enabled not in (None, "state", "all"):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    if context not in _CONTEXT_LEVELS:
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
        raise ValueError(f"max_entries must be a positive int, got {max_entries!r}")
    if isinstance(skip_actions, (str, bytes)):
        raise ValueError(f"skip_actions must be a list of action names, got {skip_actions!r}")
    skip = list(skip_actions or [])
    known = _trace_actions()
    for a in skip:
        if a not in known:
            raise ValueError(f"skip_actions: unknown action {a!r} (expected one of "
                             f"{', '.join(known)})")
    if mode() == "torch-extension":
        # PyTorch's recorder gathers the frames (Python and, with
        # stacks="all", C++), exactly as for its native allocator.
        import torch

        extra = {"skip_actions": skip} if skip else {}  # not every torch release takes it
        torch.cuda.memory._record_memory_history(enabled, context, stacks, max_entries, **extra)
        return
    level = 0 if enabled is None else _CONTEXT_LEVELS[context]
    # As native (torch/csrc/cuda/memory_snapshot.cpp): "state" records
    # history too, in a ring of one entry; only "all" keeps max_entries.
    entries = min(max_entries, 2**62) if enabled == "all" else 1
    check(lib().cachealloc_record_history(0 if enabled is None else 1, level, 1, entries))
    # After the ring is set, so a failure there leaves the old set; the
    # names are checked above, so this cannot fail.
    check(lib().cachealloc_set_history_skip_actions(",".join(skip).encode()))


def snapshot_bytes() -> bytes:
    """The snapshot as a protocol-4 pickle (what dump_snapshot writes)."""
    l = lib()
    buf = ctypes.POINTER(ctypes.c_char)()
    n = ctypes.c_size_t()
    check(l.cachealloc_snapshot_pickle(ctypes.byref(buf), ctypes.byref(n)))
    try:
        return ctypes.string_at(buf, n.value)
    finally:
        l.cachealloc_release_buffer(buf)


def snapshot() -> dict:
    """The dict torch.cuda.memory._snapshot() returns: segments,
    device_traces, allocator_settings, external_annotations."""
    if mode() == "torch-extension":
        import torch

        return torch.cuda.memory._snapshot()
    return plain_pickle.loads(snapshot_bytes())


def dump_snapshot(path: str) -> None:
    """Writes snapshot() as a pickle PyTorch's memory_viz opens."""
    if mode() == "torch-extension":
        import torch

        torch.cuda.memory._dump_snapshot(path)
        return
    data = snapshot_bytes()
    with open(path, "wb") as f:
        f.write(data)
