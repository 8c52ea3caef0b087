"""torch.compile(mode="reduce-overhead"), unchanged PyTorch code, under the
native allocator or cachealloc (argv[1]: native | cachealloc). Its CUDA
graph trees record graphs into one private pool and, to record a new graph
after replaying others, checkpoint the pool and put it back
(getCheckpointState, setCheckpointPoolState, checkPoolLiveAllocations),
which a plain pluggable allocator refuses. Prints one JSON line for
tests/gpu/test_compile_gpu.py: results, how often each checkpoint call
ran, memory stats and the pool's segments by shape."""
import json
import sys

import torch

from segment_shapes import shapes as _shapes

mode = sys.argv[1]
if mode == "cachealloc":
    import cachealloc

    cachealloc.install()
    # The glue, not a quiet fallback to plain mode, on the CUDA backend.
    assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    assert cachealloc.backend() == "cuda", cachealloc.backend()

dev = torch.device("cuda")
out = {"mode": mode}

# Count the allocator calls the graph trees make (looked up at call time).
calls = {}
for name in ("_cuda_getCheckpointState", "_cuda_setCheckpointPoolState",
             "_cuda_checkPoolLiveAllocations"):
    original = getattr(torch._C, name)

    def counted(*args, _original=original, _name=name, **kwargs):
        calls[_name] = calls.get(_name, 0) + 1
        return _original(*args, **kwargs)

    setattr(torch._C, name, counted)


def shapes(segments):
    return _shapes(segments, pool_id_only_if_private=True)


torch.manual_seed(0)
w1 = torch.randn(256, 512, device=dev) / 16
w2 = torch.randn(512, 128, device=dev) / 16


def f(x):
    return (x @ w1).relu()


def g(y):
    return (y @ w2).tanh() * 2.0


# Segment reservations and returns, in order, for diagnosing a difference.
torch.cuda.memory._record_memory_history(max_entries=1000000)
cf = torch.compile(f, mode="reduce-overhead")
cg = torch.compile(g, mode="reduce-overhead")
gen = torch.Generator(device=dev).manual_seed(1)
results = []
for i in range(10):
    torch.compiler.cudagraph_mark_step_begin()
    x = torch.randn(64, 256, device=dev, generator=gen)
    y = cf(x)
    # From step 5 on g sees half of f's output: a new graph for g, recorded
    # after f's graph was replayed (the pool is checkpointed and restored).
    rows = 64 if i < 5 else 32
    z = cg(y[:rows])
    expected = g(f(x)[:rows])
    results.append(bool(torch.allclose(z, expected, rtol=1e-3, atol=1e-3)))
    del x, y, z, expected
out["results"] = results

# A training step: forward and backward graphs, two batch sizes.
torch.manual_seed(2)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),
                            torch.nn.Linear(256, 128)).to(dev)
cmodel = torch.compile(model, mode="reduce-overhead")
losses = []
for i in range(8):
    torch.compiler.cudagraph_mark_step_begin()
    batch = 32 if i % 4 < 2 else 16
    inp = torch.randn(batch, 128, device=dev, generator=gen)
    loss = cmodel(inp).square().mean()
    loss.backward()
    losses.append(round(float(loss), 4))
    model.zero_grad(set_to_none=True)
out["losses"] = losses
out["calls"] = calls
torch.cuda.synchronize()
out["segments"] = shapes(torch.cuda.memory_snapshot())
out["stats"] = torch.cuda.memory_stats()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
out["segment_events"] = [[e["action"], e["size"]] for e in trace
                         if e["action"] in ("segment_alloc", "segment_free", "oom")]
out["actions"] = {}
for e in trace:
    out["actions"][e["action"]] = out["actions"].get(e["action"], 0) + 1
print(json.dumps(out))
