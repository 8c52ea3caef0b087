"""F.scaled_dot_product_attention on the fake device, as torch's CUDA
dispatch (ATen/native/transformers/attention.cpp, sdp_utils.cpp) runs it:
the kernel the target GPU picks (gpu_model.choose_sdp_backend), and what
the dispatch does before the kernel, each a request on a GPU:

- autocast's casts: the function is on autocast's lower-precision list, so
  fp32 q, k, v (and a float mask) arrive cast to the autocast dtype;
- a bool mask made additive: where(mask, 0, scalar_tensor(-inf)) in the
  query's dtype (two 4-byte scalars, then the mask-sized result);
- memory-efficient: a mask whose strides are not multiples of 8 padded
  (pad_bias), then expanded to (B, H, M, N) (a view);
- flash: a head dim not a multiple of 8 padded (pad_last_dim), the output
  sliced back;
- cuDNN: the mask (made additive, as for the others) passed as it is.

The fused kernels are then called as their aten ops (whose meta functions
allocate that kernel's outputs; cuda_kernels.py adds what the CUDA
implementations allocate besides). Each call is counted per kernel on the
recording (printed with the answer).
"""
from __future__ import annotations

import torch

from . import gpu_model


def _autocast_cast(t, dtype):
    """autocast's cached_cast for an op on the lower-precision list: a
    floating tensor on cuda (not fp64) becomes `dtype` (a new tensor);
    anything else passes."""
    if (isinstance(t, torch.Tensor) and t.device.type == "cuda" and t.is_floating_point()
            and t.dtype not in (torch.float64, dtype)):
        return t.to(dtype)
    return t


def sdpa(recording, cap):
    """F.scaled_dot_product_attention for the fake device (the module docstring)."""
    original = torch.nn.functional.scaled_dot_product_attention
    aten = torch.ops.aten

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        if query.device.type != "cuda":
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        if torch.is_autocast_enabled("cuda"):
            low = torch.get_autocast_dtype("cuda")
            query, key, value, attn_mask = (_autocast_cast(t, low)
                                            for t in (query, key, value, attn_mask))
            with torch.autocast("cuda", enabled=False):
                return sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        backend = gpu_model.choose_sdp_backend(cap, query, key, value, attn_mask, dropout_p,
                                               enable_gqa, is_causal)
        recording.note_attention(backend, query, key, attn_mask, dropout_p, enable_gqa)
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.where(attn_mask, 0.0, torch.scalar_tensor(
                float("-inf"), dtype=query.dtype, device=attn_mask.device))
        if backend == gpu_model.SDP_MATH:
            # The math kernel as attention.cpp calls it once math is chosen
            # (not through F.scaled_dot_product_attention, whose kernel
            # choice would ask a CUDA build's cuDNN for its version, which
            # fails with no GPU visible: seen at T5 on torch 2.11+cu130).
            return aten._scaled_dot_product_attention_math(
                query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
                enable_gqa=enable_gqa)[0]
        if backend == gpu_model.SDP_CUDNN:
            # attention.cpp: compute_logsumexp when a gradient will flow.
            need_lse = torch.is_grad_enabled() and (
                query.requires_grad or key.requires_grad or value.requires_grad)
            return aten._scaled_dot_product_cudnn_attention(
                query, key, value, attn_mask, need_lse, dropout_p, is_causal, False,
                scale=scale)[0]
        if backend == gpu_model.SDP_FLASH:
            head = query.shape[-1]
            if head % 8:
                pad = 8 - head % 8
                query, key, value = (torch.nn.functional.pad(t, (0, pad))
                                     for t in (query, key, value))
            out = aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False,
                scale=scale if scale is not None else head ** -0.5)[0]
            return out[..., :head] if head % 8 else out
        need_lse = torch.is_grad_enabled() and (
            query.requires_grad or key.requires_grad or value.requires_grad)
        if attn_mask is not None:
            if (attn_mask.stride(-1) != 1
                    or any(st % 8 for st in attn_mask.stride()[:-1])):
                n = attn_mask.shape[-1]
                attn_mask = torch.nn.functional.pad(attn_mask, (0, 8 - n % 8))[..., :n]
            attn_mask = attn_mask.expand(query.shape[0], query.shape[1], query.shape[2],
                                         key.shape[2])
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, need_lse, dropout_p, is_causal, scale=scale)[0]
    return sdpa
