"""The fake CUDA device: tensors on device "cuda" with shapes and no data
(FakeTensorMode), and torch.cuda answering as the target GPU would. Unlike
`cachealloc run --backend simulated`, which allocates for real, nothing here
allocates device memory: each storage is only recorded (recorder.py).

Needs guard.load() in this process before torch was imported (worker.py).

What answers as the target GPU: torch.cuda.is_available() (True),
device_count() (1), current_device(), get_device_properties() (name,
total_memory, major/minor, multi_processor_count), get_device_name/
get_device_capability, mem_get_info() (free = total - assumed context),
is_bf16_supported(). Streams: torch.cuda.Stream()/stream() work and
allocations under them carry that stream. No-ops: synchronize, manual_seed,
empty_cache, set_per_process_memory_fraction; memory_allocated & co. return 0.
`.item()` and anything that reads a value get a placeholder (1, 1.0 or True).
Refused: torch.compile; ops whose output shape depends on the data.
"""
from __future__ import annotations

import collections
import contextlib
import types

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from . import gpu_model, known_values, plain_tensor, trace_writer
from .recorder import PredictionRefused, Recording, RecordingMode


class _FakeStream:
    _count = 0

    def __init__(self, device=None, priority=0, **kwargs):
        _FakeStream._count += 1
        self.number = _FakeStream._count
        self.device = torch.device("cuda", 0)
        self.priority = priority

    def wait_stream(self, other): pass
    def wait_event(self, event): pass
    def record_event(self, event=None): return event or _FakeEvent()
    def synchronize(self): pass
    def query(self): return True
    def __eq__(self, other): return isinstance(other, _FakeStream) and other.number == self.number
    def __hash__(self): return self.number


class _DefaultStream(_FakeStream):
    def __init__(self):
        self.number = 0
        self.device = torch.device("cuda", 0)
        self.priority = 0


class _FakeEvent:
    def __init__(self, *a, **k): pass
    def record(self, stream=None): pass
    def wait(self, stream=None): pass
    def synchronize(self): pass
    def query(self): return True
    def elapsed_time(self, other): return 0.0


def _autocast_cast(t, dtype):
    """autocast's cached_cast for an op on the lower-precision list: a
    floating tensor on cuda (not fp64) becomes `dtype` (a new tensor);
    anything else passes."""
    if (isinstance(t, torch.Tensor) and t.device.type == "cuda" and t.is_floating_point()
            and t.dtype not in (torch.float64, dtype)):
        return t.to(dtype)
    return t


def _record_stream(self, stream):
    """Tensor.record_stream on the fake device: accepted, nothing recorded."""
    if not isinstance(stream, _FakeStream):
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
    def pin_memory(self, *args, **kwargs):
        from torch._subclasses.fake_tensor import FakeTensor
        if isinstance(self, FakeTensor):
            return self
        return original(self, *args, **kwargs)
    return pin_memory


def _is_pinned(original):
    def is_pinned(self, *args, **kwargs):
        from torch._subclasses.fake_tensor import FakeTensor
        if isinstance(self, FakeTensor):
            return self.device.type == "cpu"
        return original(self, *args, **kwargs)
    return is_pinned


_apply_memo = None   # id(old parameter or buffer) -> its converted one, during one .to()


def _overwrite_apply(self, fn, recurse=True):
    """Module._apply without swapping tensors (which fake parameters
    refuse): each converted parameter is a new Parameter, as with
    torch.__future__.set_overwrite_module_params_on_conversion(True). An
    optimizer built before .to("cuda") keeps the old parameters, as it would
    under that setting. A parameter shared by several modules (tied
    weights: GPT-2's embedding and LM head) is converted once and stays
    shared, as native's in-place conversion keeps it: converting it per
    module would add a copy, its gradient and its optimizer state."""
    global _apply_memo
    top = _apply_memo is None
    if top:
        _apply_memo = {}
    memo = _apply_memo
    try:
        if recurse:
            for module in self.children():
                module._apply(fn)
        for key, param in self._parameters.items():
            if param is None:
                continue
            if id(param) in memo:
                self._parameters[key] = memo[id(param)][1]
                continue
            with torch.no_grad():
                applied = fn(param)
            if applied is param:
                continue
            new = torch.nn.Parameter(applied, param.requires_grad)
            if param.grad is not None:
                with torch.no_grad():
                    new.grad = fn(param.grad)
            memo[id(param)] = (param, new)   # the old one kept: its id stays unique
            self._parameters[key] = new
        for key, buf in self._buffers.items():
            if buf is None:
                continue
            if id(buf) not in memo:
                memo[id(buf)] = (buf, fn(buf))
            self._buffers[key] = memo[id(buf)][1]
        return self
    finally:
        if top:
            _apply_memo = None


@contextlib.contextmanager
def _patched(obj, name, value, saved):
    saved.append((obj, name, getattr(obj, name, None), hasattr(obj, name)))
    setattr(obj, name, value)
    yield


class FakeCudaDevice:
    """Context manager: inside it the program runs on the fake device and
    `recording` fills up."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.recording = Recording(gpu)
        self._saved = []
        self._stream_stack = []

    # -- torch.cuda as the target GPU ------------------------------------
    def _props(self):
        g = self.gpu
        return types.SimpleNamespace(
            name=g.product or g.name, total_memory=g.total_memory, major=g.capability[0],
            minor=g.capability[1], multi_processor_count=g.multi_processor_count,
            is_integrated=False, is_multi_gpu_board=False, L2_cache_size=50 << 20,
            gcnArchName="", uuid="fake", warp_size=32, max_threads_per_multi_processor=2048)

    def _set(self, obj, name, value):
        self._saved.append((obj, name, obj.__dict__.get(name, _MISSING) if isinstance(obj, type)
                            else getattr(obj, name, _MISSING)))
        setattr(obj, name, value)

    def _unmodelled(self, what, original):
        rec = self.recording

        def call(*args, **kwargs):
            if any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args):
                rec.unmodelled[what] = rec.unmodelled.get(what, 0) + 1
            return original(*args, **kwargs)
        return call

    def _dump_snapshot(self, filename="dump_snapshot.pickle"):
        trace_writer.write(filename, list(self.recording.events))

    def _empty_cache(self):
        self.recording.empty_cache_calls += 1

    def _stream_ctx(self, stream):
        dev = self

        @contextlib.contextmanager
        def ctx():
            before = dev.recording.stream
            dev.recording.stream = 0 if stream is None else stream.number
            try:
                yield
            finally:
                dev.recording.stream = before
        return ctx()

    def __enter__(self):
        g = self.gpu
        c = torch.cuda
        free = g.total_memory - g.context_bytes
        patches = {
            "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
            "set_device": lambda d: None, "synchronize": lambda d=None: None,
            "get_device_properties": lambda d=None: self._props(),
            "get_device_name": lambda d=None: g.product or g.name,
            "get_device_capability": lambda d=None: tuple(g.capability),
            "mem_get_info": lambda d=None: (free, g.total_memory),
            "is_bf16_supported": lambda including_emulation=True: g.capability >= (8, 0),
            "manual_seed": lambda s: None, "manual_seed_all": lambda s: None, "seed": lambda: None,
            "seed_all": lambda: None, "_lazy_init": lambda: None,
            "is_initialized": lambda: True, "init": lambda: None,
            "set_per_process_memory_fraction": lambda f, d=None: None,
            "memory_allocated": lambda d=None: 0, "max_memory_allocated": lambda d=None: 0,
            "memory_reserved": lambda d=None: 0, "max_memory_reserved": lambda d=None: 0,
            "reset_peak_memory_stats": lambda d=None: None,
            # The memory API reads as an empty allocator (every statistic 0):
            # the recording holds the answer, not the running script.
            "memory_stats": lambda d=None: collections.defaultdict(int),
            "memory_summary": lambda device=None, abbreviated=False: _SUMMARY,
            "memory_snapshot": lambda *a, **k: [], "list_gpu_processes": lambda d=None: _SUMMARY,
            "reset_max_memory_allocated": lambda d=None: None,
            "reset_max_memory_cached": lambda d=None: None,
            "reset_accumulated_memory_stats": lambda d=None: None,
            "memory_cached": lambda d=None: 0, "max_memory_cached": lambda d=None: 0,
            "utilization": lambda d=None: 0, "memory_usage": lambda d=None: 0,
            "get_arch_list": lambda: [f"sm_{g.capability[0]}{g.capability[1]}"],
            "Stream": _FakeStream, "Event": _FakeEvent, "stream": self._stream_ctx,
            "current_stream": lambda d=None: _FakeStream.__new__(_DefaultStream) if False else _DefaultStream(),
            "default_stream": lambda d=None: _DefaultStream(),
        }
        for name, value in patches.items():
            self._set(c, name, value)
        self._set(torch.nn.Module, "_apply", _overwrite_apply)
        # Tensor.record_stream takes a real torch.Stream; the fake streams are
        # not. On a GPU it only defers the block's reuse until that stream's
        # queued work is done (an event), which a replay without timing
        # cannot see: accepted, and the free is replayed at the last use.
        self._set(torch.Tensor, "record_stream", _record_stream)
        # GradScaler skips optimizer.step() when found_inf's .item() is not
        # 0; the placeholder (1.0) would skip every step, and the optimizer
        # state would never be allocated. A normal step has finite
        # gradients: the step is always taken.
        from torch.amp import grad_scaler
        self._set(grad_scaler.GradScaler, "_maybe_opt_step", _scaler_opt_step)
        # NaN/inf checks answer "finite" (known_values.py).
        for name in known_values.CHECKS:
            for owner in (torch, torch.Tensor):
                if hasattr(owner, name):
                    self._set(owner, name, self.recording.known.wrap(getattr(owner, name)))
        # DataLoader worker processes would collate fake tensors through
        # shared memory, which fake tensors have none of; loading is host
        # work that asks the device allocator for nothing: batches are made
        # in this process instead (the same batches, in the same order).
        from torch.utils.data import dataloader
        self._set(dataloader.DataLoader, "_get_iterator", _in_process_iterator)
        # Memory history: recording is always on here; a snapshot the script
        # dumps is the prediction's request stream so far (device_traces).
        import torch.cuda.memory as cuda_memory
        self._set(cuda_memory, "_record_memory_history", lambda *a, **k: None)
        self._set(cuda_memory, "_dump_snapshot", self._dump_snapshot)
        self._set(cuda_memory, "_snapshot", lambda device=None, *a, **k: trace_writer.snapshot_dict(
            list(self.recording.events)))
        # nn.DataParallel on the one fake GPU: its scatter is a move to that
        # device (torch._C._scatter is in CUDA builds only).
        from torch.nn.parallel import comm
        self._set(comm, "scatter", _scatter_one)
        # Recurrent layers: a GPU runs them as one cuDNN call (workspace and
        # reserve space sized by cuDNN), a CPU torch unrolls them per time
        # step: recorded as unrolled, counted, and the answer says so.
        for name in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
            self._set(torch._VF, name, self._unmodelled(
                f"nn.{name.upper().replace('_TANH', '').replace('_RELU', '')} (cuDNN RNN)",
                getattr(torch._VF, name)))
        # NVTX ranges and marks (profiler annotations): no-ops.
        import torch.cuda.nvtx as nvtx
        self._set(nvtx, "_nvtx", _NoNvtx())
        # empty_cache() is not replayed (the engine replays requests only):
        # counted, and the answer says so.
        self._set(torch.cuda, "empty_cache", self._empty_cache)
        # Pinned host memory comes from CUDA's host allocator, not the device
        # caching allocator, and FakeTensorMode has no _pin_memory: a fake
        # host tensor stays as it is (DataLoader(pin_memory=True) calls this,
        # also from its pinning thread, where no dispatch mode is pushed).
        self._set(torch.Tensor, "pin_memory", _pin_memory(torch.Tensor.pin_memory))
        self._set(torch.Tensor, "is_pinned", _is_pinned(torch.Tensor.is_pinned))
        # torch 2.11's FakeTensor primes a real GPU context (a real 1-element
        # tensor) when torch.cuda.is_available() says True: none exists here.
        import torch._subclasses.fake_tensor as fake_tensor_mod
        if hasattr(fake_tensor_mod, "init_gpu_context"):
            self._set(fake_tensor_mod, "init_gpu_context", lambda device=None: None)

        def refuse_compile(*a, **k):
            from .recorder import user_line
            raise PredictionRefused(
                f"torch.compile at {user_line()} is not supported on the fake device: Inductor "
                "decides its kernels' buffers when it compiles, which needs the real GPU; predict "
                "the eager step instead (remove torch.compile)")
        self._set(torch, "compile", refuse_compile)
        # Optimizers pick foreach kernels only for plain tensors; on a GPU the
        # parameters are plain, here they are FakeTensors: count them as plain.
        from torch.optim import optimizer as optim_mod
        from torch._subclasses.fake_tensor import FakeTensor
        self._foreach_types = optim_mod._foreach_supported_types
        if FakeTensor not in self._foreach_types:
            self._foreach_types.append(FakeTensor)
        self._set(torch.nn.functional, "scaled_dot_product_attention", self._sdpa())
        # linear's bias add: in place as for plain tensors (plain_tensor.py).
        self._set(torch.nn.functional, "linear",
                  self.recording.rules.linear(torch.nn.functional.linear))
        # SiLU's backward: the fused kernel, as for plain tensors (plain_tensor.py).
        self._set(torch.nn.functional, "silu", plain_tensor.silu(torch.nn.functional.silu))
        # torch.tensor(data, device="cuda") builds the data on the CPU and then
        # moves it; with only_lift_cpu_tensors off (FakeTensorMode sets it only
        # when torch.cuda.is_available() is False, and here it says True) the
        # move runs below the dispatch modes and reaches the real CUDA
        # backend, which this process lacks. On, the CPU tensor is lifted into
        # FakeTensorMode first and the move is an aten._to_copy to "cuda" that
        # RecordingMode sees: one storage of the data's size, as on a GPU.
        self._lift_cpu = torch._C._only_lift_cpu_tensors()
        torch._C._set_only_lift_cpu_tensors(True)
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.fake_mode.__enter__()
        self.recording.rules.calibrate()
        self.rec_mode = RecordingMode(self.recording)
        self.rec_mode.__enter__()
        return self

    def _sdpa(self):
        """F.scaled_dot_product_attention steered to the kernel the target GPU
        picks, with what torch's CUDA dispatch (attention.cpp) does before the
        kernel: autocast's casts (the function is on autocast's
        lower-precision list, so q, k, v and a float mask arrive cast), a
        bool mask made additive (where(mask, 0, -inf) in the query's dtype),
        the memory-efficient kernel's mask padded when its strides are not
        multiples of 8 (pad_bias), and flash's head dim padded to a multiple
        of 8 (pad_last_dim)."""
        original = torch.nn.functional.scaled_dot_product_attention
        cap = tuple(self.gpu.capability)
        aten = torch.ops.aten

        def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False):
            if query.device.type != "cuda":
                return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
            if torch.is_autocast_enabled("cuda"):
                low = torch.get_autocast_dtype("cuda")
                query, key, value, attn_mask = (_autocast_cast(t, low)
                                                for t in (query, key, value, attn_mask))
                with torch.autocast("cuda", enabled=False):
                    return sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
            backend = gpu_model.choose_sdp_backend(cap, query, key, value, attn_mask, dropout_p,
                                                   enable_gqa)
            self.recording.note_attention(backend, query, key, attn_mask, dropout_p, enable_gqa)
            if backend == gpu_model.SDP_MATH:
                return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                attn_mask = torch.where(attn_mask, 0.0, torch.scalar_tensor(
                    float("-inf"), dtype=query.dtype, device=attn_mask.device))
            if backend == gpu_model.SDP_FLASH:
                head = query.shape[-1]
                if head % 8:
                    pad = 8 - head % 8
                    query, key, value = (torch.nn.functional.pad(t, (0, pad))
                                         for t in (query, key, value))
                out = aten._scaled_dot_product_flash_attention(
                    query, key, value, dropout_p, is_causal, False,
                    scale=scale if scale is not None else head ** -0.5)[0]
                return out[..., :head] if head % 8 else out
            need_lse = torch.is_grad_enabled() and (
                query.requires_grad or key.requires_grad or value.requires_grad)
            if attn_mask is not None:
                if (attn_mask.stride(-1) != 1
                        or any(st % 8 for st in attn_mask.stride()[:-1])):
                    n = attn_mask.shape[-1]
                    attn_mask = torch.nn.functional.pad(attn_mask, (0, 8 - n % 8))[..., :n]
                attn_mask = attn_mask.expand(query.shape[0], query.shape[1], query.shape[2],
                                             key.shape[2])
            return aten._scaled_dot_product_efficient_attention(
                query, key, value, attn_mask, need_lse, dropout_p, is_causal, scale=scale)[0]
        return sdpa

    def __exit__(self, *exc):
        self.recording.active = False
        self.rec_mode.__exit__(*exc)
        self.fake_mode.__exit__(*exc)
        torch._C._set_only_lift_cpu_tensors(self._lift_cpu)
        from torch._subclasses.fake_tensor import FakeTensor
        if FakeTensor in self._foreach_types:
            self._foreach_types.remove(FakeTensor)
        for obj, name, old in reversed(self._saved):
            if old is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)
        self._saved.clear()
        return False


_MISSING = object()
_SUMMARY = "(cachealloc predict: a fake CUDA device; the prediction has the memory figures)"
