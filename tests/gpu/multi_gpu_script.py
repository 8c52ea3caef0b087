"""Two-GPU behaviour of PyTorch's memory API, unmodified. Run as
    python multi_gpu_script.py native|cachealloc
(cachealloc.install() at the top for the second). Prints one JSON object."""
import ctypes
import json
import sys

mode = sys.argv[1]
import torch
from record_stream_check import record_stream_reuse

if mode == "cachealloc":
    import cachealloc

    cachealloc.install()
    assert cachealloc.mode() == "torch-extension", cachealloc.mode()

assert torch.cuda.device_count() >= 2
_cuda = ctypes.CDLL("libcuda.so.1")
assert _cuda.cuInit(0) == 0


def has_context(device):
    """Whether the device's primary context exists (creating one costs
    hundreds of MB on that GPU: a process that only uses cuda:1 must not
    get one on cuda:0)."""
    dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    assert _cuda.cuDeviceGet(ctypes.byref(dev), device) == 0
    assert _cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) == 0
    return bool(active.value)


result = {}
torch.manual_seed(0)
torch.cuda.memory._record_memory_history(max_entries=100000)

# 1. Work on cuda:1 only, without torch.cuda.set_device: allocations, a
#    large block, frees, empty_cache. cuda:0 is never used.
a = torch.randn(1 << 20, device="cuda:1")
b = a * 2
big = torch.empty(50 << 20, dtype=torch.uint8, device="cuda:1")
small = [torch.empty(1000 * (i + 1), device="cuda:1") for i in range(20)]
del b, big
small = small[::2]
torch.cuda.synchronize(1)
torch.cuda.empty_cache()
result["context_on_0_after_cuda1_work"] = has_context(0)
result["context_on_1_after_cuda1_work"] = has_context(1)
result["stats1_after_cuda1_work"] = dict(torch.cuda.memory_stats(1))
result["allocated0_after_cuda1_work"] = torch.cuda.memory_allocated(0)

# 2. Both devices, then per-device peaks: resetting device 1's peak leaves
#    device 0's alone.
c = torch.empty(64 << 20, dtype=torch.uint8, device="cuda:0")
d = torch.empty(32 << 20, dtype=torch.uint8, device="cuda:1")
del c, d
torch.cuda.reset_peak_memory_stats(1)
result["peaks_after_reset_of_1"] = [torch.cuda.max_memory_allocated(0),
                                    torch.cuda.max_memory_allocated(1)]

# 3. record_stream onto a stream of the other device: the block (on cuda:0)
#    must not be reused while that stream (on cuda:1) still runs; the
#    allocator records its event on the stream's device.
(result["cross_device_reused_while_busy"],
 result["cross_device_reused_after_sync"]) = record_stream_reuse(0, 1, touch=False)

# 4. OOM on cuda:1 under a memory fraction: the message names GPU 1 and
#    the observers get device 1.
seen = []
torch._C._cuda_attach_out_of_memory_observer(lambda *args: seen.append([int(v) for v in args[:3]]))
torch.cuda.set_per_process_memory_fraction(0.02, device=1)
try:
    torch.empty(3 << 30, dtype=torch.uint8, device="cuda:1")
    result["oom_on_1"] = "no OOM"
except torch.OutOfMemoryError as e:
    msg = str(e)
    result["oom_on_1"] = msg[:msg.index(" has a total capacity")]
result["oom_observer_on_1"] = seen
torch.cuda.set_per_process_memory_fraction(1.0, device=1)

# 5. Stats and history per device.
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
result["stats0"] = dict(torch.cuda.memory_stats(0))
result["stats1"] = dict(torch.cuda.memory_stats(1))
result["summary1_lines"] = len(torch.cuda.memory_summary(1).splitlines())
snap = torch.cuda.memory._snapshot()
result["segments_per_device"] = [sum(1 for s in snap["segments"] if s["device"] == i) for i in (0, 1)]
result["trace_actions_per_device"] = [
    sorted({e["action"] for e in trace}) for trace in snap["device_traces"][:2]]
result["trace_lengths"] = [len(trace) for trace in snap["device_traces"][:2]]
print(json.dumps(result))
