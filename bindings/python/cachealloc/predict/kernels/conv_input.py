"""The input copy of a cuDNN convolution whose input is not laid out as
cuDNN runs it.

torch's _convolution (aten/src/ATen/native/Convolution.cpp, torch 2.11)
hands cuDNN `input.contiguous(backend_memory_format)`, the format
cudnn_conv_suggest_memory_format gives (conv_format.cudnn_format:
channels_last when the input or the weight suggests it, else contiguous);
convolution_backward does the same when the weight's gradient is wanted
(output_mask[1]). An input that is not contiguous in that format is copied:
a channel slice of a channels_last tensor (CSPNet's cross-stage split,
`x[:, :c]`, suggests channels_last and is not contiguous in it), a
transposed or narrowed NCHW tensor. The fake run's meta function reads the
strides and copies nothing.

Order, as the H100 showed it (holdout 32's CSPResNet-50 channels_last fp16,
benchmarks/results/session34/gpu_s33/history/): the copy before the op's
own requests (its output, or the backward's grad_output copy and
gradients), freed when the op returns. The copy is the caller's request,
not cuDNN's: the cuDNN table's workspace positions count the op's own
requests (the probe's inputs are contiguous), so it is not counted among
them (Recording.alloc_outside_op). Units: bytes.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import conv_format, cudnn_key


def backend_format(inp, weight) -> torch.memory_format:
    return conv_format.cudnn_format(inp, weight) or torch.contiguous_format


def input_copy(rec, inp, weight) -> Optional[int]:
    """The allocation id of the input's copy, or None when cuDNN takes the
    input as it is."""
    if not isinstance(inp, torch.Tensor) or inp.device.type != "cuda" or not inp.numel():
        return None
    if inp.is_contiguous(memory_format=backend_format(inp, weight)):
        return None
    return rec.alloc_outside_op(inp.numel() * inp.element_size())


def _forward(func):
    def model(rec, args, kwargs, out):
        """The convolution on cuDNN: the input's copy, the output, the copy
        freed. Off cuDNN (torch.backends.cudnn.enabled False) the output
        alone."""
        copy = None
        if cudnn_key.uses_cudnn(func, args, kwargs):
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
            copy = input_copy(rec, args[0], weight)
        rec.track(out)
        if copy is not None:
            rec.free(copy, rec.stream)
    return model


MODELS = {func: _forward(func) for func in conv_format._FORWARD}
