"""The allocator behaviours PyTorch's own tests expect (issue 28), each as
unmodified PyTorch code. Run as

    python expectations_script.py native|cachealloc ITEM

in a fresh process per (allocator, item); the only difference is
`cachealloc.install()` at the top for the second. Prints one JSON object of
what it saw, for tests/gpu/test_expectations_gpu.py to compare.
"""
import gc
import json
import os
import sys
import threading

mode, item = sys.argv[1], sys.argv[2]
if item == "fraction_config":
    # Read by both allocators at start-up.
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "per_process_memory_fraction:0.5"

import torch  # noqa: E402

from segment_shapes import shapes  # noqa: E402

if mode == "cachealloc":
    import cachealloc

    cachealloc.install()
    assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    assert cachealloc.backend() == "cuda", cachealloc.backend()
    assert torch.cuda.memory.get_allocator_backend() == "pluggable"
else:
    assert torch.cuda.memory.get_allocator_backend() == "native"

MiB = 2**20
out = {"mode": mode, "item": item, "torch": torch.__version__}


def failure(fn):
    """[exception type, first line of its message], or "accepted"."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 -- the type is what is compared
        return [type(e).__name__, str(e).splitlines()[0][:300] if str(e) else ""]
    return "accepted"


def error_type(fn):
    """The exception's type name, or "accepted"."""
    f = failure(fn)
    return f if f == "accepted" else f[0]


def rounded(nbytes):
    """The bytes a request of `nbytes` takes (its rounded block)."""
    before = torch.cuda.memory_allocated()
    t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    size = torch.cuda.memory_allocated() - before
    del t
    return size


def settings_dict():
    return torch.cuda.memory._snapshot()["allocator_settings"]


def set_settings(text):
    torch.cuda.memory._set_allocator_settings(text)


def stat_subset(keys=("allocation.all.current", "requested_bytes.all.current",
                      "allocated_bytes.all.current", "reserved_bytes.all.current",
                      "num_device_alloc", "segment.all.current")):
    s = torch.cuda.memory_stats()
    return {k: s[k] for k in keys}


def delta(before, after):
    return {k: after[k] - before[k] for k in before}


# 1. torch.accelerator's memory API (PyTorch's test_memory_stats).
def accelerator():
    torch.empty(1, device="cuda")  # initializes CUDA and the allocator
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    out["initialized"] = torch._C._accelerator_isAllocatorInitialized()
    stats = torch.accelerator.memory_stats()
    out["has_active_bytes"] = "active_bytes.all.current" in stats
    out["same_keys_as_cuda"] = sorted(stats) == sorted(torch.cuda.memory_stats())
    prev_active = stats["active_bytes.all.current"]
    prev_max_allocated = torch.accelerator.max_memory_allocated()
    prev_max_reserved = torch.accelerator.max_memory_reserved()
    tmp = torch.randn(256, device="cuda")
    out["active_delta"] = torch.accelerator.memory_stats()["active_bytes.all.current"] - prev_active
    out["allocated_equal_cuda"] = torch.accelerator.memory_allocated() == torch.cuda.memory_allocated()
    del tmp
    gc.collect()
    torch.accelerator.empty_cache()
    after = torch.accelerator.memory_stats()
    out["active_after_free"] = after["active_bytes.all.current"] - prev_active
    out["freed_after_free"] = after["active_bytes.all.freed"]
    out["reserved_after_empty_cache"] = torch.accelerator.memory_reserved()
    torch.accelerator.reset_peak_memory_stats()
    out["max_allocated_back"] = torch.accelerator.max_memory_allocated() == prev_max_allocated
    out["max_reserved_back"] = torch.accelerator.max_memory_reserved() == prev_max_reserved
    out["stats_equal_cuda_stats"] = dict(torch.accelerator.memory_stats()) == dict(
        torch.cuda.memory_stats())


# 2. Run-time settings: torch.cuda.memory._set_allocator_settings.
def settings():
    request = 84 * MiB + 1
    out["rounded_at_start"] = rounded(request)
    set_settings("roundup_power2_divisions:4")
    out["rounded_divisions_4"] = rounded(request)
    out["settings_divisions_4"] = settings_dict()
    # Not named: divisions back to their default; named keys take effect.
    set_settings("max_split_size_mb:40,garbage_collection_threshold:0.5,"
                 "pinned_num_register_threads:4,graph_capture_record_stream_reuse:True,"
                 "max_non_split_rounding_mb:40")
    out["rounded_after_reset"] = rounded(request)
    out["settings_split_40"] = settings_dict()
    out["stat_max_split_size"] = torch.cuda.memory_stats()["max_split_size"]
    # max_split_size 40 MiB in force: a cached 50 MiB block is oversize and
    # serves no 30 MiB request, which gets a segment of its own.
    torch.cuda.empty_cache()
    big = torch.empty(50 * MiB, dtype=torch.uint8, device="cuda")
    del big
    before = torch.cuda.memory_reserved()
    small = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
    out["oversize_rule_new_reserved"] = torch.cuda.memory_reserved() - before
    del small
    set_settings("roundup_power2_divisions:[64:8,>:2]")
    out["settings_list_form"] = settings_dict()
    out["rounded_list_form"] = [rounded(n) for n in (65 * MiB + 1, 129 * MiB + 1)]
    # Refused texts: the exception type and, for an unknown key, native's wording.
    set_settings("roundup_power2_divisions:4")
    out["refusals"] = {bad: failure(lambda b=bad: set_settings(b)) for bad in (
        "bogus_key:1", "roundup_power2_divisions:3", "max_split_size_mb:10",
        "garbage_collection_threshold:1.5", "roundup_power2_divisions:[64:3]",
        "max_split_size_mb", "expandable_segments:Maybe")}
    # What a refused text left in force (native applies keys as it parses).
    set_settings("roundup_power2_divisions:4")
    out["refused_part_way"] = failure(
        lambda: set_settings("roundup_power2_divisions:8,bogus_key:1"))
    out["rounded_after_refusal"] = rounded(request)
    out["expandable_true"] = failure(lambda: set_settings("expandable_segments:True"))
    set_settings("expandable_segments:False")
    out["backend_native"] = failure(lambda: set_settings("backend:native"))
    out["backend_switch"] = error_type(lambda: set_settings("backend:cudaMallocAsync"))
    out["not_a_str"] = error_type(lambda: set_settings(4))


# 3. caching_allocator_enable(False): raw_alloc bypasses the cache.
def enable():
    keep = torch.empty(1, device="cuda")  # is_initialized(), so enable acts
    get_enabled = getattr(torch._C, "_cuda_cudaCachingAllocator_is_enabled", None)
    torch.cuda.caching_allocator_enable(False)
    out["is_enabled_false"] = get_enabled() if get_enabled else "no binding"
    before = stat_subset()
    p = torch.cuda.caching_allocator_alloc(MiB)
    out["raw_alloc_disabled"] = delta(before, stat_subset())
    before = stat_subset()
    t = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    out["tensor_disabled"] = delta(before, stat_subset())
    before = stat_subset()
    torch.cuda.caching_allocator_delete(p)
    out["raw_delete_disabled"] = delta(before, stat_subset())
    del t
    torch.cuda.caching_allocator_enable(True)
    out["is_enabled_true"] = get_enabled() if get_enabled else "no binding"
    before = stat_subset()
    p = torch.cuda.caching_allocator_alloc(MiB)
    out["raw_alloc_enabled"] = delta(before, stat_subset())
    torch.cuda.caching_allocator_delete(p)
    # torch 2.11 has no caching_allocator_disabled() context manager (newer
    # releases do); the enable(False)/enable(True) pair is what it offers.
    torch.cuda.caching_allocator_enable(False)
    before = stat_subset()
    q = torch.cuda.caching_allocator_alloc(3 * MiB)
    out["raw_alloc_in_context"] = delta(before, stat_subset())
    torch.cuda.caching_allocator_delete(q)
    torch.cuda.caching_allocator_enable(True)
    del keep


# 4. The memory fraction: get/set round trip, 0.0 and 1.0.
def fraction():
    torch.empty(1, device="cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    out["initial"] = torch.cuda.get_per_process_memory_fraction(0)
    out["type_error"] = error_type(lambda: torch.cuda.set_per_process_memory_fraction(1))
    out["value_error"] = error_type(lambda: torch.cuda.set_per_process_memory_fraction(2.0))
    seen = {}
    for f in (0.5, 0.25, 1.0, 0.0):
        torch.cuda.set_per_process_memory_fraction(f, 0)
        seen[str(f)] = torch.cuda.get_per_process_memory_fraction(0)
    out["round_trip"] = seen
    out["zero_allows_nothing"] = error_type(lambda: torch.empty(MiB, device="cuda"))
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    # PyTorch's pattern: save, set small, restore in finally.
    orig = torch.cuda.get_per_process_memory_fraction(0)
    torch.cuda.empty_cache()
    try:
        small = (torch.cuda.memory_reserved() + 62 * MiB) / total
        torch.cuda.set_per_process_memory_fraction(small, 0)
        out["small_get"] = round(torch.cuda.get_per_process_memory_fraction(0) * total / MiB, 3)
        out["over_small_limit"] = error_type(
            lambda: torch.empty(100 * MiB, dtype=torch.uint8, device="cuda"))
    finally:
        torch.cuda.set_per_process_memory_fraction(orig, 0)
    out["restored"] = torch.cuda.get_per_process_memory_fraction(0)
    big = torch.empty(1024 * MiB, dtype=torch.uint8, device="cuda")  # fails if the limit stayed
    out["after_restore_1gib"] = torch.cuda.memory_allocated() >= 1024 * MiB
    del big
    # The config key at run time: recorded, acting only at start-up (native).
    set_settings("per_process_memory_fraction:0.25")
    out["runtime_key"] = torch.cuda.get_per_process_memory_fraction(0)


def fraction_config():
    torch.empty(1, device="cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    out["from_config"] = torch.cuda.get_per_process_memory_fraction(0)
    out["over_half"] = error_type(
        lambda: torch.empty(int(total * 0.6), dtype=torch.uint8, device="cuda"))


# 5. Snapshot metadata: user metadata and torch.compile's compile context.
def metadata():
    torch.cuda.memory._record_memory_history(max_entries=100000)
    set_md = getattr(torch.cuda.memory, "_set_memory_metadata")
    get_md = getattr(torch.cuda.memory, "_get_memory_metadata", None)
    set_md("phase-1")
    out["metadata_get"] = get_md() if get_md else "no binding"
    a = torch.empty(MiB, dtype=torch.uint8, device="cuda")
    del a
    set_md("")
    b = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
    del b

    @torch.compile
    def f(x):
        return (x * 2).relu().sum(dim=0)

    y = f(torch.randn(512, 512, device="cuda"))
    y = f(torch.randn(512, 512, device="cuda"))
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    trace = snap["device_traces"][0]
    out["metadata_entries"] = [[e["action"], e["size"], e["user_metadata"]] for e in trace
                               if e.get("user_metadata")]
    out["compile_contexts"] = sorted({e.get("compile_context", "missing") for e in trace})
    out["entries_with_compile_context"] = sorted(
        [e["action"], e["size"]] for e in trace
        if e.get("compile_context") not in ("N/A", None, ""))
    out["entry_keys"] = sorted({k for e in trace for k in e if k != "frames"})
    torch.cuda.memory._record_memory_history(None)
    del y


# 6. Block reuse during graph capture with side streams.
def graph_reuse():
    results = {}
    for side_streams in (2, 4):
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        set_settings("graph_capture_record_stream_reuse:True")
        pool = torch.cuda.graph_pool_handle()
        g = torch.cuda.CUDAGraph()
        main = torch.cuda.Stream()
        sides = [torch.cuda.Stream() for _ in range(side_streams)]
        seen = []
        with torch.cuda.stream(main):
            g.capture_begin(pool=pool)
            base = None
            for i, s in enumerate(sides):
                s.wait_stream(main)
                x = torch.empty(MiB, dtype=torch.uint8, device="cuda")
                base = x.data_ptr() if base is None else base
                with torch.cuda.stream(s):
                    x.add_(1)
                x.record_stream(s)
                del x  # freed with a pending use on side stream s
                y = torch.empty(MiB, dtype=torch.uint8, device="cuda")
                seen.append(["before_join", i, y.data_ptr() - base])
                del y
                main.wait_stream(s)  # s joins back
                z = torch.empty(MiB, dtype=torch.uint8, device="cuda")
                seen.append(["after_join", i, z.data_ptr() - base])
                del z
            g.capture_end()
        torch.cuda.synchronize()
        results[str(side_streams)] = seen
        del g
    out["offsets"] = results
    set_settings("graph_capture_record_stream_reuse:False")


# 7. A MemPool used from several threads, then emptied.
def pool_threads():
    torch.empty(1, device="cuda")
    # (a) One pool, four threads whose use_mem_pool overlap: the first holds
    # its route open while the others try to open theirs.
    pool = torch.cuda.MemPool()
    opened, done = threading.Event(), threading.Event()
    errors, kept = [], []

    def first():
        with torch.cuda.use_mem_pool(pool):
            kept.append(torch.empty(MiB, dtype=torch.uint8, device="cuda"))
            opened.set()
            done.wait(30)

    def other():
        opened.wait(30)
        try:
            with torch.cuda.use_mem_pool(pool):
                kept.append(torch.empty(MiB, dtype=torch.uint8, device="cuda"))
        except RuntimeError as e:
            errors.append(str(e).splitlines()[0][:120])

    threads = [threading.Thread(target=first)] + [threading.Thread(target=other) for _ in range(3)]
    threads[0].start()
    for t in threads[1:]:
        t.start()
    for t in threads[1:]:
        t.join()
    done.set()
    threads[0].join()
    out["overlap_errors"] = len(errors)
    out["overlap_use_count"] = pool.use_count()
    # Give back uses a refused route left (native's beginAllocateToPool adds
    # the use before it refuses), so that ~MemPool finds only its own.
    for _ in range(pool.use_count() - 1):
        torch._C._cuda_releasePool(0, pool.id)
    kept.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    out["overlap_pool_snapshot"] = shapes(pool.snapshot())
    del pool
    torch.cuda.empty_cache()
    out["overlap_segments_after_del"] = shapes(torch.cuda.memory_snapshot())

    # (b) One pool, four threads one after another.
    pool = torch.cuda.MemPool()

    def turn(n):
        with torch.cuda.use_mem_pool(pool):
            t = torch.empty((n + 1) * MiB, dtype=torch.uint8, device="cuda")
            del t

    for n in range(4):
        t = threading.Thread(target=turn, args=(n,))
        t.start()
        t.join()
    out["sequential_use_count"] = pool.use_count()
    torch.cuda.empty_cache()
    out["sequential_pool_snapshot"] = shapes(pool.snapshot())
    del pool
    torch.cuda.empty_cache()
    out["sequential_segments_after_del"] = shapes(torch.cuda.memory_snapshot())


# The rest of the memory API no item above touches.
def rest():
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
    free, total = torch.cuda.mem_get_info()
    out["mem_get_info_total"] = total
    out["list_gpu_processes_type"] = type(torch.cuda.list_gpu_processes()).__name__
    out["memory_snapshot"] = shapes(torch.cuda.memory_snapshot())
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"expect_{os.getpid()}.pickle")
    torch.cuda.memory._record_memory_history(max_entries=1000)
    y = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
    del y
    torch.cuda.memory._dump_snapshot(path)
    import pickle

    with open(path, "rb") as f:
        dumped = pickle.load(f)
    os.unlink(path)
    out["dump_keys"] = sorted(dumped)
    out["dump_actions"] = [e["action"] for e in dumped["device_traces"][0]]
    torch.cuda.memory._record_memory_history(None)
    del x


ITEMS = {"accelerator": accelerator, "settings": settings, "enable": enable,
         "fraction": fraction, "fraction_config": fraction_config, "metadata": metadata,
         "graph_reuse": graph_reuse, "pool_threads": pool_threads, "rest": rest}
ITEMS[item]()
print(json.dumps(out))
