"""What torch's native CUDA batch norm asks the caching allocator for in
training, where its inputs are channels-last, beyond the meta function's
outputs.

Which kernel runs (ATen/native/Normalization.cpp, torch 2.11): cuDNN's batch
norm unless the input or the weight is bfloat16, or the input is half with a
weight that is not float, or weight or bias is missing (and a few size
limits). The fake device has no cuDNN, so its recording always goes through
native_batch_norm; cuDNN's own requests are not modelled here, and this
model applies only where the GPU runs torch's kernels too (bf16 weights,
bf16 autocast: batch norm is on no autocast list, so a bf16 convolution's
output meets a float weight).

Native's channels-last path (Normalization.cuh; the input channels-last
contiguous, or contiguous with stride 1 at dim 1): the statistics are
reduced over reduction = numel / C values per channel (stride = C) by a
grid of flexible_launch_configs(reduction, stride, coop=true):

    block_x = min(lastPow2(stride), 32)
    block_y = min(lastPow2(ceil(reduction / 16)), 512 / block_x)
    if block_x * block_y != 512: block_x = min(lastPow2(stride), 512 / block_y)
    grid_x  = ceil(stride / block_x)
    grid_y  = min(ceil(reduction / (block_y * 16)), 128), 1 when below 8

and with grid_y > 1 the blocks meet in global memory: a staging buffer of
accscalar_t (float; double for double) and grid_x int semaphores, freed
when the kernel returns (semaphores first: C++ destroys locals in reverse).

- forward (batch_norm_stats_channels_last): after output, save_mean and
  save_invstd, a staging buffer of 4 * C * grid_y values;
- backward (batch_norm_backward_reduce_channels_last, then backward_elemt):
  sum_dy and sum_dy_xmu (C accscalar_t each), grad_weight, grad_bias, the
  staging buffer of 2 * C * grid_y values and the semaphores, grad_input,
  then sum_dy_xmu and sum_dy freed. The meta function allocates grad_input
  first and no temporaries.

Not modelled (a review's list, session 32): the backward in eval mode
(native's backward runs even after a cuDNN forward, and reduces when the
affine weights take gradients); a channels_last_3d input, whose backward
reduce takes the channels-last kernel; frozen affine weights, whose
grad_weight and grad_bias the GPU still allocates; a forward with a weight
but no bias (native on the GPU; the backward here assumes the weight's
dtype decides); inputs past 32-bit indexing (torch's general path, no
staging). Only grid_y >= 8 has been seen on the GPU.

Recorded on an H100 (torch 2.11, torchvision RegNet-Y-1.6GF channels_last
with bf16 weights, batch 64, session 32: benchmarks/results/session32/
gpu_s32/history/): every staging size byte-exact, e.g. C = 336 at 14 x 14
(reduction 12,544: grid_y 49) 263,424 bytes forward, C = 336 at 28 x 28
(grid_y 128) 344,064 bytes backward. Sizes are bytes.
"""
from __future__ import annotations

import torch

from .cuda_reduce import _div_up, _last_pow2, staged

aten = torch.ops.aten

ELEMENTS_PER_THREAD = 16
OPTIMAL_TILE_W = 32
MAX_BLOCK_SIZE = 512
MAX_H_BLOCK = 128


def grid(reduction: int, stride: int) -> tuple:
    """(grid_x, grid_y) of flexible_launch_configs(reduction, stride, coop=True)."""
    block_x = min(_last_pow2(stride), OPTIMAL_TILE_W)
    block_y = min(_last_pow2(_div_up(reduction, ELEMENTS_PER_THREAD)), MAX_BLOCK_SIZE // block_x)
    if block_x * block_y != MAX_BLOCK_SIZE:
        block_x = min(_last_pow2(stride), MAX_BLOCK_SIZE // block_y)
    grid_x = _div_up(stride, block_x)
    grid_y = min(_div_up(reduction, block_y * ELEMENTS_PER_THREAD), MAX_H_BLOCK)
    return grid_x, (1 if grid_y < 8 else grid_y)


def _native_kernels(x, weight, bias) -> bool:
    """Whether the GPU runs torch's batch norm rather than cuDNN's (the
    dtype and presence conditions of _select_batch_norm_backend; the size
    limits are far above any batch)."""
    if weight is None or bias is None or x.dim() < 3 or not torch.backends.cudnn.enabled:
        return True
    if torch.bfloat16 in (x.dtype, weight.dtype):
        return True
    return x.dtype == torch.float16 and weight.dtype != torch.float32


def _channels_last(x) -> bool:
    if x.dim() < 2 or not x.numel():
        return False
    if x.is_contiguous():
        return x.stride(1) == 1
    return x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)


def _applies(x, weight, bias) -> bool:
    return (isinstance(x, torch.Tensor) and x.device.type == "cuda"
            and _native_kernels(x, weight, bias) and _channels_last(x))


def _acc_bytes(x) -> int:
    return 8 if x.dtype == torch.float64 else 4


def _stage(rec, x, values_per_channel: int) -> None:
    """The staging buffer and semaphores of a channels-last reduction of x,
    both freed at once, semaphores first; nothing when grid_y is 1."""
    stride = x.shape[1]
    gx, gy = grid(x.numel() // stride, stride)
    if gy > 1:
        staged(rec, values_per_channel * stride * gy * _acc_bytes(x), 4 * gx)


def _track_all(rec, out) -> None:
    """The op's outputs in order, as the meta function allocates them."""
    for t in out:
        if isinstance(t, torch.Tensor):
            rec.track(t)


def _forward(rec, args, kwargs, out):
    """native_batch_norm(input, weight, bias, running_mean, running_var,
    training, momentum, eps) -> (output, save_mean, save_invstd)."""
    x, weight, bias = args[0], args[1], args[2]
    training = args[5] if len(args) > 5 else kwargs.get("training")
    _track_all(rec, out)
    if training and _applies(x, weight, bias):
        _stage(rec, x, 4)


def _backward(rec, args, kwargs, out):
    """native_batch_norm_backward(grad_out, input, weight, running_mean,
    running_var, save_mean, save_invstd, train, eps, output_mask) ->
    (grad_input, grad_weight, grad_bias)."""
    grad_out, x, weight = args[0], args[1], args[2]
    train = args[7] if len(args) > 7 else kwargs.get("train")
    grad_input, grad_weight, grad_bias = out
    # The bias is not an argument here: its presence is the forward's; the
    # output mask asks for grad_bias whenever the bias takes a gradient.
    if not (train and isinstance(grad_out, torch.Tensor) and _applies(x, weight, weight)
            and _channels_last(grad_out)):
        _track_all(rec, out)
        return
    acc = _acc_bytes(x) * x.shape[1]
    sums = [rec.alloc(acc, rec.stream), rec.alloc(acc, rec.stream)]   # sum_dy, sum_dy_xmu
    for t in (grad_weight, grad_bias):
        if isinstance(t, torch.Tensor):
            rec.track(t)
    _stage(rec, x, 2)
    if isinstance(grad_input, torch.Tensor):
        rec.track(grad_input)
    for block in reversed(sums):    # sum_dy_xmu first: locals destroyed in reverse
        rec.free(block, rec.stream)


MODELS = {
    aten.native_batch_norm.default: _forward,
    aten.native_batch_norm_backward.default: _backward,
}
