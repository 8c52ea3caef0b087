"""A script of unmodified PyTorch memory-API calls. Run as
    python torch_api_script.py native|cachealloc OUT_DIR
the only difference being `cachealloc.install()` at the top for the second.
Prints one JSON object with what it observed."""
import json
import os
import pathlib
import sys

mode = sys.argv[1]
out_dir = pathlib.Path(sys.argv[2])
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch
from record_stream_check import record_stream_reuse

if mode == "cachealloc":
    import cachealloc

    cachealloc.install()
    assert cachealloc.mode() == "torch-extension", cachealloc.mode()

result = {}
torch.manual_seed(0)
torch.cuda.memory._record_memory_history(max_entries=100000)
# Inductor's cudagraph trees ask this; the base class raises for a pluggable
# allocator.
is_enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
result["history_enabled"] = is_enabled() if is_enabled else "no binding"

# 1. Training with cuDNN's heuristics. (Benchmark mode, which asks the
#    allocator for cacheInfo, comes last: it picks algorithms by timing, so
#    its workspace sizes, and so reserved bytes, differ from run to run under
#    native too: measured 570 vs 637 MB reserved in 2 of 4 native runs.)
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(64, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 3, 64, 64, device="cuda")
y = torch.randint(0, 10, (64,), device="cuda")
for _ in range(3):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
torch.cuda.synchronize()
result["after_training"] = {
    "memory_allocated": torch.cuda.memory_allocated(),
    "max_memory_allocated": torch.cuda.max_memory_allocated(),
    "memory_reserved": torch.cuda.memory_reserved(),
    "max_memory_reserved": torch.cuda.max_memory_reserved(),
}

# 2. Peaks: reset, then a known temporary.
torch.cuda.reset_peak_memory_stats()
t = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
del t
result["peak_after_reset"] = torch.cuda.max_memory_allocated()
torch.cuda.reset_accumulated_memory_stats()
result["num_alloc_after_reset"] = torch.cuda.memory_stats()["allocation.all.allocated"]

# 3. record_stream on a side stream: the block must not be reused while the
#    side stream still works on it.
(result["record_stream_reused_while_busy"],
 result["record_stream_reused_after_sync"]) = record_stream_reuse(0, 0, touch=True)

# 4. Summary, stats, snapshot.
result["summary_lines"] = len(torch.cuda.memory_summary().splitlines())
stats = torch.cuda.memory_stats()
result["memory_stats"] = dict(stats)
torch.cuda.empty_cache()
result["reserved_after_empty_cache"] = torch.cuda.memory_reserved()
snap_path = out_dir / f"{mode}_snapshot.pickle"
torch.cuda.memory._dump_snapshot(str(snap_path))
snap = torch.cuda.memory._snapshot()
result["segments"] = len(snap["segments"])
result["trace_entries"] = len(snap["device_traces"][0])
alloc_frames = [e.get("frames", []) for e in snap["device_traces"][0] if e["action"] == "alloc"]
result["alloc_entries_with_frames"] = sum(1 for f in alloc_frames if f)
result["frame_files"] = sorted({f["filename"].split("/")[-1] for fs in alloc_frames for f in fs})

# 5. The profiler sees allocations.
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                        torch.profiler.ProfilerActivity.CUDA],
                            profile_memory=True) as prof:
    z = torch.randn(1 << 20, device="cuda")
    z = z * 2
    del z
events = [e for e in prof.key_averages() if getattr(e, "device_memory_usage", 0)]
result["profiler_ops_with_device_memory"] = len(events)
# What the profiler was told, op by op: native reports each block's rounded
# size (+ on alloc, - on free). A 1000-float tensor asks for 4000 bytes and
# gets a 4096-byte block; a free must cancel its alloc exactly.
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            profile_memory=True) as prof:
    w = torch.ones(1000, device="cuda")
    w = w + 1
    del w
result["profiler_memory_by_op"] = sorted(
    (e.key, e.device_memory_usage, e.self_device_memory_usage)
    for e in prof.key_averages() if e.device_memory_usage or e.self_device_memory_usage)
result["allocator_backend"] = torch.cuda.get_allocator_backend()

# 5b. A request of more than 1 EiB: native raises torch.OutOfMemoryError
#     before allocating anything.
try:
    torch.empty(1 << 61, dtype=torch.uint8, device="cuda")
    result["huge_request_error"] = "none"
except Exception as e:  # noqa: BLE001 - the type is what is compared
    result["huge_request_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"

# 5c. OOM observers are told what native tells them: the device, the bytes
#     the device refused (the rounded segment size, not the request) and
#     the allowed bytes (free bytes vary between runs: not compared).
seen = []
torch._C._cuda_attach_out_of_memory_observer(lambda *args: seen.append(args))
torch.cuda.set_per_process_memory_fraction(0.05)
allowed = int(0.05 * torch.cuda.get_device_properties(0).total_memory)
try:  # just over what the fraction allows, whatever the GPU's size
    torch.empty(allowed + 12345, dtype=torch.uint8, device="cuda")
    result["oom_observer"] = "no OOM"
except torch.OutOfMemoryError:
    result["oom_observer"] = [[int(v) for v in args[:3]] for args in seen]
torch.cuda.set_per_process_memory_fraction(1.0)

# 5d. skip_actions leaves those actions out of the history; a name that is
#     not a CUDA allocator action ("segment_map", documented for other
#     devices) is ignored.
try:
    torch.cuda.memory._record_memory_history(max_entries=1000, clear_history=True,
                                             skip_actions=["free_requested", "snapshot",
                                                           "segment_map"])
    t = torch.empty(1000, device="cuda")
    del t
    torch.cuda.memory._snapshot()
    result["skip_actions_trace"] = [e["action"] for e in
                                    torch.cuda.memory._snapshot()["device_traces"][0]]
except TypeError as e:  # a torch without the keyword
    result["skip_actions_trace"] = f"TypeError: {e}"
torch.cuda.memory._record_memory_history(max_entries=100000)

# 6. cudnn.benchmark training: cuDNN sizes its workspace from the allocator's
#    cacheInfo (largest cached block); it must train.
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = False
losses = []
for _ in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
result["cudnn_benchmark_losses_finite"] = all(l == l and abs(l) < float("inf") for l in losses)
print(json.dumps(result))
