"""A training step that never imports cachealloc: run under `cachealloc run`
(tests/gpu/test_autoinstall_gpu.py), it must still allocate through
cachealloc. Prints one JSON line with what torch and the process show."""
import json
import sys

import torch

x = torch.randn(1 << 20, device="cuda")  # 4 MiB
y = (x * 2).sum()
stats = torch.cuda.memory_stats()
ca = sys.modules.get("cachealloc")
print(json.dumps({
    "allocator_backend": torch.cuda.memory.get_allocator_backend(),
    "cachealloc_loaded": ca is not None,
    "mode": ca.mode() if ca else None,
    "torch_allocated": stats.get("allocated_bytes.all.current"),
    "cachealloc_allocated": ca.memory_stats()["allocated_bytes.all.current"] if ca else None,
    "max_split_size": stats.get("max_split_size"),
}))
