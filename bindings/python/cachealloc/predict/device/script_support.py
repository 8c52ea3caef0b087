"""What a training script calls around its tensors that has no CUDA behind it
in a CPU torch, or that would steer the fake run away from what the GPU
run does; installed by FakeCudaDevice (fake_device.py) for the recording's
duration, each with why:

- Tensor.record_stream, pin_memory/is_pinned: accepted (host-side or
  timing-only effects);
- GradScaler: every step taken (found_inf has no value here);
- torch.isnan / isinf / isfinite: answer "finite" (known_values.py);
- DataLoader: batches made in-process (no shared memory for fake tensors);
- memory history and snapshots: the recording so far;
- nn.DataParallel's scatter: onto the one fake GPU;
- recurrent layers: recorded unrolled and counted as not modelled;
- NVTX: no-ops; torch.cuda.empty_cache: counted and replayed;
- libraries' "is this a FakeTensor (traced)?" checks: no, for a tensor whose
  value is known (tracing_checks.py).
"""
from __future__ import annotations

import torch

from . import known_values, trace_writer, tracing_checks
from .recorder import PredictionRefused


def _record_stream(self, stream):
    """Tensor.record_stream on the fake device: accepted, nothing recorded."""
    if getattr(stream, "number", None) is None:        # not a fake stream
        raise TypeError(f"record_stream() expects a torch.cuda.Stream, got {type(stream).__name__}")


def _scatter_one(tensor, devices=None, chunk_sizes=None, dim=0, streams=None, *, out=None):
    """comm.scatter onto the fake device's one GPU."""
    devices = list(devices or [0])
    if len(devices) != 1:
        raise PredictionRefused(f"scatter over {len(devices)} GPUs: the fake device has one")
    return (tensor.to(torch.device("cuda", 0)),)


class _NoNvtx:
    """torch.cuda.nvtx's library handle on the fake device: every call a no-op
    (range ids 0, nesting depth 0)."""

    def __getattr__(self, name):
        return lambda *a, **k: 0


def _in_process_iterator(self):
    """DataLoader._get_iterator with num_workers taken as 0."""
    from torch.utils.data import dataloader
    workers, timeout = self.num_workers, self.timeout
    self.num_workers, self.timeout = 0, 0
    try:
        return dataloader._SingleProcessDataLoaderIter(self)
    finally:
        self.num_workers, self.timeout = workers, timeout


def _scaler_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
    """GradScaler._maybe_opt_step with no inf or NaN found (the fake device
    has no values; a normal step's gradients are finite)."""
    return optimizer.step(*args, **kwargs)


def _pin_memory(original):
    """Tensor.pin_memory: a host tensor stays as it is (fake, or real in
    cpu-init mode: pinning is CUDA's host allocator, absent here)."""
    def pin_memory(self, *args, **kwargs):
        if self.device.type == "cpu":
            return self
        return original(self, *args, **kwargs)
    return pin_memory


def _is_pinned(original):
    """Tensor.is_pinned: a host tensor counts as pinned (pin_memory kept it)."""
    def is_pinned(self, *args, **kwargs):
        if self.device.type == "cpu":
            return True
        return original(self, *args, **kwargs)
    return is_pinned


def _counted(recording, what, original):
    """original, counting its calls on cuda tensors as not modelled."""
    def call(*args, **kwargs):
        if any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args):
            recording.unmodelled[what] = recording.unmodelled.get(what, 0) + 1
        return original(*args, **kwargs)
    return call


def _count_empty_cache(recording):
    """torch.cuda.empty_cache: counted and replayed where the script called
    it (recorder EMPTY: the replay releases every cached segment no block
    uses, as the GPU's allocator does)."""
    def empty_cache():
        recording.empty_cache_calls += 1
        recording.empty_cache()
    return empty_cache


def install(dev) -> None:
    """Patches for the recording (dev: a FakeCudaDevice; dev._set undoes
    each on exit)."""
    # Tensor.record_stream takes a real torch.Stream; the fake streams are
    # not. On a GPU it only defers the block's reuse until that stream's
    # queued work is done (an event), which a replay without timing
    # cannot see: accepted, and the free is replayed at the last use.
    dev._set(torch.Tensor, "record_stream", _record_stream)
    # GradScaler skips optimizer.step() when found_inf's .item() is not
    # 0; the placeholder (1.0) would skip every step, and the optimizer
    # state would never be allocated. A normal step has finite
    # gradients: the step is always taken.
    from torch.amp import grad_scaler
    dev._set(grad_scaler.GradScaler, "_maybe_opt_step", _scaler_opt_step)
    # NaN/inf checks answer "finite" (known_values.py).
    for name in known_values.CHECKS:
        for owner in (torch, torch.Tensor):
            if hasattr(owner, name):
                dev._set(owner, name, dev.recording.known.wrap(getattr(owner, name)))
    # DataLoader worker processes would collate fake tensors through
    # shared memory, which fake tensors have none of; loading is host
    # work that asks the device allocator for nothing: batches are made
    # in this process instead (the same batches, in the same order).
    from torch.utils.data import dataloader
    dev._set(dataloader.DataLoader, "_get_iterator", _in_process_iterator)
    # Memory history: recording is always on here; a snapshot the script
    # dumps is the prediction's request stream so far (device_traces).
    import torch.cuda.memory as cuda_memory
    dev._set(cuda_memory, "_record_memory_history", lambda *a, **k: None)
    dev._set(cuda_memory, "_dump_snapshot", lambda filename="dump_snapshot.pickle": trace_writer.write(
        filename, list(dev.recording.events), dict(dev.recording.fallible)))
    dev._set(cuda_memory, "_snapshot", lambda device=None, *a, **k: trace_writer.snapshot_dict(
        list(dev.recording.events), dict(dev.recording.fallible)))
    # nn.DataParallel on the one fake GPU: its scatter is a move to that
    # device (torch._C._scatter is in CUDA builds only).
    from torch.nn.parallel import comm
    dev._set(comm, "scatter", _scatter_one)
    # Recurrent layers: a GPU runs them as one cuDNN call (workspace and
    # reserve space sized by cuDNN), a CPU torch unrolls them per time
    # step: recorded as unrolled, counted, and the answer says so.
    for name in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        what = f"nn.{name.upper().replace('_TANH', '').replace('_RELU', '')} (cuDNN RNN)"
        dev._set(torch._VF, name, _counted(dev.recording, what, getattr(torch._VF, name)))
    # NVTX ranges and marks (profiler annotations): no-ops.
    import torch.cuda.nvtx as nvtx
    dev._set(nvtx, "_nvtx", _NoNvtx())
    # empty_cache() is not replayed (the engine replays requests only):
    # counted, and the answer says so.
    dev._set(torch.cuda, "empty_cache", _count_empty_cache(dev.recording))
    # Pinned host memory comes from CUDA's host allocator, not the device
    # caching allocator, and FakeTensorMode has no _pin_memory: a fake
    # host tensor stays as it is (DataLoader(pin_memory=True) calls this,
    # also from its pinning thread, where no dispatch mode is pushed).
    dev._set(torch.Tensor, "pin_memory", _pin_memory(torch.Tensor.pin_memory))
    dev._set(torch.Tensor, "is_pinned", _is_pinned(torch.Tensor.is_pinned))
    # On the GPU the script's tensors are plain: a library that takes a
    # FakeTensor for a trace (and skips its value checks) is told no where
    # the value it would check is known.
    tracing_checks.install(dev)
