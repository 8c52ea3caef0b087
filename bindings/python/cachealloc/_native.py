"""Loads libcachealloc.so with ctypes and declares the C API's signatures.

The library is looked for, in order: $CACHEALLOC_LIBRARY, next to this
package (pip installs it there), then, when this package runs from a source
checkout rather than an installation, that checkout's build directory.
"""
from __future__ import annotations

import ctypes
import os
import pathlib
from typing import Optional

from ._core import CacheallocError, OutOfMemoryError  # noqa: F401  (raised here, named there)

_HERE = pathlib.Path(__file__).resolve().parent
_REPO = _HERE.parents[2]


def package_dir() -> pathlib.Path:
    """The folder of this package (where pip puts the library and the tool)."""
    return _HERE


def source_tree() -> Optional[pathlib.Path]:
    """The source checkout this package runs from (bindings/python/cachealloc
    of a repository), or None when it is installed."""
    if (_REPO / "CMakeLists.txt").is_file() and (_REPO / "bindings" / "python" / "cachealloc") == _HERE:
        return _REPO
    return None


def dev_build_dir() -> Optional[pathlib.Path]:
    """The source checkout's build directory ($CACHEALLOC_BUILD, else
    build/, as scripts/build.sh makes it); None when installed."""
    repo = source_tree()
    if repo is None:
        return None
    return pathlib.Path(os.environ.get("CACHEALLOC_BUILD") or repo / "build")


def library_path() -> str:
    """Path of the libcachealloc.so this package uses. Raises FileNotFoundError."""
    env = os.environ.get("CACHEALLOC_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(f"CACHEALLOC_LIBRARY={env} does not exist")
        return env
    candidates = [_HERE / "libcachealloc.so"]
    build = dev_build_dir()
    if build is not None:
        candidates.append(build / "bindings" / "libcachealloc.so")
    for c in candidates:
        if c.is_file():
            return str(c)
    raise FileNotFoundError(
        "libcachealloc.so not found: pip install the package, build the repository "
        "(bash scripts/build.sh), or set CACHEALLOC_LIBRARY")


_lib = None


def lib() -> ctypes.CDLL:
    """The loaded library (loaded once, with its C signatures declared)."""
    global _lib
    if _lib is None:
        _lib = _declare(ctypes.CDLL(library_path(), mode=ctypes.RTLD_GLOBAL))
    return _lib


class ScopeResultStruct(ctypes.Structure):
    """cachealloc_scope_result (cachealloc.h): what a closed profiler scope
    saw, in bytes (counts for allocations/frees, depth)."""
    _fields_ = [(name, ctypes.c_int64) for name in (
        "depth", "allocated_at_open", "allocated_at_close", "peak_allocated", "peak_above_open",
        "self_peak_allocated", "self_peak_above_open", "bytes_allocated", "bytes_freed",
        "self_bytes_allocated", "self_bytes_freed", "allocations", "frees", "self_allocations",
        "self_frees", "reserved_at_open", "reserved_at_close", "peak_reserved",
        "self_peak_reserved")]


class OomInfoStruct(ctypes.Structure):
    """cachealloc_oom_info (cachealloc.h): the calling thread's last OOM,
    in bytes."""
    _fields_ = [("device", ctypes.c_int), ("limit_set", ctypes.c_int)] + [
        (name, ctypes.c_size_t) for name in ("requested", "rounded", "allocation", "device_total",
                                             "device_free", "allowed", "allocated", "reserved")]


class CurrentBytesStruct(ctypes.Structure):
    """cachealloc_current_bytes (cachealloc.h): a device's current bytes."""
    _fields_ = [(name, ctypes.c_int64) for name in ("allocated", "reserved", "active",
                                                    "inactive_split")]


class BlockReportStruct(ctypes.Structure):
    """cachealloc_block_report (cachealloc.h): what the allocation or free
    that made a change reports for a profiler, in bytes (device -1: none)."""
    _fields_ = [("size", ctypes.c_size_t), ("device", ctypes.c_int),
                ("allocated", ctypes.c_int64), ("reserved", ctypes.c_int64)]


# cachealloc_capture_fn: (user, flags) -> context object or NULL.
CAPTURE_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
RELEASE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _declare(l: ctypes.CDLL) -> ctypes.CDLL:
    c_int, c_size, c_char_p, c_void_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p
    u64 = ctypes.c_uint64
    sigs = {
        "cachealloc_malloc": (c_void_p, [ctypes.c_ssize_t, c_int, c_void_p]),
        "cachealloc_try_malloc": (c_int, [ctypes.c_ssize_t, c_int, c_void_p, ctypes.POINTER(c_void_p)]),
        "cachealloc_free": (None, [c_void_p, ctypes.c_ssize_t, c_int, c_void_p]),
        "cachealloc_try_malloc_report": (c_int, [ctypes.c_ssize_t, c_int, c_void_p, ctypes.POINTER(c_void_p),
                                                 ctypes.POINTER(BlockReportStruct)]),
        "cachealloc_free_report": (c_int, [c_void_p, c_int, ctypes.POINTER(BlockReportStruct)]),
        "cachealloc_init": (c_int, [c_char_p, c_char_p]),
        "cachealloc_init_policy": (c_int, [c_char_p, c_char_p, c_char_p]),
        "cachealloc_check_policy": (c_int, [c_char_p]),
        "cachealloc_policy_name": (c_char_p, []),
        "cachealloc_policy_names": (c_char_p, []),
        "cachealloc_set_torch_version": (c_int, [c_char_p]),
        "cachealloc_is_initialized": (c_int, []),
        "cachealloc_backend_name": (c_char_p, []),
        "cachealloc_cuda_support": (c_int, [ctypes.POINTER(c_char_p)]),
        "cachealloc_config_info": (c_int, [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_double),
                                           ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(c_char_p)]),
        "cachealloc_set_allocator_settings": (c_int, [c_char_p]),
        "cachealloc_check_allocator_settings": (c_int, [c_char_p]),
        "cachealloc_last_error": (c_char_p, []),
        "cachealloc_device_count": (c_int, []),
        "cachealloc_stat_count": (c_int, []),
        "cachealloc_stat_name": (c_char_p, [c_int]),
        "cachealloc_memory_stats": (c_int, [c_int, ctypes.POINTER(ctypes.c_int64), c_int]),
        "cachealloc_reset_peak_stats": (c_int, [c_int]),
        "cachealloc_reset_accumulated_stats": (c_int, [c_int]),
        "cachealloc_empty_cache": (c_int, [c_int]),
        "cachealloc_set_memory_fraction": (c_int, [ctypes.c_double, c_int]),
        "cachealloc_cache_info": (c_int, [c_int, ctypes.POINTER(c_size)]),
        "cachealloc_record_stream": (c_int, [c_void_p, c_void_p]),
        "cachealloc_block_size": (c_int, [c_void_p, ctypes.POINTER(c_size)]),
        "cachealloc_base_allocation": (c_void_p, [c_void_p, ctypes.POINTER(c_size)]),
        "cachealloc_record_history": (c_int, [c_int, c_int, c_int, c_size]),
        "cachealloc_record_history_from": (c_int, [c_int, c_int, c_size, CAPTURE_FN, c_void_p,
                                                   RELEASE_FN]),
        "cachealloc_history_enabled": (c_int, []),
        "cachealloc_history_action_names": (c_char_p, []),
        "cachealloc_set_history_skip_actions": (c_int, [c_char_p]),
        "cachealloc_pool_create_or_incref": (c_int, [c_int, u64, u64]),
        "cachealloc_pool_create_with_allocator": (c_int, [c_int, u64, u64, c_void_p, c_void_p,
                                                          c_void_p, c_void_p]),
        "cachealloc_pool_begin_allocate": (c_int, [c_int, u64, u64, c_void_p, c_void_p, c_void_p]),
        "cachealloc_pool_end_allocate": (c_int, [c_int, u64, u64]),
        "cachealloc_pool_release": (c_int, [c_int, u64, u64]),
        "cachealloc_pool_use_count": (c_int, [c_int, u64, u64, ctypes.POINTER(c_int)]),
        "cachealloc_pool_set_use_on_oom": (c_int, [c_int, u64, u64, c_int]),
        "cachealloc_pool_set_no_split": (c_int, [c_int, u64, u64]),
        "cachealloc_empty_cache_pool": (c_int, [c_int, u64, u64]),
        "cachealloc_snapshot_pickle": (c_int, [ctypes.POINTER(ctypes.POINTER(ctypes.c_char)),
                                               ctypes.POINTER(c_size)]),
        "cachealloc_release_buffer": (None, [ctypes.POINTER(ctypes.c_char)]),
        "cachealloc_last_oom": (c_int, [c_void_p]),  # any struct laid out as cachealloc_oom_info
        "cachealloc_diagnose_snapshot": (c_int, [c_char_p, c_size, ctypes.c_int64, ctypes.c_int64,
                                                 c_char_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_char)),
                                                 ctypes.POINTER(c_size)]),
        "cachealloc_record_requests": (c_int, [c_size]),
        "cachealloc_requests_pickle": (c_int, [ctypes.POINTER(ctypes.POINTER(ctypes.c_char)),
                                               ctypes.POINTER(c_size)]),
        "cachealloc_set_oom_note": (None, [c_char_p]),
        "cachealloc_oom_note": (c_char_p, []),
        "cachealloc_current_bytes_of": (c_int, [c_int, ctypes.POINTER(CurrentBytesStruct)]),
        "cachealloc_scope_open": (c_int, [c_int, ctypes.POINTER(ctypes.c_uint64)]),
        "cachealloc_scope_close": (c_int, [c_int, ctypes.c_uint64, ctypes.POINTER(ScopeResultStruct)]),
        "cachealloc_scope_depth": (c_int, [c_int, ctypes.POINTER(ctypes.c_int64)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(l, name)
        fn.restype, fn.argtypes = res, args
    return l


def check(status: int) -> None:
    """Raises CacheallocError with the library's message if status != 0."""
    if status != 0:
        raise CacheallocError(lib().cachealloc_last_error().decode())
