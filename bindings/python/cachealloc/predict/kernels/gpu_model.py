"""What a GPU does through the caching allocator that a fake-device run
cannot see, per target GPU and torch version: each model here adds or
changes requests, and describe() says what was modelled and how.

- cuBLAS workspace: PyTorch gives each (cuBLAS handle, stream) one workspace
  from the caching allocator at that pair's first cuBLAS call, kept for the
  life of the process. Size (CublasHandlePool.cpp, torch 2.4+):
  CUBLAS_WORKSPACE_CONFIG ":SIZE:COUNT" pairs summed as SIZE KiB * COUNT;
  unset: 32 MiB (4096 KiB * 8) on compute capability 9.x and later (torch
  2.11 treats sm90+ so), else 4096 KiB * 2 + 16 KiB * 8 = 8.125 MiB.
  Handles are per thread: the forward (and the optimizer) run on the
  caller's thread, backward on autograd's device thread, so a training step
  holds two workspaces on one stream.
- cuBLASLt workspace: addmm with a 1-D bias (nn.Linear on 2-D input, GPT-2's
  Conv1D) takes the cuBLASLt path when Blas.cpp's isInputCompliesAddmmCudaLt
  holds (beta 1; bias 1-D, contiguous, of mat2's column count; fp64/fp32/
  fp16/bf16; both matrices at least 2 x 2; DISABLE_ADDMM_CUDA_LT unset). Its
  first such call per (thread, stream) takes the cuBLAS handle (and so that
  workspace) and then a cuBLASLt workspace of CUBLASLT_WORKSPACE_SIZE KiB
  (default 1024), capped at the cuBLAS workspace, kept for the process's
  life; only TORCH_CUBLASLT_UNIFIED_WORKSPACE=1 makes cuBLASLt share the
  cuBLAS workspace instead (CublasHandlePool.cpp, getCUDABlasLtWorkspace).
  Seen on the H200: 1 MiB at the first Linear of the encoder's forward.
- Attention: scaled_dot_product_attention picks cuDNN, flash,
  memory-efficient or math per GPU and input. On sm90/sm10x with a cuDNN
  newer than 9.15 (torch 2.11 + CUDA 13 ships 9.19) torch puts cuDNN first
  (sdp_utils.cpp, check_prefer_cudnn_attention): fp16/bf16, head dims a
  multiple of 8 and at most 128, dropout a multiple of 1/16, key length not
  1, a mask allowed. Else sm80+ and fp16/bf16 and head dim <= 256 and no
  explicit mask: flash; else sm50+ with head dim % 8 == 0 (fp32 included):
  memory-efficient; else math. The fake run is steered to the same kernel,
  whose meta implementation allocates that kernel's tensors (cuDNN: output,
  fp32 stats and two 8-byte Philox tensors; flash: output and fp32
  logsumexp; mem-efficient: output and padded logsumexp; math: the
  attention matrix); cuda_kernels.py adds the kernels' scratch.
- cuDNN convolution workspaces: from a table measured on a GPU of the
  target's compute capability (cudnn_workspace.py); the recording says which
  table and how many convolution calls it did not cover.
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

from . import cuda_kernels

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


def cublaslt_workspace_bytes(capability: Tuple[int, int], env=None) -> int:
    """Bytes of the per-(thread, stream) cuBLASLt workspace; 0 when it
    shares the cuBLAS one."""
    env = os.environ if env is None else env
    if env.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "").strip().lower() in ("1", "on", "true", "yes", "y"):
        return 0
    size = 1024 * KiB
    value = env.get("CUBLASLT_WORKSPACE_SIZE")
    if value is not None:
        try:
            size = int(value) * KiB
        except ValueError:
            pass                       # torch warns and keeps the default
    return min(size, cublas_workspace_bytes(capability, env))


def takes_cublaslt(args, kwargs, env=None) -> bool:
    """Whether an aten.addmm / _addmm_activation call takes the cuBLASLt path."""
    import torch
    env = os.environ if env is None else env
    if env.get("DISABLE_ADDMM_CUDA_LT") == "1":
        return False
    bias, mat1, mat2 = args[:3]
    if kwargs.get("beta", 1) != 1 or not all(isinstance(t, torch.Tensor) for t in (bias, mat1, mat2)):
        return False
    return (bias.dim() == 1 and mat2.dim() == 2 and mat1.dim() == 2
            and bias.shape[0] == mat2.shape[1] and bias.is_contiguous()
            and mat1.dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)
            and min(mat1.shape) > 1 and min(mat2.shape) > 1)


# scaled_dot_product_attention kernels, as torch's SDPBackend numbers them.
SDP_MATH, SDP_FLASH, SDP_EFFICIENT, SDP_CUDNN = 0, 1, 2, 3
SDP_NAMES = {SDP_MATH: "math", SDP_FLASH: "flash", SDP_EFFICIENT: "memory-efficient",
             SDP_CUDNN: "cuDNN"}

# The cuDNN the target torch ships (torch 2.11 + CUDA 13: 9.19.0), as
# torch.backends.cudnn.version() numbers it. The fake device answers it too.
TARGET_CUDNN_VERSION = 91900


def prefers_cudnn_attention(capability, cudnn_version: int = TARGET_CUDNN_VERSION, env=None) -> bool:
    """Whether torch puts cuDNN attention first (sdp_utils.cpp,
    check_prefer_cudnn_attention, CUDA 13 builds): cuDNN newer than 9.15 on
    sm90 or sm10x, unless TORCH_CUDNN_SDPA_DEPRIORITIZED is set true."""
    env = os.environ if env is None else env
    if env.get("TORCH_CUDNN_SDPA_DEPRIORITIZED") == "1":   # c10::utils::check_env: "1" only
        return False
    return cudnn_version > 91500 and capability[0] in (9, 10)


def cudnn_attention_fits(capability, query, key, value, attn_mask, dropout_p, enable_gqa,
                         cudnn_version: int = TARGET_CUDNN_VERSION) -> bool:
    """can_use_cudnn_attention (sdp_utils.cpp) for dense 4-D inputs: the
    user left it enabled, not deterministic-only, fp16/bf16, dropout a
    multiple of 1/16, no empty sequence, last dimensions of stride 1, equal
    heads or (with enable_gqa) query heads a multiple of the key heads,
    batch and heads at most 65535, head dims a multiple of 8 and at most
    128 (192/128 for q-k/v on sm90/sm10x from cuDNN 9.11; 256 only after
    cuDNN 9.22), key length not 1, no dropout with one query row, and a
    mask (if any) that check_attn_mask_shape accepts."""
    import torch
    flags = torch.backends.cuda
    if not getattr(flags, "cudnn_sdp_enabled", lambda: False)():
        return False
    if torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled():
        return False
    if query.dtype not in (torch.float16, torch.bfloat16) or not (
            key.dtype == query.dtype == value.dtype):
        return False
    if dropout_p * 16.0 != float(int(dropout_p * 16.0)):
        return False
    if not (query.dim() == key.dim() == value.dim() == 4):
        return False
    B, H, s_q, d_qk = query.shape
    hk, s_k, d_v = key.shape[1], key.shape[2], value.shape[3]
    if min(B, H, s_q, s_k, d_qk) == 0 or B > 65535 or H > 65535:
        return False
    if not all(t.stride(-1) == 1 or t.shape[-1] == 1 for t in (query, key, value)):
        return False
    if hk != H or value.shape[1] != H:
        if not (enable_gqa and value.shape[1] == hk and H % hk == 0):
            return False
    limit = 128
    if tuple(capability)[0] in (9, 10) and cudnn_version >= 91100 and d_qk == 192 and d_v == 128:
        limit = 192
    if d_qk > limit or d_v > limit or d_qk % 8 or d_v % 8:
        return False
    if s_k == 1 or (dropout_p and s_q == 1):
        return False
    if attn_mask is not None:
        # check_attn_mask_shape (sdp_utils_cpp.h): no gradient through the
        # mask (a learned relative-position bias), its last two dims the
        # query and key lengths or 1, 2-D, or 4-D with batch and heads 1 or
        # the query's; and its last dimension of stride 1.
        m = attn_mask
        if m.requires_grad or m.dim() not in (2, 4):
            return False
        if m.shape[-2] not in (s_q, 1) or m.shape[-1] not in (s_k, 1):
            return False
        if m.dim() == 4 and (m.shape[0] not in (1, B) or m.shape[1] not in (1, H)):
            return False
        if m.stride(-1) != 1 and m.shape[-1] != 1:
            return False
    return True


def choose_sdp_backend(capability, query, key, value, attn_mask, dropout_p, enable_gqa=False,
                       is_causal=False) -> int:
    """The kernel torch's CUDA SDPA dispatch picks for these inputs (the main
    rules of sdp_utils.cpp; flash first, then memory-efficient, then math),
    among the kernels the user left enabled (torch.nn.attention.sdpa_kernel,
    torch.backends.cuda.enable_*_sdp). cuDNN attention comes first where
    prefers_cudnn_attention says so and cudnn_attention_fits; it is not
    tried after the others (torch's default order without the preference
    keeps it last, behind math). Grouped-query inputs (fewer key/value heads than query heads, with
    enable_gqa): torch 2.11 runs them on flash or math only (its
    F.scaled_dot_product_attention documentation); equal head counts pass
    whatever enable_gqa says. Also checked: q, k, v (and a mask) with a last
    dimension of stride 1; flash: no causal mask over unequal query and key
    lengths, and on sm86/89/120 no head dim above 192 when a gradient is
    needed; memory-efficient on sm80+: q, k, v storage offsets aligned to
    its alignment."""
    import torch
    dtype = query.dtype
    head_dim = query.shape[-1]
    same_head = key.shape[-1] == head_dim and value.shape[-1] == head_dim
    dims4 = query.dim() == 4 and key.dim() == 4 and value.dim() == 4
    grouped = dims4 and (key.shape[1] != query.shape[1] or value.shape[1] != query.shape[1])
    heads_ok = not grouped or (enable_gqa and key.shape[1] == value.shape[1]
                               and query.shape[1] % key.shape[1] == 0)
    flags = torch.backends.cuda      # the user's sdpa_kernel(...) / enable_*_sdp choices
    qkv = (query, key, value)
    unit_stride = (all(t.stride(-1) == 1 for t in qkv)
                   and (attn_mask is None or attn_mask.stride(-1) == 1))
    grad = any(t.requires_grad for t in qkv) and torch.is_grad_enabled()
    big_head_ok = not (grad and head_dim > 192 and tuple(capability) in ((8, 6), (8, 9), (12, 0)))
    causal_ok = not (is_causal and query.shape[-2] != key.shape[-2])
    if (prefers_cudnn_attention(capability)
            and cudnn_attention_fits(capability, query, key, value, attn_mask, dropout_p, enable_gqa)):
        return SDP_CUDNN
    if (flags.flash_sdp_enabled() and capability >= (8, 0)
            and dtype in (torch.float16, torch.bfloat16) and attn_mask is None
            and head_dim <= 256 and same_head and dims4 and heads_ok
            and (unit_stride or head_dim == 1) and big_head_ok and causal_ok):
        return SDP_FLASH          # a head dim not a multiple of 8 is padded (fake_device)
    # minimum_gemm_alignment: tensor cores on sm80+ (and for fp16 on sm70+)
    # want 128-bit rows; sm80+ asks at least 4 elements.
    half = dtype in (torch.float16, torch.bfloat16)
    align = 1
    if capability >= (8, 0):
        align = 8 if half else 4
    elif capability >= (7, 0) and half:
        align = 8
    if (flags.mem_efficient_sdp_enabled() and capability >= (5, 0)
            and dtype in (torch.float16, torch.bfloat16, torch.float32)
            and head_dim % align == 0 and value.shape[-1] % align == 0 and dims4 and not grouped
            and key.shape[-1] == head_dim and unit_stride
            and (capability < (8, 0) or all(t.storage_offset() % align == 0 for t in qkv))
            and not (dtype == torch.bfloat16 and capability < (8, 0))):
        return SDP_EFFICIENT
    return SDP_MATH


def describe(gpu, torch_version: str, cudnn_line: str) -> list:
    """What the prediction modelled, one line each, for the output;
    cudnn_line is the recording's CudnnWorkspaces.describe()."""
    ws = cublas_workspace_bytes(gpu.capability)
    return [
        f"target: {gpu.name} ({gpu.total_memory} bytes, sm{gpu.capability[0]}{gpu.capability[1]}), "
        f"torch {torch_version}",
        f"cuBLAS workspace: {ws} bytes per (thread, stream), at its first matmul, never freed "
        "(CUBLAS_WORKSPACE_CONFIG honoured)",
        f"cuBLASLt workspace: {cublaslt_workspace_bytes(gpu.capability)} bytes per (thread, stream), "
        "at its first addmm with a bias on the cuBLASLt path, never freed (CUBLASLT_WORKSPACE_SIZE, "
        "TORCH_CUBLASLT_UNIFIED_WORKSPACE honoured)",
        "attention: scaled_dot_product_attention steered to the kernel this GPU picks "
        "(cuDNN first on sm90/sm10x with the target's cuDNN 9.19, then flash / memory-efficient / "
        "math, among those sdpa_kernel leaves enabled), after autocast's casts, a bool mask made "
        "additive and the kernel's padding, allocating that kernel's tensors and scratch",
        cuda_kernels.describe(),
        "plain tensors: linear's bias added in place after a matmul, autograd's gradient "
        "accumulation in place (where torch does so for plain tensors and not for the fake run's)",
        cudnn_line,
        "cuDNN RNN (nn.LSTM/GRU/RNN): not modelled (recorded unrolled; flagged when used)",
        "values: .item() placeholders; NaN/inf checks answer finite, GradScaler takes every step",
        "NCCL buffers: not counted (outside the caching allocator)",
        f"outside the allocator: {gpu.context_bytes} bytes assumed for the CUDA context",
    ]
