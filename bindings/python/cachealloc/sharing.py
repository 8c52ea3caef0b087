"""CUDA tensors sent to other processes where cachealloc cannot share them
(plain mode, the cudaMallocAsync backend, or a tensor in an expandable
segment): refused where the sender calls, with a message saying why.

Sharing a CUDA tensor (torch.multiprocessing queues, pipes, DataLoader
workers) asks the allocator for a CUDA IPC handle. cachealloc's PyTorch
glue supplies one; a plain CUDAPluggableAllocator cannot, and PyTorch's
own error then rises wherever the tensor is pickled. For a
multiprocessing.Queue that is the queue's feeder thread: the error is
printed there, put() returns as if it had worked, and the receiver waits
forever (native PyTorch on its cudaMallocAsync backend does the same).
So cachealloc
  - checks what Queue.put (and JoinableQueue.put) are given before they
    queue it: a CUDA tensor or storage there, or inside lists, tuples,
    sets and dicts (not other objects' attributes), raises
    CudaIpcUnavailableError in the caller;
  - in plain mode, also makes every pickling of a CUDA storage for another
    process raise it with cachealloc's message (SimpleQueue.put,
    Connection.send); on the async backend the glue's own error (native's
    words) rises there.
Native 2.11 refuses to share a tensor that lives in an expandable segment
(its getBaseAllocation, which PyTorch's storage sharing calls first, raises
before any handle is made); the glue raises native's words at the same
place, and Queue.put checks for such tensors in the caller too.
"""
from __future__ import annotations

from typing import Any, Callable

PLAIN_MODE_MESSAGE = (
    "cachealloc: sending a CUDA tensor to another process (CUDA IPC, as torch.multiprocessing "
    "does) needs cachealloc's PyTorch glue, and cachealloc is installed in plain mode (a bare "
    "CUDAPluggableAllocator, which PyTorch cannot ask for an IPC handle). Install with the glue "
    "(cachealloc.install() with libcachealloc_torch.so built against this torch, and "
    "torch_glue=True), or send a CPU copy (tensor.cpu())")


# Native's words on its cudaMallocAsync backend (the glue raises the same).
ASYNC_BACKEND_MESSAGE = ("cudaMallocAsync does not yet support shareIpcHandle. If you need it, "
                         "please file an issue describing your use case.")


# Native 2.11's words (CUDACachingAllocator's getBaseAllocation); the
# engine's base_allocation raises the same.
EXPANDABLE_SEGMENT_MESSAGE = (
    "Tensors allocated with expandable_segments:True cannot be shared between processes. "
    "Consider using expandable_segments:False in data loading workers via "
    "torch.cuda.memory._set_allocator_settings('expandable_segments:False')")


class CudaIpcUnavailableError(RuntimeError):
    """A CUDA tensor was about to be shared with another process, which
    this cachealloc installation cannot do (the message says why)."""


def find_cuda_data(obj: Any, is_cuda: Callable[[Any], bool]) -> Any:
    """The first object inside `obj` (itself, or an item of its lists,
    tuples, sets, frozensets and dicts, at any depth) for which is_cuda is
    true, or None. Each container is visited once (cycles end); the cost is
    linear in the number of items."""
    seen = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if is_cuda(item):
            return item
        if isinstance(item, (list, tuple, set, frozenset, dict)):
            if id(item) in seen:
                continue
            seen.add(id(item))
            stack.extend(item.items() if isinstance(item, dict) else item)
    return None


def is_cuda_tensor_or_storage(obj: Any) -> bool:
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.is_cuda
    if isinstance(obj, (torch.UntypedStorage, torch.TypedStorage)):
        return obj.device.type == "cuda"
    return False


def address_in_expandable_segment(address: int) -> bool:
    """Whether `address` lies in a block cachealloc handed out from an
    expandable segment (a look-up in the library, which changes nothing;
    an address cachealloc does not know is not)."""
    import ctypes

    from ._native import lib

    if not address:
        return False
    size = ctypes.c_size_t(0)
    if lib().cachealloc_base_allocation(address, ctypes.byref(size)):
        return False
    return b"expandable_segments:True" in (lib().cachealloc_last_error() or b"")


def in_expandable_segment(obj: Any) -> bool:
    """A CUDA tensor or storage whose memory cachealloc placed in an
    expandable segment."""
    import torch

    if not is_cuda_tensor_or_storage(obj):
        return False
    storage = obj.untyped_storage() if isinstance(obj, torch.Tensor) else obj
    if isinstance(storage, torch.TypedStorage):
        storage = storage.untyped()
    return address_in_expandable_segment(storage.data_ptr())


def _refusing_put(put: Callable, is_cuda: Callable[[Any], bool], message: str) -> Callable:
    def put_checked(self, obj, *args, **kwargs):
        if find_cuda_data(obj, is_cuda) is not None:
            raise CudaIpcUnavailableError(message)
        return put(self, obj, *args, **kwargs)

    put_checked.__wrapped__ = put
    put_checked.__doc__ = put.__doc__
    return put_checked


def refuse_cuda_ipc(message: str, refuse_pickling: bool,
                    is_cuda: Callable[[Any], bool] = is_cuda_tensor_or_storage) -> None:
    """Installs the refusals described above with `message` (once; later
    calls change nothing); refuse_pickling: also every pickling of a CUDA
    storage (plain mode). `is_cuda` says which objects count as CUDA data
    (tests on machines without a GPU pass their own)."""
    import multiprocessing.queues as queues

    import torch

    for cls in (queues.Queue, queues.JoinableQueue):
        put = cls.__dict__["put"]
        if not hasattr(put, "__wrapped__"):
            cls.put = _refusing_put(put, is_cuda, message)
    share = torch.UntypedStorage.__dict__.get("_share_cuda_")
    if refuse_pickling and (share is None or not hasattr(share, "__wrapped__")):
        def share_cuda_refused(self, *args, **kwargs):
            raise CudaIpcUnavailableError(message)

        share_cuda_refused.__wrapped__ = torch.UntypedStorage._share_cuda_
        torch.UntypedStorage._share_cuda_ = share_cuda_refused
