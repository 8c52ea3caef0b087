"""The GPUs `cachealloc predict --gpu NAME` knows: memory, compute
capability and the memory the CUDA context keeps outside the allocator.

total_memory is what cudaGetDeviceProperties reports (bytes), which is what
torch.cuda.get_device_properties().total_memory and the memory fraction
(set_per_process_memory_fraction) are based on. context_bytes is an
*assumption*: the device memory a fresh PyTorch process holds outside the
caching allocator once CUDA, cuBLAS and cuDNN are loaded (lazy module
loading, CUDA 13), measured on H200 and taken as the same on the others.
It is printed with every answer and can be overridden (--context-memory).
Any other card: --gpu-memory BYTES (with --capability).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

MiB = 1 << 20

# What a process holds outside the allocator once it has run a matmul and a
# convolution (CUDA context + cuBLAS handle + cuDNN), measured on an H200 with
# torch 2.11 + CUDA 13: 702.8 MiB (526.8 MiB for the bare context).
DEFAULT_CONTEXT_BYTES = 703 * MiB


@dataclass(frozen=True)
class Gpu:
    name: str
    total_memory: int              # bytes, as cudaGetDeviceProperties says
    capability: Tuple[int, int]    # (major, minor)
    multi_processor_count: int
    context_bytes: int = DEFAULT_CONTEXT_BYTES  # assumed, outside the allocator
    product: str = ""              # the name torch.cuda.get_device_name gives

    def usable(self, memory_fraction: Optional[float] = None) -> int:
        """Bytes the caching allocator can reserve: what the device has free
        after the context, capped by the memory fraction (which native applies
        to total_memory)."""
        free = self.total_memory - self.context_bytes
        if memory_fraction is None:
            return free
        return min(free, int(memory_fraction * self.total_memory))


# total_memory figures: bytes as CUDA reports them; MiB times 2^20 from vendor listings, H200
# measured on the device (150109880320, not a whole number of MiB).
KNOWN_GPUS = {
    g.name: g for g in (
        Gpu("H100-80GB", 81559 * MiB, (9, 0), 132, product="NVIDIA H100 80GB HBM3"),
        Gpu("H100-PCIe-80GB", 81559 * MiB, (9, 0), 114, product="NVIDIA H100 PCIe"),
        Gpu("H200-141GB", 150109880320, (9, 0), 132, product="NVIDIA H200"),
        Gpu("A100-80GB", 81920 * MiB, (8, 0), 108, product="NVIDIA A100-SXM4-80GB"),
        Gpu("A100-40GB", 40960 * MiB, (8, 0), 108, product="NVIDIA A100-SXM4-40GB"),
        Gpu("L40S-48GB", 46068 * MiB, (8, 9), 142, product="NVIDIA L40S"),
        Gpu("L4-24GB", 23034 * MiB, (8, 9), 58, product="NVIDIA L4"),
        Gpu("A10G-24GB", 23028 * MiB, (8, 6), 80, product="NVIDIA A10G"),
        Gpu("RTX4090-24GB", 24564 * MiB, (8, 9), 128, product="NVIDIA GeForce RTX 4090"),
        Gpu("V100-32GB", 32768 * MiB, (7, 0), 80, product="Tesla V100-SXM2-32GB"),
        Gpu("V100-16GB", 16384 * MiB, (7, 0), 80, product="Tesla V100-SXM2-16GB"),
        Gpu("T4-16GB", 15360 * MiB, (7, 5), 40, product="Tesla T4"),
        Gpu("B200-180GB", 183359 * MiB, (10, 0), 148, product="NVIDIA B200"),
    )
}


class UnknownGpu(ValueError):
    pass


def resolve(name: Optional[str] = None, memory: Optional[int] = None,
            capability: Optional[Tuple[int, int]] = None,
            context_bytes: Optional[int] = None) -> Gpu:
    """The target GPU: a known name (case-insensitive), or any card given by
    its memory in bytes (capability defaults to Hopper's 9.0). Raises
    UnknownGpu naming the known GPUs."""
    if memory is not None:
        if memory <= 0:
            raise UnknownGpu(f"--gpu-memory must be positive, got {memory}")
        base = KNOWN_GPUS.get(name) if name else None
        gpu = Gpu(name or f"GPU-{memory}B", int(memory), capability or (base.capability if base else (9, 0)),
                  base.multi_processor_count if base else 132, product=name or "custom GPU")
    else:
        if not name:
            raise UnknownGpu("no GPU given: pass --gpu NAME (one of " + ", ".join(KNOWN_GPUS) +
                             ") or --gpu-memory BYTES")
        by_lower = {k.lower(): g for k, g in KNOWN_GPUS.items()}
        gpu = by_lower.get(name.lower())
        if gpu is None:
            raise UnknownGpu(f"unknown GPU {name!r}: known GPUs are " + ", ".join(KNOWN_GPUS) +
                             "; for any other card pass --gpu-memory BYTES")
        if capability is not None:
            gpu = Gpu(gpu.name, gpu.total_memory, capability, gpu.multi_processor_count,
                      gpu.context_bytes, gpu.product)
    if context_bytes is not None:
        gpu = Gpu(gpu.name, gpu.total_memory, gpu.capability, gpu.multi_processor_count,
                  int(context_bytes), gpu.product)
    return gpu
