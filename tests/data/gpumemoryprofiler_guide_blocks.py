"""The code blocks of the GPUMemoryProfiler usage guide, in its order
(../shared/reference/user-docs/gpumemoryprofiler-usage.txt; the user's
documented examples, quoted only to run them: tests/gpu/test_gpumemoryprofiler_gpu.py).

Each block is the guide's text unchanged except for two things: the import
`from gpumemprof import GPUMemoryProfiler` reads `from cachealloc.profiler
import GPUMemoryProfiler`, and the indentation the guide's text lost is
restored. Blocks run in order in one namespace; the test defines the names
they assume (train_epoch, dataloader, my_function, buggy_function,
create_tensors).
"""

BLOCKS = [
    ("Profiling a function", '''\
import torch
from cachealloc.profiler import GPUMemoryProfiler
def train_step(model, data):
    output = model(data)
    loss = output.sum()
    loss.backward()
    return loss
profiler = GPUMemoryProfiler(device="cuda:0")
model = torch.nn.Linear(1000, 1000).cuda()
data = torch.randn(32, 1000).cuda()
result = profiler.profile_function(train_step, model, data)
print(f"Memory allocated: {result.memory_allocated / 1024**2:.2f} MB")
print(f"Peak memory: {result.peak_memory_usage() / 1024**2:.2f} MB")
print(f"Execution time: {result.execution_time:.4f}s")
'''),
    ("Using context manager", '''\
with profiler.profile_context(name="data_loading"):
    data = torch.randn(1000, 1000).cuda()
    processed = data @ data.T
    result = processed.softmax(dim=-1)
'''),
    ("Continuous monitoring", '''\
profiler.start_monitoring(interval=0.1) # Sample every 100ms
# Run your training loop
for epoch in range(10):
    train_epoch(model, dataloader)
profiler.stop_monitoring()
# Access collected snapshots
print(f"Collected {len(profiler.snapshots)} snapshots")
'''),
    ("Configuration options", '''\
profiler = GPUMemoryProfiler(
    device="cuda:0", # GPU device to profile
    track_tensors=True, # Count tensor creation/deletion
    track_cpu_memory=True, # Track CPU memory alongside GPU
    collect_stack_traces=False # Collect stack traces (expensive)
)
'''),
    ("Understanding profile results", '''\
result = profiler.profile_function(my_function)
# Memory metrics
result.memory_allocated # Bytes allocated during execution
result.memory_freed # Bytes freed during execution
result.memory_diff() # Net memory change
result.peak_memory_usage() # Maximum memory used
# Tensor tracking (if enabled)
result.tensors_created # Number of tensors created
result.tensors_deleted # Number of tensors deleted
# Timing
result.execution_time # Total execution time in seconds
# Detailed snapshots
result.memory_before # MemorySnapshot before execution
result.memory_after # MemorySnapshot after execution
result.memory_peak # MemorySnapshot at peak usage
'''),
    ("Memory snapshots", '''\
snapshot = result.memory_after
snapshot.allocated_memory # Actual tensor data
snapshot.reserved_memory # CUDA memory pool size
snapshot.active_memory # Active allocations from allocator
snapshot.inactive_memory # Cached but unused memory
snapshot.cpu_memory # CPU memory usage (if tracked)
snapshot.timestamp # When snapshot was taken
snapshot.operation # Operation being profiled
snapshot.device_id # GPU device index
'''),
    ("Getting profiling summaries", '''\
summary = profiler.get_summary()
print(f"Total functions profiled: {summary['total_functions_profiled']}")
print(f"Total function calls: {summary['total_function_calls']}")
print(f"Peak memory usage: {summary['peak_memory_usage'] / 1024**2:.2f} MB")
print(f"Net memory change: {summary['net_memory_change'] / 1024**2:.2f} MB")
# Per-function statistics
for func_name, stats in summary['function_summaries'].items():
    print(f"{func_name}:")
    print(f" Calls: {stats['call_count']}")
    print(f" Avg time: {stats['avg_time']:.4f}s")
    print(f" Avg memory: {stats['avg_memory_allocated'] / 1024**2:.2f} MB")
    print(f" Peak memory: {stats['peak_memory'] / 1024**2:.2f} MB")
'''),
    ("Peak memory tracking", '''\
# Peak memory is reset before each profile
result = profiler.profile_function(my_function)
# Get peak memory that occurred during this specific execution
peak = result.peak_memory_usage()
'''),
    ("Error handling", '''\
try:
    result = profiler.profile_function(buggy_function)
except Exception as e:
    # Memory snapshot was still captured
    print(f"Function failed but memory was tracked")
    # Result is stored in profiler.results
    last_result = profiler.results[-1]
    print(f"Memory before error: {last_result.memory_after.allocated_memory}")
    raise
'''),
    ("Clearing results", '''\
profiler.clear_results()
# All results, snapshots, and statistics are cleared
# Peak memory stats are reset
# New baseline snapshot is captured
'''),
    ("Advanced: Tensor tracking", '''\
profiler = GPUMemoryProfiler(track_tensors=True)
result = profiler.profile_function(create_tensors)
print(f"Tensors created: {result.tensors_created}")
print(f"Tensors deleted: {result.tensors_deleted}")
'''),
    ("Device management", '''\
# All of these work
profiler = GPUMemoryProfiler(device="cuda:0")
profiler = GPUMemoryProfiler(device=0)
profiler = GPUMemoryProfiler(device=torch.device("cuda:0"))
profiler = GPUMemoryProfiler(device=None) # Auto-detect current device
'''),
]
