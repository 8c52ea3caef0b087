"""Setting cachealloc up: init() (the library alone), install() (as
PyTorch's CUDA allocator), and which mode, backend and policy are in force
(the mode itself is kept by _core, the package's leaf, which install()
sets)."""
from __future__ import annotations

import ctypes
import os
from typing import Optional

from . import oom_recorder, sharing
from . import snapshot_dir as snapshot_dir_module
from . import torch_glue as torch_glue_module
from ._core import is_installed, mode, set_mode
from ._native import check, lib, library_path
from .torch_settings import install_settings_hook

__all__ = ["init", "install", "mode", "is_installed", "backend", "policy", "policies"]

_pluggable = None  # keeps PyTorch's allocator object (or the loaded glue) alive


def init(conf: Optional[str] = None, backend: Optional[str] = None,
         policy: Optional[str] = None) -> None:
    """Initializes the native allocator without touching PyTorch.

    conf: PYTORCH_CUDA_ALLOC_CONF syntax (None: the environment variable).
    backend: None/"cuda" (cudaMalloc), "async" (cudaMallocAsync),
    "simulated[:BYTES[:DEVICES]]" (no GPU; for tests and the replay lab).
    policy: the placement policy by name, "native" (PyTorch 2.11's
    decisions), "stitch", "rescue" or "unmap_on_free" (docs/policies.md); None: the
    CACHEALLOC_POLICY environment variable, else native. Not a conf key.
    Raises CacheallocError for a bad config, backend or policy (an unknown
    policy is refused naming the known ones), or when blocks are still
    allocated; TypeError when one is not a str (or None), ValueError when
    one holds a NUL character. Nothing changes then.
    """
    check(lib().cachealloc_init_policy(_c_string("conf", conf), _c_string("backend", backend) or None,
                                       _c_string("policy", policy) or None))


def policies() -> list:
    """The known placement policy names, "native" first."""
    return lib().cachealloc_policy_names().decode().split(",")


def policy() -> str:
    """The placement policy in use ("native", "stitch", ...), "" before init."""
    return lib().cachealloc_policy_name().decode()


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
            torch_glue: bool = True, snapshot_dir=None,
            oom_snapshot: Optional[str] = None, policy: Optional[str] = None) -> None:
    """Makes cachealloc PyTorch's CUDA allocator.

    With the PyTorch glue (libcachealloc_torch.so, compiled against the
    running torch: with the package, or once into a cache, torch_glue.py)
    PyTorch's own memory API keeps working: torch.cuda.memory_stats,
    memory_summary, _record_memory_history, _snapshot, cudnn.benchmark...
    ("torch-extension" mode). With torch_glue=False the two C entry points
    are registered through torch.cuda.memory's CUDAPluggableAllocator
    ("plain" mode): use cachealloc's functions for stats and snapshots then;
    CUDA tensors cannot be sent to other processes (torch.multiprocessing)
    then, and sending one raises sharing.CudaIpcUnavailableError where it
    is sent (so it does on the "async" backend, where native cannot share
    either).

    A torch built without CUDA has no CUDA allocator to replace: there only
    backend="simulated[...]" is accepted, in plain mode with nothing
    registered in torch (allocations go through cachealloc's own API,
    cachealloc._malloc); any other backend is refused up front, saying so.

    Must run before CUDA memory is allocated in this process. Raises
    RuntimeError if PyTorch already initialized CUDA (its native allocator
    then owns memory and cannot be swapped), or when no glue can be had
    (glue_build.GlueBuildError: no compiler...), CacheallocError for a bad
    config; nothing is set up then. Once installed, calling it again
    changes nothing: without a conf or backend, or with the ones in force,
    it returns; with others it raises RuntimeError naming both.

    snapshot_dir: a run directory; history is then recorded and this rank's
    snapshot written into it at exit and on demand (snapshot_dir.py, with
    the per-rank names of rank_files.py). Its errors (ValueError, OSError)
    come after the allocator is installed.
    oom_snapshot (default: $CACHEALLOC_OOM_SNAPSHOT): a directory; turns
    the OOM flight recorder on (oom_recorder.py): at each out-of-memory
    error a snapshot is written there and native's message is followed by
    why the allocator failed and which settings would have avoided it.
    ValueError/PermissionError when it cannot be created or written, before
    anything else is set up.
    policy: the placement policy (see init(); default $CACHEALLOC_POLICY,
    else native). An unknown name raises CacheallocError naming the known
    ones, before anything is set up.
    """
    global _pluggable
    if oom_snapshot is None:
        oom_snapshot = os.environ.get(oom_recorder.ENV) or None
    if oom_snapshot is not None:
        oom_recorder.FlightRecorder(oom_snapshot)  # checks (and creates) the directory first
    if is_installed():
        _check_installed_settings(conf, backend, policy)
        _configure_snapshot_dir(snapshot_dir)
        if oom_snapshot is not None:
            oom_recorder.start(oom_snapshot, torch_observer=mode() == "torch-extension")
        return
    import torch

    # The settings language (keys accepted and refused) follows the torch
    # in use; allocator decisions stay torch 2.11's.
    check(lib().cachealloc_set_torch_version(torch.__version__.encode()))
    # Every check and every step that can fail comes before init(), so a
    # refusal leaves the process as it was (never half set up).
    if not hasattr(torch._C, "_cuda_customAllocator"):
        if not (backend or "").startswith("simulated"):
            raise RuntimeError(
                f"cachealloc.install(): this torch ({torch.__version__}) was built without CUDA, so "
                "it has no CUDA allocator for cachealloc to replace. Install a CUDA build of torch, "
                "or pass backend='simulated' to use cachealloc through its own API only")
        init(conf, backend, policy)
        set_mode("plain")
        _configure_snapshot_dir(snapshot_dir)
        if oom_snapshot is not None:
            oom_recorder.start(oom_snapshot, torch_observer=False)
        return
    _check_policy_name(policy)
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "cachealloc.install() must run before CUDA is initialized: PyTorch's native "
            f"allocator already holds {torch.cuda.memory_reserved()} bytes in this process. "
            "Call it at the top of your program, before creating CUDA tensors.")
    if torch_glue:
        registered = torch_glue_module.find_and_load(torch)
        registered.cachealloc_torch_install.restype = ctypes.c_int
        registered.cachealloc_torch_last_error.restype = ctypes.c_char_p
    else:
        registered = torch.cuda.memory.CUDAPluggableAllocator(
            library_path(), "cachealloc_malloc", "cachealloc_free")
    init(conf, backend, policy)
    # Registering cannot fail once the checks above passed; if it still
    # does, the library stays initialized as after init() alone, and the
    # mode says PyTorch does not use it.
    if torch_glue:
        if registered.cachealloc_torch_install() != 0:
            raise RuntimeError("cachealloc: installing the PyTorch glue failed: " +
                               registered.cachealloc_torch_last_error().decode())
    else:
        torch.cuda.memory.change_current_allocator(registered)
    _pluggable = registered
    set_mode("torch-extension" if torch_glue else "plain")
    # Where CUDA tensors cannot be sent to other processes (plain mode: no
    # IPC handle to give; the async backend, as native), say so in the
    # sender, not in a queue's feeder thread (sharing.py).
    if not torch_glue:
        sharing.refuse_cuda_ipc(sharing.PLAIN_MODE_MESSAGE, refuse_pickling=True)
    elif _backend_name() == "async":  # `backend` is install()'s argument here
        sharing.refuse_cuda_ipc(sharing.ASYNC_BACKEND_MESSAGE, refuse_pickling=False)
    # torch.cuda.memory._set_allocator_settings reaches cachealloc from now on.
    install_settings_hook()
    _configure_snapshot_dir(snapshot_dir)
    if oom_snapshot is not None:
        oom_recorder.start(oom_snapshot, torch_observer=torch_glue)


def _configure_snapshot_dir(run_dir) -> None:
    if run_dir is not None:
        snapshot_dir_module.configure(run_dir)


def _check_policy_name(name: Optional[str]) -> None:
    """Raises CacheallocError for a policy name init() would refuse, before
    anything is set up: the library's own check (None: its default,
    $CACHEALLOC_POLICY else native, read there alone), whose message lists
    the known names. TypeError/ValueError as init() for a non-str or NUL."""
    check(lib().cachealloc_check_policy(_c_string("policy", name) or None))


def _check_installed_settings(conf: Optional[str], backend_: Optional[str],
                              policy_: Optional[str] = None) -> None:
    """Raises RuntimeError when install() is asked again for a conf,
    backend or policy other than the ones in force (it cannot change them)."""
    text = ctypes.c_char_p()
    check(lib().cachealloc_config_info(None, None, None, ctypes.byref(text)))
    active_conf, active_backend = (text.value or b"").decode(), backend()
    active_policy = policy()
    if ((conf is not None and conf != active_conf) or (backend_ and backend_ != active_backend)
            or (policy_ and policy_ != active_policy)):
        raise RuntimeError(
            f"cachealloc is already installed ({mode()} mode, conf {active_conf!r}, backend "
            f"{active_backend!r}, policy {active_policy!r}); install(conf={conf!r}, "
            f"backend={backend_!r}, policy={policy_!r}) cannot change them. Install once, with "
            "the settings wanted, before CUDA memory is allocated")


def backend() -> str:
    """The device backend in use ("cuda", "async", "simulated:..."), "" before init."""
    return _backend_name()


def _backend_name() -> str:
    return lib().cachealloc_backend_name().decode()
