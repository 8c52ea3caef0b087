"""What torch's CUDA kernels ask the caching allocator for, where the fake
run's meta implementation of the same op asks for something else.

The recorder (recorder.py) records each op's new output storages in output
order. That is what a CUDA kernel does for most ops, but not for these,
whose CUDA implementations (torch 2.11, read from aten/src/ATen/native/cuda/
Dropout.cu and native/transformers/cuda/attention.cu,
attention_backward.cu and mem_eff_attention/kernel_backward.h) allocate in
another order, keep some outputs on the host, or make temporaries:

- native_dropout (Dropout.cu, dropout_cuda): the bool mask
  (empty_like(self, bool)) is allocated before the output (empty_like).
- Philox seed and offset of the fused attention kernels (flash and
  memory-efficient, forward): host tensors outside CUDA graph capture, so no
  device request (their meta implementation puts them on the device).
- Memory-efficient attention backward (_efficient_attention_backward, the
  cutlass kernel on sm50+), in this order:
    1. grad_out.contiguous() (B, M, H, Kv) when grad_out is not contiguous;
    2. grad_q, grad_k, grad_v (the op's outputs);
    3. delta (B, H, M) fp32: for fp32 the kernel does not compute it, and
       torch builds it as (grad_out * out).sum(-1).transpose(-2, -1)
       .contiguous(): a (B, M, H, Kv) fp32 product, a (B, M, H) sum and
       the (B, H, M) delta; sum and product are freed at once. fp16/bf16
       kernels on sm80+ compute delta themselves into an empty (B, H, M)
       fp32 tensor;
    4. the kernel's workspace: B * H * align4(gk + gv + gq) fp32 elements
       (Params::workspace_size). fp32 output accumulates in place, so gk =
       gv = 0; the grad-Q staging area is ceil(M / BI) * ceil(K / 64) tiles
       of (BI * 64 + 4) floats (an accumulator tile plus lock, counter and
       two pad words), BI the kernel's query block (64 for K <= 64 and for
       the K > 128 kernel, 128 for 64 < K <= 128). Checked on an H200
       recording for fp32, K = 64 (524,800 bytes at B * H = 16, M = 128);
       fp16/bf16 workspaces are modelled the same way, unchecked;
    5. at the end, delta, workspace and the grad_out copy are freed.

- cuDNN attention (torch 2.11 on sm90 with cuDNN 9.19; measured op by op
  on an H100 in three models, benchmarks/results/op_probe_H100/): the
  forward allocates the Philox seed and offset on the device (8 bytes
  each, even without dropout; autograd keeps them for the backward), then
  the output, then the fp32 stats (B, H, M, 1) when a gradient will need
  them, then a 256-byte cuDNN workspace freed at once. The backward
  allocates grad_q, grad_k, grad_v, then one workspace freed at once:
  B * H * M * (K + 1) fp32 elements (a grad-Q accumulator and a row sum)
  plus 256 bytes, and under grouped-query attention an fp32 grad-K and
  grad-V accumulator of the key and value shapes (B, Hk, N, K and Kv).
  Seen: GPT-2 medium (16 heads, K 64, M 1024), BART-base cross attention
  (M 128, N 512) and a Llama-style GQA layer (16/8 heads, M 2048), all
  byte-exact. With 16/8 heads "grad-K and grad-V of Hk heads" equals "one
  more grad-Q-sized block"; other head ratios are the rule's reading, not
  a measurement.
- _safe_softmax (SoftMax.cpp, a composite the math attention kernel calls:
  softmax whose fully masked rows come out 0, not NaN): after the softmax
  output, the rows to zero are found on the device: a bool tensor of the
  input's size (input == -inf), its all() over the softmax dim with keepdim
  (a bool of the reduced shape), and a 0-dim tensor of the output's dtype;
  the output is filled in place and the three are freed, last first, before
  the op returns. Recorded on an H100 (torch 2.11) in T5-base's math
  attention, every call byte-exact (benchmarks/results/session27_H100/).
- Softmax backward (SoftMax.cu): after grad_input, a temporary
  grad * output of the same size, freed at once (eager attention: one
  attention-matrix-sized block per layer, seen on the H200 in GPT-2).
- Flash attention backward (flash_api.cpp, mha_bwd; fp16/bf16): after
  dq, dk, dv, an fp32 softmax_d (B, H, round128(M)) and an fp32 dq_accum
  (B, round128(M), H, head dim rounded up to 32) (plus dk, dv expanded to
  all query heads under grouped-query attention), freed when it returns.
  From the source only: no GPU recording of it checked yet; deterministic
  mode (a zeroed dq_accum per split) is not modelled.
- Layer norm (layer_norm_kernel.cu): the input is made contiguous
  (expect_contiguous) before the outputs are allocated, and the backward
  kernel takes dY.contiguous() after its outputs (dX, dgamma, dbeta), a
  copy when dY is not contiguous (a pre-norm block's gradient coming back
  through nn.MultiheadAttention's transposed in-projection), freed when the
  kernel returns. Seen on the H200 in ViT's pre-norm layers.
- Convolution backward on cuDNN: grad_output is made contiguous (in the
  input's suggested memory format) before grad_input and grad_weight, the
  copy is freed, and grad_bias (grad_output summed over all but the channel
  dimension, a reduction) comes last. cuDNN's own workspaces are not
  modelled (their sizes come from cuDNN's heuristics on the GPU).
- Reductions: the staging buffer and semaphores of gpu_reduce_kernel
  (cuda_reduce.py).
- Embedding backward with more than 3,072 indices: the index sort and
  segment sums' temporaries and CUB storage (cuda_embedding.py).

Each model takes the op's arguments and the fake outputs and tells the
recording what to allocate and free, in the kernel's order.
"""
from __future__ import annotations

import math

import torch

from . import conv_input, cuda_batch_norm, cuda_copy, cuda_embedding, cuda_reduce, cudnn_key

aten = torch.ops.aten

_F32 = 4  # bytes per fp32 element


def _nbytes(shape, itemsize: int) -> int:
    return math.prod(shape) * itemsize


def _tensors(out):
    return [t for t in out if isinstance(t, torch.Tensor)]


def _dropout(rec, args, kwargs, out):
    output, mask = out
    rec.track(mask)
    rec.track(output)


def _drop_host_rng(seed_at):
    """Track every output but the host-side Philox seed and offset."""
    def model(rec, args, kwargs, out):
        for i, t in enumerate(out):
            if i in seed_at:
                continue
            if isinstance(t, torch.Tensor):
                rec.track(t)
    return model


def _efficient_backward_workspace(B, H, M, K, dtype) -> int:
    """Params::workspace_size() of the cutlass memory-efficient backward
    kernel torch picks for head dim K (bytes)."""
    block_i = 128 if 64 < K <= 128 else 64
    tile_n = 64
    gq = math.ceil(M / block_i) * math.ceil(K / tile_n) * (block_i * tile_n + 4)
    stride_bh = (gq + 3) // 4 * 4
    return B * H * stride_bh * _F32


def efficient_backward_temporaries(rec, grad_out, query, value, outputs):
    """Steps 1-5 of the module docstring. grad_out, query, value are in the
    (B, H, M, K) layout of scaled_dot_product_attention; outputs are the
    gradient tensors to record (grad_q, grad_k, grad_v, maybe grad_bias)."""
    B, H, M, K = query.shape
    Kv = value.shape[-1]
    stream = rec.stream
    copy = None
    if not grad_out.transpose(1, 2).is_contiguous():
        copy = rec.alloc(_nbytes(grad_out.shape, grad_out.element_size()), stream)
    for t in outputs:
        rec.track(t)
    if query.dtype == torch.float32:
        product = rec.alloc(_nbytes((B, M, H, Kv), _F32), stream)
        total = rec.alloc(_nbytes((B, M, H), _F32), stream)
        delta = rec.alloc(_nbytes((B, H, M), _F32), stream)
        rec.free(total, stream)
        rec.free(product, stream)
    else:
        delta = rec.alloc(_nbytes((B, H, M), _F32), stream)
    ws = _efficient_backward_workspace(B, H, M, K, query.dtype)
    workspace = rec.alloc(ws, stream) if ws else None
    rec.free(delta, stream)
    if workspace is not None:
        rec.free(workspace, stream)
    if copy is not None:
        rec.free(copy, stream)


def _contiguous_copy(rec, t):
    """expect_contiguous()/contiguous() of a non-contiguous tensor: a copy
    of its size (freed by the caller); None when no copy is made."""
    if not isinstance(t, torch.Tensor) or t.is_contiguous():
        return None
    return rec.alloc(t.numel() * t.element_size(), rec.stream)


def _layer_norm(rec, args, kwargs, out):
    x_copy = _contiguous_copy(rec, args[0])
    for t in _tensors(out):
        rec.track(t)
    if x_copy is not None:
        rec.free(x_copy, rec.stream)


def _layer_norm_backward(rec, args, kwargs, out):
    grad_out, x = args[0], args[1]
    x_copy = _contiguous_copy(rec, x)
    for t in _tensors(out):
        rec.track(t)
    if isinstance(grad_out, torch.Tensor) and grad_out.numel() and x.numel():
        dy_copy = _contiguous_copy(rec, grad_out)
        if dy_copy is not None:
            rec.free(dy_copy, rec.stream)
    if x_copy is not None:
        rec.free(x_copy, rec.stream)


def _suggest_channels_last(t) -> bool:
    """Tensor::suggest_memory_format() is ChannelsLast(3d) for such strides."""
    if t.dim() == 4:
        return not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last_3d)
    return False


def _convolution_backward(rec, args, kwargs, out):
    """cuDNN's convolution backward (Convolution.cpp, ConvShared.cpp): the input
    made contiguous in cuDNN's format when the weight's gradient is wanted
    (conv_input.py), grad_output
    made contiguous in the input's suggested memory format, grad_input, grad_weight,
    the copy freed, then grad_bias = grad_output.sum(0, 2, ...) (a reduction)."""
    grad_out, inp = args[0], args[1]
    grad_input, grad_weight, grad_bias = out
    mask = args[10] if len(args) > 10 else kwargs.get("output_mask", (True, True, True))
    input_copy = None
    fmt = torch.contiguous_format
    if mask[1] and cudnn_key.uses_cudnn(aten.convolution_backward.default, args, kwargs):
        # input.contiguous(backend format) for the weight's gradient (conv_input.py);
        # grad_output then goes to that copy's format, the backend's
        input_copy = conv_input.input_copy(rec, inp, args[2])
        fmt = conv_input.backend_format(inp, args[2])
    elif _suggest_channels_last(inp):
        fmt = torch.channels_last if inp.dim() == 4 else torch.channels_last_3d
    copy = None
    if isinstance(grad_out, torch.Tensor) and not grad_out.is_contiguous(memory_format=fmt):
        copy = rec.alloc(grad_out.numel() * grad_out.element_size(), rec.stream)
    for t in (grad_input, grad_weight):
        if isinstance(t, torch.Tensor):
            rec.track(t)
    if copy is not None:
        rec.free(copy, rec.stream)
    if input_copy is not None:
        rec.free(input_copy, rec.stream)
    if isinstance(grad_bias, torch.Tensor):
        rec.track(grad_bias)
        cuda_reduce.stage(rec, grad_out, [0] + list(range(2, grad_out.dim())),
                          cuda_reduce._acc_bytes(grad_out.dtype))


def _softmax_backward(rec, args, kwargs, out):
    """SoftMax.cu's softmax_backward_cuda_out: after grad_input (the structured
    op's output), tmp = grad * output, freed when the kernel returns."""
    grad, output = args[0], args[1]
    rec.track(out)
    size = grad.numel() * max(grad.element_size(), output.element_size())
    if size:
        rec.free(rec.alloc(size, rec.stream), rec.stream)


def _safe_softmax(rec, args, kwargs, out):
    """The rows-all-masked fix-up after the softmax (module docstring). Not
    modelled: the copy softmax makes first when `dtype` converts the input
    (other than half to float), rare in attention."""
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    rec.track(out)
    if not x.numel() or out.device.type != "cuda":
        return
    mask = rec.alloc(x.numel(), rec.stream)                          # bool, one byte each
    rows = rec.alloc(x.numel() // x.shape[dim] if x.dim() else 1, rec.stream)  # all(dim, keepdim)
    # all() is a reduction (of bools): split across thread blocks, it stages.
    cuda_reduce.stage(rec, x, [dim] if x.dim() else [], 1)
    zero = rec.alloc(out.element_size(), rec.stream)                 # scalar_tensor(0, out.dtype)
    for block in (zero, rows, mask):
        rec.free(block, rec.stream)


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _sdpa_flash_backward(rec, args, kwargs, out):
    """FlashAttention-2's mha_bwd (flash_api.cpp), dense, not deterministic:
    dq, dk, dv; softmax_d (B, H, round128(M)) fp32; dq_accum (B, round128(M),
    H, head dim rounded to 32, 256 above 192) fp32; for grouped-query
    attention dk and dv expanded to all H query heads (then summed into
    dk, dv). The scratch is freed when mha_bwd returns, softmax_d when its
    caller drops it."""
    query, key = args[1], args[2]
    B, H, M, K = query.shape
    Hk, N = key.shape[1], key.shape[2]
    stream = rec.stream
    for t in _tensors(out):
        rec.track(t)
    softmax_d = rec.alloc(B * H * _round_up(M, 128) * _F32, stream)
    k_rounded = _round_up(K, 32) if K <= 192 else 256
    dq_accum = rec.alloc(B * _round_up(M, 128) * H * k_rounded * _F32, stream)
    expanded = []
    if Hk != H:
        for t in (key, args[3]):
            expanded.append(rec.alloc(B * N * H * t.shape[-1] * t.element_size(), stream))
    for aid in reversed(expanded):
        rec.free(aid, stream)
    rec.free(dq_accum, stream)
    rec.free(softmax_d, stream)


CUDNN_ATTENTION_FORWARD_WORKSPACE = 256   # bytes, measured (module docstring)
CUDNN_ATTENTION_WORKSPACE_PAD = 256       # bytes past the backward's scratch, measured


def _sdpa_cudnn_forward(rec, args, kwargs, out):
    """_scaled_dot_product_cudnn_attention on the GPU (module docstring):
    seed, offset, output, stats (when compute_log_sumexp), workspace."""
    compute_lse = args[4] if len(args) > 4 else kwargs.get("compute_log_sumexp", True)
    seed, offset = out[6], out[7]
    for t in (seed, offset):
        if isinstance(t, torch.Tensor):
            rec.track_as_device(t, 8)
    rec.track(out[0])
    if compute_lse:
        rec.track(out[1])
    rec.free(rec.alloc(CUDNN_ATTENTION_FORWARD_WORKSPACE, rec.stream), rec.stream)


def cudnn_attention_backward_workspace(query, key, value) -> int:
    """Bytes of the cuDNN attention backward's one scratch block (module
    docstring), for (B, H, M, K) query, (B, Hk, N, K) key, (B, Hk, N, Kv)
    value."""
    B, H, M, K = query.shape
    Hk, N, Kv = key.shape[1], key.shape[2], value.shape[3]
    size = B * H * M * (K + 1) * _F32 + CUDNN_ATTENTION_WORKSPACE_PAD
    if Hk != H:
        size += B * Hk * N * (K + Kv) * _F32
    return size


def _sdpa_cudnn_backward(rec, args, kwargs, out):
    query, key, value = args[1], args[2], args[3]
    for t in _tensors(out):
        rec.track(t)
    rec.free(rec.alloc(cudnn_attention_backward_workspace(query, key, value), rec.stream),
             rec.stream)


def _sdpa_efficient_backward(rec, args, kwargs, out):
    grad_out, query, key, value = args[:4]
    efficient_backward_temporaries(rec, grad_out, query, value, _tensors(out))


# op -> model(recording, args, kwargs, fake outputs); the recorder calls the
# model instead of tracking the outputs itself.
MODELS = {
    aten.native_dropout.default: _dropout,
    aten._scaled_dot_product_efficient_attention.default: _drop_host_rng({2, 3}),
    aten._scaled_dot_product_flash_attention.default: _drop_host_rng({6, 7}),
    aten._scaled_dot_product_efficient_attention_backward.default: _sdpa_efficient_backward,
    aten._scaled_dot_product_flash_attention_backward.default: _sdpa_flash_backward,
    aten._scaled_dot_product_cudnn_attention.default: _sdpa_cudnn_forward,
    aten._scaled_dot_product_cudnn_attention_backward.default: _sdpa_cudnn_backward,
    aten._softmax_backward_data.default: _softmax_backward,
    aten._safe_softmax.default: _safe_softmax,
    aten.native_layer_norm.default: _layer_norm,
    aten.convolution_backward.default: _convolution_backward,
    aten.native_layer_norm_backward.default: _layer_norm_backward,
    **cuda_reduce.MODELS,
    **cuda_embedding.MODELS,
    **cuda_batch_norm.MODELS,
    **cuda_copy.MODELS,
    **conv_input.MODELS,
}


def describe() -> str:
    return ("CUDA kernels whose allocations differ from the fake run's meta functions: "
            "dropout (mask before output), fused attention (Philox seed/offset on the host), "
            "convolution forward and backward (the input's copy when it is not contiguous in cuDNN's format), "
            "convolution backward (grad_output copy, bias gradient last), layer norm (contiguous copies of a strided input or gradient), "
            "softmax backward (grad * output temporary), _safe_softmax (the all-masked-rows mask, its row reduction and a scalar), cuDNN attention (device Philox seed and offset, "
            "a 256-byte forward workspace, the backward's fp32 scratch), flash attention backward (fp32 softmax_d and dq_accum scratch), "
            "memory-efficient attention backward (grad_out copy, fp32 delta temporaries, "
            "the kernel's grad-Q workspace), reductions (the global-memory staging buffer and semaphores of "
            "sum/mean/amax/amin/norm when split across thread blocks, as setReduceConfig decides), "
            "embedding backward (sorted and original indices, CUB radix-sort, unique-by-key and scan storage, "
            "segment offsets and fp32 partial sums), "
            "native batch norm on channels-last inputs (the statistics' staging buffer and semaphores, "
            "the backward's fp32 sums, grad_input after grad_weight and grad_bias), "
            "copies between host and GPU that do not map one run onto the other (the contiguous "
            "GPU temporary of a strided destination or source, e.g. a channels-last weight moved "
            "to the GPU)")
