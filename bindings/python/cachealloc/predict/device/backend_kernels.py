"""Ops that a CPU build of torch would decompose where a CUDA build runs
one CUDA kernel.

Why: the dispatcher fills an op's CUDA and AutogradCUDA entries from its
CompositeImplicitAutograd kernel only when nothing is registered for the
CUDA backend itself. A CUDA build registers CUDA kernels; a CPU build does
not. So for an op that has both a composite formula and backend kernels,
a "cuda" tensor on a CPU build takes the formula *above* the Python key
(the fake device never sees the op, only the formula's pieces), while on a
CUDA build the op reaches the Python key whole and its meta function gives
its one output, as the GPU's kernel does.

Seen: timm's EfficientNet-B2 (in-place SiLU, checkpointing) predicted
1,454 MiB at batch 48 under torch 2.13's CPU build and 892 MiB under torch
2.11's CUDA build with no GPU (the GPU: 891 MiB). silu_backward has a
composite formula (sigmoid, 1 - sigmoid, x * that, + 1, two products: five
activation-sized temporaries) beside its CPU and CUDA kernels (one output).
The versions were not the cause; the builds were.

The rule: on a build without CUDA, the ops that the GPU's torch build has
both a CompositeImplicitAutograd and a CUDA kernel for (CUDA_COMPOSITES,
read off torch 2.11.0+cu130 by scripts/gpu_probe_rows.sh's dispatch facts)
get a CUDA registration, so the dispatch table is the CUDA build's. Not
"composite with a CPU kernel": native_channel_shuffle has a CPU kernel and
no CUDA one (a CUDA build decomposes it too), and _fused_rms_norm a CUDA
kernel and no CPU one. The registered kernel is never meant to run: fake
tensors are handled at the Python key, above the backend; if it does run,
it raises naming the op. Registrations live while the fake device is
entered (install/remove).

Units: none. Invariant: on a CUDA build nothing is registered.
"""
from __future__ import annotations

from typing import List, Optional

import torch


def _has(op: str, key: str) -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op, key))
    except RuntimeError:
        return False


# aten ops with a CompositeImplicitAutograd and a CUDA kernel in the GPU's
# torch build, by torch major.minor (the kernel models follow 2.11).
CUDA_COMPOSITES = {
    "2.11": ("aten::_fused_rms_norm", "aten::mish_backward", "aten::silu_backward"),
}
MODELS_TORCH = "2.11"


def composite_ops_with_backend_kernels() -> List[str]:
    """aten ops ("aten::silu_backward", overload names included) with a
    CompositeImplicitAutograd kernel and a CPU kernel of their own; sorted.
    On torch 2.13's CPU build: native_channel_shuffle, mish_backward,
    silu_backward."""
    return sorted(op for op in torch._C._dispatch_get_all_op_names()
                  if op.startswith("aten::") and _has(op, "CompositeImplicitAutograd")
                  and _has(op, "CPU"))


def _unreachable(op: str):
    def kernel(*args, **kwargs):
        raise RuntimeError(
            f"cachealloc predict: {op} reached the CUDA backend of a CPU build of torch; the "
            "fake device handles CUDA tensors above it (device/backend_kernels.py)")
    return kernel


class CudaBuildDispatch:
    """Registers the CUDA entries a CUDA build has (module docstring) for
    as long as it is installed; nothing on a CUDA build."""

    def __init__(self):
        self._lib: Optional[torch.library.Library] = None
        self.ops: List[str] = []

    def install(self) -> None:
        if torch.backends.cuda.is_built() or self._lib is not None:
            return
        known = set(torch._C._dispatch_get_all_op_names())
        ops = [op for op in CUDA_COMPOSITES[MODELS_TORCH]
               if op in known and _has(op, "CompositeImplicitAutograd") and not _has(op, "CUDA")]
        if not ops:
            return
        lib = torch.library.Library("aten", "IMPL")
        for op in ops:
            lib.impl(op[len("aten::"):], _unreachable(op), "CUDA")
        self._lib, self.ops = lib, ops

    def remove(self) -> None:
        if self._lib is not None:
            self._lib._destroy()
        self._lib, self.ops = None, []
