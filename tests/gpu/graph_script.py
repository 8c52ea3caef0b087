"""CUDA graph capture and replay, unchanged PyTorch code, under the native
allocator or cachealloc (argv[1]: native | cachealloc). Prints one JSON line
of what it saw, for tests/gpu/test_graphs_gpu.py to compare.

What it exercises: torch.cuda.graph (a private pool per capture: segments
reserved during capture, frees inside the capture reused inside it), replay
with new inputs against eager results, a second capture sharing the first's
pool, frees of blocks used on other streams during a capture (deferred, as
native), torch.cuda.make_graphed_callables (forward and backward graphs),
and the graphs' memory going back at deletion and empty_cache.

Addresses differ between processes, so segments are compared by shape:
(pool id, type, size, blocks' sizes and states), as sorted lists.
"""
import json
import sys

import torch

from segment_shapes import shapes

mode = sys.argv[1]
if mode == "cachealloc":
    import cachealloc

    cachealloc.install()
    # The glue, not a quiet fallback to plain mode, on the CUDA backend.
    assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    assert cachealloc.backend() == "cuda", cachealloc.backend()

dev = torch.device("cuda")
out = {"mode": mode}


def state_of(t_ptr):
    for s in torch.cuda.memory_snapshot():
        for b in s["blocks"]:
            if b["address"] == t_ptr:
                return b["state"]
    return None


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 512)).to(dev)
static_in = torch.randn(64, 512, device=dev)

# Warm-up on a side stream, as PyTorch's documentation prescribes.
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        model(static_in)
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()

# A block used on another stream, freed during the capture: native defers
# its event until no capture is underway.
used_elsewhere = torch.empty(1 << 20, device=dev)
other = torch.cuda.Stream()
used_elsewhere.record_stream(other)
deferred_ptr = used_elsewhere.data_ptr()

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    h = model[0](static_in)
    tmp = h * 2.0            # freed inside the capture: its memory is reused there
    del tmp
    static_out = model[2](model[1](h))
    del h
    del used_elsewhere       # deferred: no event may be recorded during capture
    inside = torch.empty(1 << 18, device=dev)
    inside.record_stream(other)  # a use noted during the capture...
    del inside                   # ...dropped when the deferred events go in
out["pool_id_nonzero"] = list(g.pool()) != [0, 0]
out["deferred_state_after_capture"] = state_of(deferred_ptr)
out["segments_after_capture"] = shapes(torch.cuda.memory_snapshot())
out["stats_after_capture"] = torch.cuda.memory_stats()

# Replays with new inputs give the eager results.
gen = torch.Generator(device=dev).manual_seed(1)
matches, checksums = [], []
for _ in range(3):
    static_in.copy_(torch.randn(64, 512, device=dev, generator=gen))
    g.replay()
    expected = model(static_in)
    matches.append(bool(torch.allclose(static_out, expected, rtol=1e-4, atol=1e-4)))
    checksums.append(round(float(static_out.double().sum()), 3))
out["replay_matches_eager"] = matches
out["replay_checksums"] = checksums
torch.cuda.synchronize()
# The first malloc after the capture inserts the deferred event (stream
# `other` is idle: it completes), so the block is cached.
probe = torch.empty(16, device=dev)
torch.cuda.synchronize()
probe2 = torch.empty(16, device=dev)
out["deferred_state_after_malloc"] = state_of(deferred_ptr)
del probe, probe2

# A second graph sharing the first graph's pool.
g2 = torch.cuda.CUDAGraph()
with torch.cuda.graph(g2, pool=g.pool()):
    out2 = static_out.relu() + 1.0
g2.replay()
g.replay()
g2.replay()
out["shared_pool_ok"] = bool(torch.allclose(out2, static_out.relu() + 1.0))
out["segments_two_graphs"] = shapes(torch.cuda.memory_snapshot())
out["stats_two_graphs"] = torch.cuda.memory_stats()

# make_graphed_callables: forward and backward captured, sharing a pool.
torch.manual_seed(2)
mlp = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(),
                          torch.nn.Linear(256, 256)).to(dev)
sample = torch.randn(32, 256, device=dev, requires_grad=True)
graphed = torch.cuda.make_graphed_callables(mlp, (sample,))
x = torch.randn(32, 256, device=dev, requires_grad=True)
y = graphed(x)
y.sum().backward()
ref_x = x.detach().clone().requires_grad_(True)
mlp.zero_grad()
ref = mlp(ref_x)
ref.sum().backward()
out["graphed_forward_ok"] = bool(torch.allclose(y, ref, rtol=1e-4, atol=1e-4))
out["graphed_backward_ok"] = bool(torch.allclose(x.grad, ref_x.grad, rtol=1e-4, atol=1e-4))
out["stats_graphed_callables"] = torch.cuda.memory_stats()
del graphed, y, ref, x, ref_x, sample

# Deleting the graphs releases their pool; empty_cache returns its segments
# (static_out and out2 keep their blocks, so their segments stay).
del g, g2
torch.cuda.synchronize()
torch.cuda.empty_cache()
out["segments_graphs_deleted"] = shapes(torch.cuda.memory_snapshot())
del static_out, out2
torch.cuda.empty_cache()
out["segments_final"] = shapes(torch.cuda.memory_snapshot())
out["final_stats"] = torch.cuda.memory_stats()
print(json.dumps(out))
