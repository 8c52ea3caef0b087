"""The memory format of a convolution's outputs, as torch's CUDA build with
cuDNN gives it.

Why: FakeTensorMode picks a convolution's output format by asking
torch._C._select_conv_backend which backend the call would take. The fake
device's tensors are not CUDA tensors to that C++ code (and a CPU build has
no cuDNN), so it picks a non-cuDNN backend, whose output is contiguous
NCHW. On the GPU, cuDNN writes channels_last whenever the input or the
weight suggests it (cudnn_conv_suggest_memory_format, ConvUtils.h), and
depthwise convolutions in that format go to cuDNN too (use_cudnn_depthwise).
The allocation's size is the same, but every later op sees other strides:
a permute of a channels_last output is contiguous on the GPU and not on
the fake device, so layer norms made contiguous copies the GPU never made
(torchvision's ConvNeXt in channels_last: +3.4 % reserved), and
convolution backward copied gradients it did not.

Rule (torch 2.11, cuDNN >= 8.0.5): 4-d weight and the input or weight
channels_last -> channels_last; 5-d weight likewise -> channels_last_3d;
float64, or cuDNN switched off (torch.backends.cudnn.enabled False): as
FakeTensorMode gave. grad_input and grad_weight of a backward take the
same format (FakeTensorMode's own convention); grad_bias is left as is.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import cudnn_key
from .cudnn_key import suggests

aten = torch.ops.aten
_FORWARD = (aten.convolution.default, aten._convolution.default)
_BACKWARD = (aten.convolution_backward.default,)


def cudnn_format(inp, weight) -> Optional[torch.memory_format]:
    """cuDNN's output format for (input, weight), or None when cuDNN would
    not pick a channels-last format (the fake output stands). Whether the
    call goes to cuDNN at all is restride's question (cudnn_key.uses_cudnn)."""
    if not isinstance(weight, torch.Tensor):
        return None
    if torch.float64 in (getattr(inp, "dtype", None), weight.dtype):
        return None
    if weight.dim() == 4:
        fmt = torch.channels_last
    elif weight.dim() == 5:
        fmt = torch.channels_last_3d
    else:
        return None
    return fmt if suggests(inp, fmt) or suggests(weight, fmt) else None


def _to(t, fmt):
    if not isinstance(t, torch.Tensor) or t.is_contiguous(memory_format=fmt):
        return t
    # Inside the recording mode's dispatch this runs on the fake device
    # below it: a new fake tensor, not an allocation of the step (only
    # the returned tensor is tracked, as the op's output).
    return t.contiguous(memory_format=fmt)


def restride(func, args, kwargs, out):
    """out, with its tensors in cuDNN's format where that differs."""
    if not cudnn_key.uses_cudnn(func, args, kwargs):
        return out          # torch's native kernels: the fake output stands
    if func in _FORWARD:
        inp, weight = args[0], args[1] if len(args) > 1 else kwargs.get("weight")
        fmt = cudnn_format(inp, weight)
        return out if fmt is None else _to(out, fmt)
    if func in _BACKWARD and isinstance(out, (tuple, list)) and len(out) == 3:
        inp = args[1] if len(args) > 1 else kwargs.get("input")
        weight = args[2] if len(args) > 2 else kwargs.get("weight")
        fmt = cudnn_format(inp, weight)
        if fmt is None:
            return out
        return (_to(out[0], fmt), _to(out[1], fmt), out[2])
    return out
