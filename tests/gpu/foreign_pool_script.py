"""torch.cuda.MemPool(allocator=...) with a CUDAPluggableAllocator over
cuMemCreate (examples/sleep_mode's library, argv[2]), unchanged PyTorch
code, under the native allocator or cachealloc (argv[1]). Prints one JSON
line for tests/gpu/test_foreign_pool_gpu.py to compare. Segments are
compared by shape (addresses differ between processes)."""
import ctypes
import json
import sys

import torch

from segment_shapes import pool_of, shapes

mode, library = sys.argv[1], sys.argv[2]
if mode == "cachealloc":
    import cachealloc

    cachealloc.install()
    # The glue (MemPool(allocator=...) needs it), on the CUDA backend.
    assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    assert cachealloc.backend() == "cuda", cachealloc.backend()

MiB = 2**20
dev = torch.device("cuda")
out = {"mode": mode}
foreign = ctypes.CDLL(library)
foreign.sleep_bytes.restype = ctypes.c_size_t
foreign.sleep_bytes.argtypes = [ctypes.c_int, ctypes.c_int]
foreign.sleep_set_capacity.argtypes = [ctypes.c_size_t]
pluggable = torch.cuda.memory.CUDAPluggableAllocator(library, "sleep_alloc", "sleep_free")


def foreign_bytes():
    return foreign.sleep_bytes(0, 0)  # every allocation (tag 0) the foreign allocator holds


def floats(nbytes):
    return torch.empty(nbytes // 4, device=dev)


a = floats(4096)
pool = torch.cuda.MemPool(pluggable.allocator())
out["use_count_new"] = pool.use_count()
with torch.cuda.use_mem_pool(pool):
    out["use_count_inside"] = pool.use_count()
    b = floats(4096)
    c = floats(3 * MiB)
    x = torch.randn(256, 256, device=dev)
    d = x @ x
out["use_count_after"] = pool.use_count()
out["foreign_bytes"] = foreign_bytes()
out["pools"] = {"a": pool_of(a) == [0, 0], "b": pool_of(b) == list(pool.id),
                "c": pool_of(c) == list(pool.id), "d": pool_of(d) == list(pool.id)}
out["pool_snapshot"] = shapes(pool.snapshot())
out["all_segments"] = shapes(torch.cuda.memory_snapshot())
# The product computed in the foreign pool's memory is right.
out["d_ok"] = bool(torch.allclose(d.cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3))
del b
f = floats(4096)
out["f_in_default_pool"] = pool_of(f) == [0, 0]
out["stats_with_pool"] = torch.cuda.memory_stats()

# The foreign allocator refuses: an OOM in that pool, nothing leaked.
foreign.sleep_set_capacity(foreign_bytes())
with torch.cuda.use_mem_pool(pool):
    try:
        big = floats(64 * MiB)
        out["oom"] = "no error"
    except torch.OutOfMemoryError as e:
        out["oom"] = str(e).split(".")[0]  # "CUDA out of memory"
    small = floats(4096)  # the pool's cached small segment still serves
out["small_in_pool"] = pool_of(small) == list(pool.id)
foreign.sleep_set_capacity(0)
out["foreign_bytes_after_oom"] = foreign_bytes()
out["stats_after_oom"] = torch.cuda.memory_stats()

# no_split with an allocator: a 2 KiB request takes a whole 2 MiB block.
ns = torch.cuda.MemPool(pluggable.allocator(), no_split=True)
before = torch.cuda.memory_allocated()
with torch.cuda.use_mem_pool(ns):
    g = floats(2048)
out["no_split_allocated_delta"] = torch.cuda.memory_allocated() - before
del g, ns

# ~MemPool and empty_cache: the pool's segments go back to the allocator.
del c, d, x, small
pool_id = list(pool.id)
del pool
torch.cuda.empty_cache()
out["foreign_bytes_after_release"] = foreign_bytes()
out["deleted_pool_segments_left"] = sum(
    1 for s in torch.cuda.memory_snapshot() if list(s["segment_pool_id"]) == pool_id)
del a, f
torch.cuda.empty_cache()
out["final_stats"] = torch.cuda.memory_stats()
out["final_segments"] = shapes(torch.cuda.memory_snapshot())
print(json.dumps(out))
