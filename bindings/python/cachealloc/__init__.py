"""cachealloc: a caching CUDA memory allocator for PyTorch, with PyTorch's
native allocation behaviour and its memory API given back.

    import cachealloc
    cachealloc.install()            # before any CUDA memory is allocated
    ...                             # your PyTorch code, unchanged
    print(cachealloc.memory_summary())
    cachealloc.dump_snapshot("snap.pickle")   # open in pytorch.org/memory_viz

All sizes are in bytes. Devices may be given as None (current device), an
int, "cuda:N" or a torch.device.
"""
from __future__ import annotations

import collections
import ctypes
import io
import pickle
import re
import sys
from typing import Any, Optional

from . import _native
from ._native import CacheallocError, OutOfMemoryError, check, lib
from .summary import format_summary

__all__ = [
    "CacheallocError", "OutOfMemoryError", "install", "init", "mode", "is_installed", "backend",
    "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "empty_cache", "set_per_process_memory_fraction", "memory_summary",
    "record_memory_history", "snapshot", "dump_snapshot", "library_path", "lab", "profiler",
    "MemPool", "use_mem_pool",
]

library_path = _native.library_path
_mode = "not installed"
_pluggable = None  # keeps PyTorch's allocator object alive


def init(conf: Optional[str] = None, backend: Optional[str] = None) -> None:
    """Initializes the native allocator without touching PyTorch.

    conf: PYTORCH_CUDA_ALLOC_CONF syntax (None: the environment variable).
    backend: None/"cuda" (cudaMalloc), "async" (cudaMallocAsync),
    "simulated[:BYTES[:DEVICES]]" (no GPU; for tests and the replay lab).
    Raises CacheallocError for a bad config or backend, or when blocks are
    still allocated; TypeError when either is not a str (or None),
    ValueError when one holds a NUL character. Nothing changes then.
    """
    check(lib().cachealloc_init(_c_string("conf", conf), _c_string("backend", backend) or None))


def _c_string(name: str, value: Optional[str]) -> Optional[bytes]:
    """value encoded for a C string argument (None stays None). The C side
    reads up to the first NUL, so a NUL inside would silently cut the text
    short: refused instead."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name} must not contain NUL characters, got {value!r}")
    return value.encode()


def install(conf: Optional[str] = None, backend: Optional[str] = None,
            torch_glue: bool = True) -> None:
    """Makes cachealloc PyTorch's CUDA allocator.

    With the PyTorch glue (libcachealloc_torch.so, built when PyTorch was
    found) PyTorch's own memory API keeps working: torch.cuda.memory_stats,
    memory_summary, _record_memory_history, _snapshot, cudnn.benchmark...
    ("torch-extension" mode). Without it, or with torch_glue=False, the two
    C entry points are registered through torch.cuda.memory's
    CUDAPluggableAllocator ("plain" mode): use cachealloc's functions for
    stats and snapshots then.

    Must run before CUDA memory is allocated in this process. Raises
    RuntimeError if PyTorch already initialized CUDA (its native allocator
    then owns memory and cannot be swapped), CacheallocError for a bad
    config. Once installed, calling it again changes nothing: without a
    conf or backend, or with the ones in force, it returns; with others it
    raises RuntimeError naming both.
    """
    global _mode, _pluggable
    if _mode != "not installed":
        _check_installed_settings(conf, backend)
        return
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError(
            "cachealloc.install() must run before CUDA is initialized: PyTorch's native "
            f"allocator already holds {torch.cuda.memory_reserved()} bytes in this process. "
            "Call it at the top of your program, before creating CUDA tensors.")
    glue = _native.torch_glue_path() if torch_glue else None
    g = _load_torch_glue(glue, torch.__version__) if glue else None
    init(conf, backend)
    if g:
        g.cachealloc_torch_install.restype = ctypes.c_int
        g.cachealloc_torch_last_error.restype = ctypes.c_char_p
        if g.cachealloc_torch_install() != 0:
            raise RuntimeError("cachealloc: installing the PyTorch glue failed: " +
                               g.cachealloc_torch_last_error().decode())
        _pluggable = g
        _mode = "torch-extension"
        return
    path = library_path()
    _pluggable = torch.cuda.memory.CUDAPluggableAllocator(path, "cachealloc_malloc", "cachealloc_free")
    torch.cuda.memory.change_current_allocator(_pluggable)
    _mode = "plain"


def _check_installed_settings(conf: Optional[str], backend_: Optional[str]) -> None:
    """Raises RuntimeError when install() is asked again for a conf or
    backend other than the ones in force (it cannot change them)."""
    text = ctypes.c_char_p()
    check(lib().cachealloc_config_info(None, None, None, ctypes.byref(text)))
    active_conf, active_backend = (text.value or b"").decode(), backend()
    if (conf is not None and conf != active_conf) or (backend_ and backend_ != active_backend):
        raise RuntimeError(
            f"cachealloc is already installed ({_mode} mode, conf {active_conf!r}, backend "
            f"{active_backend!r}); install(conf={conf!r}, backend={backend_!r}) cannot change "
            "them. Install once, with the settings wanted, before CUDA memory is allocated")


def _release(version: str) -> tuple:
    """(major, minor, patch) of a torch version, from each part's leading
    digits: "2.11.0+cu130" -> (2, 11, 0), "2.6.0rc1" -> (2, 6, 0), "2.11" ->
    (2, 11, 0). Nightlies of one release share it, though their layouts may
    differ: the check below cannot tell them apart."""
    parts = (version.split("+")[0].split(".") + ["0", "0", "0"])[:3]
    return tuple(int(re.match(r"\d*", p).group() or 0) for p in parts)


def _load_torch_glue(path: str, running: str):
    """Loads libcachealloc_torch.so after checking that it was compiled
    against the running torch release: it overrides virtual functions of
    PyTorch's allocator classes, whose layout may change between releases,
    so a mismatch could crash instead of failing. Raises RuntimeError naming
    both versions (or the loader's error)."""
    # libcachealloc.so first (and its shared libstdc++ with it), then the
    # glue with its symbols kept local: nothing in the glue may take part in
    # resolving symbols of libraries loaded later. (Loading runs the glue's
    # static constructors before the check; they only build empty objects.)
    lib()
    try:
        g = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        raise RuntimeError(f"cachealloc: cannot load the PyTorch glue {path}: {e}. Rebuild it "
                           "against the installed torch, or pass torch_glue=False") from e
    try:
        built = g.cachealloc_torch_built_for
    except AttributeError:
        raise RuntimeError(f"cachealloc: the PyTorch glue {path} predates cachealloc's torch version "
                           "check (it does not say which torch it was built against); rebuild it, "
                           "or pass torch_glue=False") from None
    built.restype = ctypes.c_char_p
    built_for = (built() or b"").decode()
    if _release(built_for) != _release(running):
        raise RuntimeError(
            f"cachealloc: the PyTorch glue {path} was built against torch {built_for}, but torch "
            f"{running} is running. Rebuild it against the installed torch (cmake -S . -B build "
            "finds it), or pass torch_glue=False to install the plain C entry points")
    return g


def mode() -> str:
    """"torch-extension" (PyTorch's memory API works unchanged), "plain"
    (C entry points through CUDAPluggableAllocator: PyTorch's memory API
    raises, cachealloc's functions work), or "not installed"."""
    return _mode


def is_installed() -> bool:
    return _mode != "not installed"


def backend() -> str:
    """The device backend in use ("cuda", "async", "simulated:..."), "" before init."""
    return lib().cachealloc_backend_name().decode()


def _device_index(device: Any) -> int:
    if device is None:
        if "torch" in sys.modules and is_installed():
            return sys.modules["torch"].cuda.current_device()
        return 0
    if isinstance(device, int):
        index = device
    elif isinstance(device, str):
        if device == "cuda":
            return _device_index(None)
        if not device.startswith("cuda:") or not device[5:].isdigit():
            raise ValueError(f"expected a CUDA device like 'cuda:0', got {device!r}")
        index = int(device[5:])
    elif hasattr(device, "type") and hasattr(device, "index"):  # torch.device
        if device.type != "cuda":
            raise ValueError(f"expected a CUDA device, got {device}")
        return _device_index(None) if device.index is None else _device_index(device.index)
    else:
        raise TypeError(f"device must be None, int, str or torch.device, not {type(device).__name__}")
    count = lib().cachealloc_device_count()
    if count < 0:  # not a count: initializing failed (no CUDA, bad config...)
        raise CacheallocError(lib().cachealloc_last_error().decode())
    if index < 0 or index >= count:
        raise ValueError(f"device {index} out of range ({count} devices)")
    return index


def memory_stats(device: Any = None) -> "collections.OrderedDict[str, int]":
    """All 122 statistics of torch.cuda.memory_stats, same keys and meaning."""
    l = lib()
    n = l.cachealloc_stat_count()
    values = (ctypes.c_int64 * n)()
    check(l.cachealloc_memory_stats(_device_index(device), values, n))
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
    check(lib().cachealloc_reset_peak_stats(_device_index(device)))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    check(lib().cachealloc_reset_accumulated_stats(_device_index(device)))


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
    check(lib().cachealloc_set_memory_fraction(float(fraction), _device_index(device)))


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A readable table of the statistics, like torch.cuda.memory_summary."""
    index = _device_index(device)
    return format_summary(memory_stats(index), index, abbreviated)


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
    "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"); each call replaces the set, as in
    native. An unknown name raises (native ignores it).
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
    if _mode == "torch-extension":
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


class _PlainUnpickler(pickle.Unpickler):
    """Loads plain data only: any reference to a class or function fails."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only plain data is allowed")


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
    if _mode == "torch-extension":
        import torch

        return torch.cuda.memory._snapshot()
    return _PlainUnpickler(io.BytesIO(snapshot_bytes())).load()


def dump_snapshot(path: str) -> None:
    """Writes snapshot() as a pickle PyTorch's memory_viz opens."""
    if _mode == "torch-extension":
        import torch

        torch.cuda.memory._dump_snapshot(path)
        return
    data = snapshot_bytes()
    with open(path, "wb") as f:
        f.write(data)


# Low-level access for tests and tools that drive the allocator directly.

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
    index = _device_index(device)
    out = ctypes.c_void_p()
    status = lib().cachealloc_try_malloc(size, index, stream, ctypes.byref(out))
    if status == 1:
        raise OutOfMemoryError(lib().cachealloc_last_error().decode())
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
    index = _device_index(device)
    if ptr == 0:
        return
    l = lib()
    if l.cachealloc_block_size(ptr, ctypes.byref(ctypes.c_size_t())) != 0:
        raise CacheallocError(f"cachealloc._free: {ptr:#x} was not allocated by cachealloc or "
                              "was already freed; nothing was freed")
    l.cachealloc_free(ptr, 0, index, None)


from . import lab, profiler  # noqa: E402  (they use the functions above)
from .mempool import MemPool, use_mem_pool  # noqa: E402
