"""PyTorch's NCCL user-buffer path, as torch 2.11 has it: a MemPool whose
allocator is the NCCL backend's (backend.mem_allocator: ncclMemAlloc),
registered with the process group (register_mem_pool), tensors allocated in
it under use_mem_pool, and collectives on them. Run once with expandable
segments off and once with them set globally
(torch.cuda.memory._set_allocator_settings, the run-time form of
PYTORCH_CUDA_ALLOC_CONF): the pool itself stays classic either way, as in
native (a pool with its own allocator never maps expandable pages).

    python nccl_user_buffer_script.py native|cachealloc OUT.json
Starts 2 ranks with torch.multiprocessing (NCCL, one GPU each); rank 0
writes OUT.json: per setting, the all-reduce result check, the pool's
segments (kind, count, bytes) and the default pool's, on each rank.
"""
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))

ELEMENTS = 32 << 20  # 128 MiB of fp32 per buffer: large-pool blocks


def _segments(snapshot, device, pool_id):
    """(count, bytes, expandable count) of the device's segments in pool_id
    (None: the default pool)."""
    n = total = expandable = 0
    for s in snapshot["segments"]:
        if s["device"] != device:
            continue
        in_pool = tuple(s.get("segment_pool_id", (0, 0))) == tuple(pool_id or (0, 0))
        if not in_pool:
            continue
        n += 1
        total += s["total_size"]
        expandable += bool(s.get("is_expandable"))
    return n, total, expandable


def _one_setting(torch, dist, rank, world, label):
    device = torch.device("cuda", rank)
    backend = dist.group.WORLD._get_backend(device)
    pool = torch.cuda.MemPool(backend.mem_allocator)
    with torch.cuda.use_mem_pool(pool):
        buf = torch.full((ELEMENTS,), float(rank + 1), device=device)
        small = torch.full((1024,), float(rank + 1), device=device)
    backend.register_mem_pool(pool)
    dist.all_reduce(buf)
    dist.all_reduce(small)
    outside = torch.full((ELEMENTS,), 1.0, device=device)  # the default pool
    dist.all_reduce(outside)
    torch.cuda.synchronize(device)
    expected = float(world * (world + 1) // 2)
    snap = torch.cuda.memory._snapshot()
    result = {
        "setting": label,
        "allreduce_ok": bool((buf == expected).all().item()) and bool((small == expected).all().item())
        and bool((outside == float(world)).all().item()),
        "pool_segments": _segments(snap, rank, pool.id),
        "default_segments": _segments(snap, rank, None),
        "pool_use_count": pool.use_count(),
    }
    backend.deregister_mem_pool(pool)
    del buf, small, outside
    torch.cuda.synchronize(device)
    del pool
    return result


def _rank(rank, world, allocator, init_file, out):
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    import torch
    import torch.distributed as dist

    if allocator == "cachealloc":
        import cachealloc

        cachealloc.install()
        assert cachealloc.mode() == "torch-extension"
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))
    results = [_one_setting(torch, dist, rank, world, "classic")]
    torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    results.append(_one_setting(torch, dist, rank, world, "expandable_segments:True globally"))
    # the default pool now grows expandable segments; the NCCL pool must not.
    # The cache is emptied first: a probe served from a cached classic
    # segment would show no new segment at all (seen under native).
    torch.cuda.empty_cache()
    probe = torch.empty(64 << 20, dtype=torch.uint8, device=f"cuda:{rank}")
    snap = torch.cuda.memory._snapshot()
    results.append({"setting": "default pool after the switch",
                    "default_segments": _segments(snap, rank, None)})
    del probe
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        pathlib.Path(out).write_text(json.dumps({"allocator": allocator, "ranks": gathered},
                                                indent=1))
    dist.destroy_process_group()


def main():
    allocator, out = sys.argv[1], sys.argv[2]
    world = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    assert allocator in ("native", "cachealloc"), allocator
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=(world, allocator, os.path.join(tmp, "rdzv"), out), nprocs=world,
                 join=True)
    print(pathlib.Path(out).read_text())


if __name__ == "__main__":
    main()
