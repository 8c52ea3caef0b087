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
set_per_process_memory_fraction; memory_allocated & co. return 0.
`.item()` and anything that reads a value get a placeholder (1, 1.0 or True).
Refused: torch.compile; ops whose output shape depends on the data.
What scripts call around their tensors (DataLoader, GradScaler, memory
history, NVTX ...): script_support.py; attention: sdpa_dispatch.py.
"""
from __future__ import annotations

import collections
import contextlib
import types

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from . import backend_kernels, plain_tensor, script_support
from ..kernels import gpu_model, sdpa_dispatch
from .cpu_side import CpuSide
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


# cuDNN of the GPU machine's torch 2.11+cu130 (the bundled table's), for a
# table that does not say.
_CUDNN_VERSION = gpu_model.TARGET_CUDNN_VERSION

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

    MODES = ("cpu-init", "fake")

    def __init__(self, gpu, mode: str = "cpu-init"):
        """mode: "cpu-init" (CPU tensors real, cpu_side.py) or "fake" (every
        tensor fake)."""
        if mode not in self.MODES:
            raise ValueError(f"mode {mode!r} is none of {self.MODES}")
        self.gpu = gpu
        self.mode = mode
        self.recording = Recording(gpu)
        self.cpu_side = CpuSide() if mode == "cpu-init" else None
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
        # torch.backends.cudnn.version() asks ATen's CUDA library, which a
        # CPU torch lacks (T5 under torch 2.11 failed on it): answer the
        # cuDNN version the workspace table was measured with, the GPU's.
        table = self.recording.cudnn.table
        cudnn_version = (table.get("cudnn") if isinstance(table, dict) else None) or _CUDNN_VERSION
        self._set(torch.backends.cudnn, "version", lambda: int(cudnn_version))
        script_support.install(self)
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
        self._set(torch.nn.functional, "scaled_dot_product_attention",
                  sdpa_dispatch.sdpa(self.recording, tuple(self.gpu.capability)))
        # linear's bias add: in place as for plain tensors (plain_tensor.py).
        self._set(torch.nn.functional, "linear",
                  self.recording.rules.linear(torch.nn.functional.linear))
        # torch.tensor(data, device="cuda") builds the data on the CPU and then
        # moves it; with only_lift_cpu_tensors off (FakeTensorMode sets it only
        # when torch.cuda.is_available() is False, and here it says True) the
        # move runs below the dispatch modes and reaches the real CUDA
        # backend, which this process lacks. On, the CPU tensor is lifted into
        # FakeTensorMode first and the move is an aten._to_copy to "cuda" that
        # RecordingMode sees: one storage of the data's size, as on a GPU.
        self._lift_cpu = torch._C._only_lift_cpu_tensors()
        torch._C._set_only_lift_cpu_tensors(True)
        # A CPU build decomposes ops a CUDA build runs whole (backend_kernels.py).
        self._cuda_dispatch = backend_kernels.CudaBuildDispatch()
        self._cuda_dispatch.install()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.fake_mode.__enter__()
        if self.cpu_side is not None:
            self.cpu_side.fake_mode = self.fake_mode
            self.cpu_side.fills.install(self._set)
            self.recording.known.shadows.before_real_read = self.cpu_side.fills.before_read
        self.recording.rules.calibrate()
        # Each optimizer step clears loop_guard's counts of placeholder reads.
        from torch.optim.optimizer import register_optimizer_step_post_hook
        self._step_hook = register_optimizer_step_post_hook(self.recording.reads.step)
        self.rec_mode = RecordingMode(self.recording, self.cpu_side)
        self.rec_mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.recording.active = False
        if self.cpu_side is not None:
            self.cpu_side.fills.end()     # before the wrappers go: a kept storage gets its values
        self._step_hook.remove()
        self.rec_mode.__exit__(*exc)
        self.fake_mode.__exit__(*exc)
        torch._C._set_only_lift_cpu_tensors(self._lift_cpu)
        self._cuda_dispatch.remove()
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
