"""What a copy between the host and the GPU asks the caching allocator for.

A copy between CPU and CUDA is one cudaMemcpy only when both sides are the
same dtype and TensorIterator sees them as one contiguous run (the same
strides on every dimension longer than 1, dense). Otherwise torch's
copy_kernel_cuda (aten/src/ATen/native/cuda/Copy.cu, copy_requires_
temporaries) copies through contiguous temporaries, and those on the GPU
side are requests the fake run's meta functions never make:

- host to device (`model.to("cuda", memory_format=torch.channels_last)`,
  `cuda_tensor.copy_(cpu_tensor)` into a strided destination): the
  destination's contiguous twin, `empty_like(dst, contiguous)`, when the
  destination is not contiguous (a channels-last weight with a kernel
  larger than 1x1: 589,824 B per 3x3 fp16 weight of 256 x 128 channels);
  the memcpy fills it, a device copy fills the destination, and it is
  freed. Non-blocking copies of another dtype take the twin in the
  source's dtype even into a contiguous destination (the dtype is then
  converted on the GPU).
- device to host (`.cpu()` of a strided tensor): the source's contiguous
  copy, `src.expand_as(dst).contiguous()`, when the source is not
  contiguous; non-blocking copies of another dtype convert on the GPU
  first (`src.to(dst.dtype)`, then that copy).

Seen on the H100 (holdout 32's CSPResNet-50 channels_last fp16, memory
history of the classic b64 truth row, benchmarks/results/session34/
gpu_s33/history/): one request of each 3x3+ weight's size at
`Module.to`'s `convert`, freed at once, which the fake run lacked.

Each temporary is allocated after the op's output and freed before the op
returns, on the current stream. Units: bytes.
"""
from __future__ import annotations

import torch

from .cudnn_key import dense, suggests

aten = torch.ops.aten


def _is_cuda(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cuda"


def _is_cpu(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu"


def one_run(dst, src) -> bool:
    """Whether TensorIterator coalesces dst and src into one contiguous run
    (iter.is_contiguous()): same shape, equal strides on every dimension
    longer than 1, and dst dense (no gaps, no overlap)."""
    if tuple(dst.shape) != tuple(src.shape):
        return False
    if any(a != b for n, a, b in zip(dst.shape, dst.stride(), src.stride()) if n > 1):
        return False
    return dense(dst)


def gpu_temporaries(dst, src, non_blocking: bool) -> list:
    """Bytes of each GPU temporary of copying src into dst (in request
    order); [] for a copy that is one memcpy or stays on one device."""
    to_gpu = _is_cuda(dst) and _is_cpu(src)
    to_host = _is_cpu(dst) and _is_cuda(src)
    if not (to_gpu or to_host):
        return []
    same_dtype = dst.dtype == src.dtype
    if same_dtype and one_run(dst, src):
        return []
    n = dst.numel()
    if to_gpu:
        if non_blocking and not same_dtype:
            return [n * src.element_size()]
        return [] if dst.is_contiguous() else [n * dst.element_size()]
    # src.expand_as(dst).contiguous() copies unless src already is dst's
    # contiguous run (a broadcast source never is).
    if non_blocking and not same_dtype:
        # Converted on the GPU first, src.to(dst.dtype): a dense source keeps
        # its strides, another takes its suggested format (contiguous, or
        # channels_last), then that is made contiguous.
        if dense(src):
            contiguous = src.is_contiguous()
        else:
            cl = torch.channels_last if src.dim() == 4 else torch.channels_last_3d
            contiguous = not suggests(src, cl)
        copies = not (src.numel() == n and contiguous)
        return [src.numel() * dst.element_size()] + ([n * dst.element_size()] if copies else [])
    copies = not (src.numel() == n and src.is_contiguous())
    return [n * src.element_size()] if copies else []


def _temporaries(rec, sizes) -> None:
    """Each size allocated in turn, then freed in the same order (the
    converted source of a non-blocking copy dies at the end of the
    expression that made its contiguous copy, before the copy)."""
    ids = [rec.alloc(size, rec.stream) for size in sizes if size]
    for aid in ids:
        rec.free(aid, rec.stream)


def _to_copy(rec, args, kwargs, out):
    rec.track(out)
    _temporaries(rec, gpu_temporaries(out, args[0], bool(kwargs.get("non_blocking", False))))


def _copy_(rec, args, kwargs, out):
    dst, src = args[0], args[1]
    non_blocking = bool(args[2]) if len(args) > 2 else bool(kwargs.get("non_blocking", False))
    if isinstance(src, torch.Tensor) and src.dim() <= dst.dim():
        _temporaries(rec, gpu_temporaries(dst, src, non_blocking))
    rec.track(out)


MODELS = {
    aten._to_copy.default: _to_copy,
    aten.copy_.default: _copy_,
}
