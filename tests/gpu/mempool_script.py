"""torch.cuda.MemPool and use_mem_pool, unchanged PyTorch code, under the
native allocator or cachealloc (argv[1]: native | cachealloc). Prints one
JSON line of what it saw, for tests/gpu/test_mempool_gpu.py to compare.

Addresses differ between processes, so segments are compared by shape:
(pool id, type, size, blocks' sizes and states), as sorted lists.
"""
import json
import sys

import torch

from segment_shapes import pool_of, shapes

mode = sys.argv[1]
if mode == "cachealloc":
    import cachealloc

    cachealloc.install()
    # The glue, not a quiet fallback to plain mode, on the CUDA backend.
    assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    assert cachealloc.backend() == "cuda", cachealloc.backend()

MiB = 2**20
dev = torch.device("cuda")
out = {"mode": mode}


def floats(nbytes):
    return torch.empty(nbytes // 4, device=dev)


a = floats(4096)
pool = torch.cuda.MemPool()
out["use_count_new"] = pool.use_count()
with torch.cuda.use_mem_pool(pool):
    out["use_count_inside"] = pool.use_count()
    b = floats(4096)
    c = floats(3 * MiB)
    x = torch.randn(256, 256, device=dev)
    d = x @ x  # a kernel's output, allocated inside the context
out["use_count_after"] = pool.use_count()
e = floats(4096)
out["pools"] = {"a": pool_of(a) == [0, 0], "b": pool_of(b) == list(pool.id),
                "c": pool_of(c) == list(pool.id), "d": pool_of(d) == list(pool.id),
                "e": pool_of(e) == [0, 0]}
out["pool_snapshot"] = shapes(pool.snapshot())
out["all_segments"] = shapes(torch.cuda.memory_snapshot())
del b  # back into the pool: a default request must not reuse it
f = floats(4096)
out["f_in_default_pool"] = pool_of(f) == [0, 0]
out["stats_with_pool"] = torch.cuda.memory_stats()

# ~MemPool: release and emptyCache(id). c, d and x stay valid.
pool_id = list(pool.id)
del pool
out["segments_after_pool_deleted"] = shapes(torch.cuda.memory_snapshot())
out["d_sum_ok"] = bool(torch.isfinite(d.sum()).item())
del c, d, x
torch.cuda.empty_cache()
out["segments_after_empty_cache"] = shapes(torch.cuda.memory_snapshot())
out["deleted_pool_segments_left"] = sum(
    1 for s in torch.cuda.memory_snapshot() if list(s["segment_pool_id"]) == pool_id)

# no_split: a 2 KiB request takes a whole 2 MiB block. (torch 2.11 has
# no_split and use_on_oom: a TypeError here fails the run.)
ns = torch.cuda.MemPool(no_split=True)
before = torch.cuda.memory_allocated()
with torch.cuda.use_mem_pool(ns):
    g = floats(2048)
out["no_split_allocated_delta"] = torch.cuda.memory_allocated() - before
del g, ns

# use_on_oom: a default request the limit refuses takes the pool's cached block.
torch.cuda.empty_cache()
total = torch.cuda.get_device_properties(0).total_memory
oom_pool = torch.cuda.MemPool(use_on_oom=True)
with torch.cuda.use_mem_pool(oom_pool):
    h = floats(8 * MiB)  # the pool's 20 MiB segment
del h
torch.cuda.set_per_process_memory_fraction(
    (torch.cuda.memory_reserved() + 20 * MiB + MiB // 2) / total)
k = floats(8 * MiB)      # a default 20 MiB segment: at the limit
m = floats(16 * MiB)     # no room for 16 MiB more: the pool's block
out["use_on_oom_block_in_pool"] = pool_of(m) == list(oom_pool.id)
out["use_on_oom_stats"] = {key: torch.cuda.memory_stats()[key] for key in (
    "num_alloc_retries", "num_device_free", "num_ooms", "segment.all.current")}
del k, m, oom_pool
torch.cuda.set_per_process_memory_fraction(1.0)

del a, e, f
torch.cuda.empty_cache()
out["final_stats"] = torch.cuda.memory_stats()
out["final_segments"] = shapes(torch.cuda.memory_snapshot())
print(json.dumps(out))
