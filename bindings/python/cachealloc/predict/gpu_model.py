"""What a GPU does through the caching allocator that a fake-device run
cannot see, per target GPU and torch version: each model here adds or
changes requests, and describe() says what was modelled and how.

- cuBLAS workspace: PyTorch gives each (cuBLAS handle, stream) one workspace
  from the caching allocator at that pair's first cuBLAS call, kept for the
  life of the process. Size (CublasHandlePool.cpp, torch 2.4+):
  CUBLAS_WORKSPACE_CONFIG ":SIZE:COUNT" pairs summed as SIZE KiB * COUNT;
  unset: 32 MiB (4096 KiB * 8) on compute capability 9.x and later (torch
  2.11 treats sm90+ so), else 4096 KiB * 2 + 16 KiB * 8 = 8.125 MiB. With the
  unified cuBLASLt workspace (the default: TORCH_CUBLASLT_UNIFIED_WORKSPACE
  unset) cuBLASLt uses the same buffer, so nothing more is allocated.
  Handles are per thread: the forward (and the optimizer) run on the
  caller's thread, backward on autograd's device thread, so a training step
  holds two workspaces on one stream.
- Attention: scaled_dot_product_attention picks flash, memory-efficient or
  math per GPU and input (sm80+ and fp16/bf16 and head dim <= 256 and no
  explicit mask: flash; else sm50+ with head dim % 8 == 0 (fp32 included):
  memory-efficient; else math). The fake run is steered to the same kernel,
  whose meta implementation allocates that kernel's tensors (flash: output
  and fp32 logsumexp; mem-efficient: output and padded logsumexp; math: the
  attention matrix).
- cuDNN convolution workspaces: not modelled; bounded by cuDNN's own
  limit (PyTorch asks benchmark-free heuristics for algorithms whose
  workspace fits in free memory), so a convolution step may need up to one
  more workspace-sized block than predicted.
- torch.compile: refused (its kernels and buffers are decided by Inductor
  at compile time).
- NCCL buffers (torch.distributed): not counted; NCCL allocates them
  outside the caching allocator.
- Memory outside the allocator (CUDA context, other processes): the GPU
  table's assumed context_bytes is subtracted from total memory.
"""
from __future__ import annotations

import os
import re
from typing import Tuple

KiB = 1024
MiB = 1 << 20


def cublas_workspace_bytes(capability: Tuple[int, int], env=None) -> int:
    env = os.environ if env is None else env
    conf = env.get("CUBLAS_WORKSPACE_CONFIG")
    default = 4096 * KiB * 8 if capability[0] >= 9 else 4096 * KiB * 2 + 16 * KiB * 8
    if conf is None:
        return default
    pairs = re.findall(r":([0-9]+):([0-9]+)", conf)
    if not pairs:
        return default
    return sum(int(size) * KiB * int(count) for size, count in pairs)


# scaled_dot_product_attention kernels, as torch's SDPBackend numbers them.
SDP_MATH, SDP_FLASH, SDP_EFFICIENT = 0, 1, 2


def choose_sdp_backend(capability, query, key, value, attn_mask, dropout_p, enable_gqa=False) -> int:
    """The kernel torch's CUDA SDPA dispatch picks for these inputs (the main
    rules of sdp_utils.cpp; flash first, then memory-efficient, then math)."""
    import torch
    dtype = query.dtype
    head_dim = query.shape[-1]
    same_head = key.shape[-1] == head_dim and value.shape[-1] == head_dim
    dims4 = query.dim() == 4 and key.dim() == 4 and value.dim() == 4
    if (capability >= (8, 0) and dtype in (torch.float16, torch.bfloat16) and attn_mask is None
            and head_dim <= 256 and head_dim % 8 == 0 and same_head and dims4 and not enable_gqa):
        return SDP_FLASH
    if (capability >= (5, 0) and dtype in (torch.float16, torch.bfloat16, torch.float32)
            and head_dim % 8 == 0 and value.shape[-1] % 8 == 0 and dims4 and not enable_gqa
            and not (dtype == torch.bfloat16 and capability < (8, 0))):
        return SDP_EFFICIENT
    return SDP_MATH


def describe(gpu, torch_version: str) -> list:
    """What the prediction modelled, one line each, for the output."""
    ws = cublas_workspace_bytes(gpu.capability)
    return [
        f"target: {gpu.name} ({gpu.total_memory} bytes, sm{gpu.capability[0]}{gpu.capability[1]}), "
        f"torch {torch_version}",
        f"cuBLAS workspace: {ws} bytes per (thread, stream), at its first matmul, never freed "
        "(CUBLAS_WORKSPACE_CONFIG honoured; cuBLASLt shares it)",
        "attention: scaled_dot_product_attention steered to the kernel this GPU picks "
        "(flash / memory-efficient / math), allocating that kernel's tensors",
        "cuDNN workspaces: not modelled (a convolution step may need one more workspace block)",
        "NCCL buffers: not counted (outside the caching allocator)",
        f"outside the allocator: {gpu.context_bytes} bytes assumed for the CUDA context",
    ]
