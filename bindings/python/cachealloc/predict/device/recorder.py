"""Records every storage a step creates and frees on the fake CUDA device,
in program order, as the caching allocator would be asked for it.

A TorchDispatchMode sits above FakeTensorMode and sees each aten op (backward
and optimizer ops included: autograd propagates dispatch modes to its
threads). After an op, each output tensor on device "cuda" whose storage is
new is an allocation of storage.nbytes() bytes (what at::empty asks the
allocator for; the engine rounds it as native does); zero-byte storages are
not requests (native returns a null pointer without recording). A free is
the storage's death: a weakref finalizer on the storage's Python object
(PyTorch keeps one Python object per live storage), which CPython's
reference counting runs at the moment the last tensor using it dies, so frees
land in program order between the allocations.

The events are (ALLOC, id, bytes, stream), (FREE, id, 0, stream) and
(EMPTY, NO_ID, 0, stream), the cache emptied where the GPU empties it
(cudnn.benchmark's find path, from the cuDNN table); ids are dense and
never reused. What a GPU allocates that no op output shows
(cuBLAS and cuBLASLt workspaces) is added here from gpu_model, cuDNN's
convolution workspaces from cudnn_workspace's measured table; ops whose
CUDA kernels allocate otherwise than their meta functions are recorded by
cuda_kernels' models; adds that a plain tensor would run in place follow
plain_tensor's rules; the attention kernel is chosen in fake_device.
"""
from __future__ import annotations

import threading
import weakref

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

from ..kernels import conv_format, cuda_kernels, cudnn_key, cudnn_workspace, gpu_model
from . import foreach_inplace, known_values, loop_guard, plain_tensor
from .failure import PredictionRefused, StopRecording, user_frame, user_line  # noqa: F401 (re-exported)

aten = torch.ops.aten
ALLOC, FREE, EMPTY = 0, 1, 2
NO_ID = -1                  # the id of an EMPTY event (no allocation has it)

# Ops that run a cuBLAS GEMM (and so take the (thread, stream) workspace).
_GEMM_OPS = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
             aten.addbmm.default, aten._addmm_activation.default, aten.addmv.default,
             aten.mv.default}
# Ops that may take the cuBLASLt path (addmm_out_cuda_impl with a bias).
_LT_OPS = {aten.addmm.default, aten._addmm_activation.default}


class Recording:
    """The event list and the bookkeeping of live storages."""

    def __init__(self, gpu):
        self.events = []            # (kind, id, bytes, stream)
        self.lines = []             # user line per ALLOC event index (when kept)
        self._next_id = 1
        self._live = {}             # id(storage object) -> allocation id
        self.stream = 0             # current stream number (fake_device sets it)
        self.gpu = gpu
        self.workspace_bytes = gpu_model.cublas_workspace_bytes(gpu.capability)
        self._workspaces = set()    # (thread kind, stream) that hold a cuBLAS workspace
        self.lt_workspace_bytes = gpu_model.cublaslt_workspace_bytes(gpu.capability)
        self._lt_workspaces = set() # (thread kind, stream) that hold a cuBLASLt workspace
        self.rules = plain_tensor.PlainTensorRules()
        self.known = known_values.KnownValues()
        self.reads = loop_guard.PlaceholderReads()
        self._main_thread = threading.get_ident()
        self.active = True
        self.placeholders = 0       # .item() calls answered with a placeholder
        table, why = cudnn_workspace.choose_table(gpu, torch.__version__)
        self.cudnn = cudnn_workspace.CudnnWorkspaces(table, why, torch.__version__)
        self._ws_plan = None        # [position, bytes, index] still to insert in the running convolution
        self._ws_key = None         # the running convolution's key
        # Workspace allocation id -> fallback group: under a limit a workspace
        # may fail without failing the step (trace_writer, docs/prediction.md).
        # One group per (key, index in the key's plan): the plan torch's
        # cuDNN path caches per convolution, so after one fallback the key's
        # later calls run the fallback plan and ask for no workspace.
        self.fallible = {}
        self._groups = {}           # (key, index) -> group number, dense
        self._op_allocs = 0         # the running convolution's own allocations so far
        self.conv_calls = []        # (key, first event index, end event index) per convolution
        self.unmodelled = {}        # what ran that the fake run records otherwise than a GPU -> calls
        self.empty_cache_calls = 0  # torch.cuda.empty_cache() calls (replayed: EMPTY events)
        self.attention = {}         # "kernel: dtype, head dim ..." -> scaled_dot_product_attention calls
        self.attention_bytes = {}   # the same key -> its largest call's output, bytes (the band's bound)
        self.op_calls = {}          # "aten.mm.default" -> calls that made an allocation (the band's coverage)
        self.workspaces = {}        # allocation id -> "cuBLAS" | "cuBLASLt" | "cuDNN" (peak_makeup.py)

    def alloc(self, nbytes: int, stream: int) -> int:
        aid = self._new_alloc(nbytes, stream)
        if self._ws_plan is not None:
            self._op_allocs += 1
            self._insert_workspaces(self._op_allocs)
        return aid

    def alloc_outside_op(self, nbytes: int) -> int:
        """A request on the current stream that the op's caller makes, not
        the op's kernel (a convolution's input copy): not counted among the
        op's own requests, whose count places the cuDNN table's workspaces."""
        return self._new_alloc(nbytes, self.stream)

    def _new_alloc(self, nbytes: int, stream: int) -> int:
        aid = self._next_id
        self._next_id += 1
        self.events.append((ALLOC, aid, int(nbytes), stream))
        return aid

    def begin_convolution(self, key: str) -> None:
        """A convolution op starts: its table workspaces (if the table has
        the key) go in after the op's own allocations as the GPU made them:
        each [position, bytes] right after the op's position-th allocation,
        allocated and freed at once."""
        self.conv_calls.append([key, len(self.events), None])
        plan = self.cudnn.plan(key)
        if plan is None:
            return
        self._ws_plan = [[position, size, index] for index, (position, size) in enumerate(plan)]
        empties = self.cudnn.empty_caches(key)
        if empties:
            # cudnn.benchmark's first call: the workspace right before each
            # empty cache is the find's timing workspace. Its fallback group
            # is its own (a timing workspace refused changes no plan); the
            # plans' workspaces are numbered as the later calls number them,
            # so a plan refused here is the fallback plan there too.
            finds = {before - 1 for _, before in empties}
            n = 0
            for w in self._ws_plan:
                if w[2] in finds:
                    w[2] = ("find", w[2])
                else:
                    w[2], n = n, n + 1
        # Where the GPU emptied the cache inside the call (cudnn.benchmark's
        # find, its first call): before the workspace that came after it.
        for n, (position, before) in enumerate(empties):
            self._ws_plan.insert(min(before + n, len(self._ws_plan)), [position, None, None])
        self._ws_key, self._op_allocs = key, 0
        self._insert_workspaces(0)

    def end_convolution(self) -> None:
        """The op is done; workspaces placed after more own allocations than
        the fake run made go at its end."""
        if self._ws_plan is not None:
            self._insert_workspaces(None)
            self._ws_plan = None
        self.conv_calls[-1][2] = len(self.events)

    def _insert_workspaces(self, done) -> None:
        while self._ws_plan and (done is None or self._ws_plan[0][0] <= done):
            _, size, index = self._ws_plan.pop(0)
            if size is None:
                self.empty_cache()
            elif size > 0:         # a zero-byte request is no request
                wid = self._new_alloc(size, self.stream)
                group = (self._ws_key, index)
                self.fallible[wid] = self._groups.setdefault(group, len(self._groups))
                self.workspaces[wid] = "cuDNN"
                self.events.append((FREE, wid, 0, self.stream))

    def empty_cache(self) -> None:
        """The allocator's cache emptied here (EMPTY event; the replay
        releases every unused cached segment, as torch.cuda.empty_cache()).
        Two in a row are one: nothing is cached again between them."""
        if self.active and (not self.events or self.events[-1][0] != EMPTY):
            self.events.append((EMPTY, NO_ID, 0, self.stream))

    def free(self, aid: int, stream: int) -> None:
        if self.active:
            self.events.append((FREE, aid, 0, stream))

    def track(self, t) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
            return
        s = t.untyped_storage()
        key = id(s)
        if key in self._live:
            return
        nbytes = s.nbytes()
        if nbytes == 0:
            return
        aid = self.alloc(nbytes, self.stream)
        self._live[key] = aid
        stream = self.stream
        weakref.finalize(s, self._died, key, aid, stream)

    def track_as_device(self, t, nbytes: int) -> None:
        """Records a device allocation of nbytes that lives as long as t's
        storage, for a kernel output the GPU keeps on the device while its
        meta implementation puts it elsewhere (cuDNN attention's Philox
        seed and offset)."""
        s = t.untyped_storage()
        key = id(s)
        if key in self._live or nbytes <= 0:
            return
        aid = self.alloc(nbytes, self.stream)
        self._live[key] = aid
        weakref.finalize(s, self._died, key, aid, self.stream)

    def allocation_of(self, t) -> "int | None":
        """The allocation id of a live cuda tensor's storage (None if it is
        not one this recording made)."""
        if t.device.type != "cuda":
            return None
        return self._live.get(id(t.untyped_storage()))

    def _died(self, key, aid, stream):
        self._live.pop(key, None)
        self.free(aid, stream)

    def gemm(self, lt: bool = False) -> None:
        """A cuBLAS call: its (thread, stream) gets a workspace the first
        time; a cuBLASLt call (lt) takes the handle, and so that workspace,
        first, then its own cuBLASLt workspace the first time."""
        in_backward = (threading.get_ident() != self._main_thread or
                       torch._C._current_autograd_node() is not None)
        key = ("backward" if in_backward else "main", self.stream)
        if key not in self._workspaces:
            self._workspaces.add(key)
            aid = self.alloc(self.workspace_bytes, self.stream)  # kept for the process's life
            self.workspaces[aid] = "cuBLAS"
        if lt and self.lt_workspace_bytes and key not in self._lt_workspaces:
            self._lt_workspaces.add(key)
            aid = self.alloc(self.lt_workspace_bytes, self.stream)  # kept for the process's life
            self.workspaces[aid] = "cuBLASLt"

    def note_attention(self, backend, query, key, attn_mask, dropout_p, enable_gqa) -> None:
        """Counts a scaled_dot_product_attention call by the kernel it was
        steered to and what decided it (printed with the answer)."""
        what = (f"{gpu_model.SDP_NAMES[backend]}: {str(query.dtype).replace('torch.', '')}, "
                f"head dim {query.shape[-1]}" + (", mask" if attn_mask is not None else "")
                + (", dropout" if dropout_p else "")
                + (f", {query.shape[-3]}/{key.shape[-3]} query/key heads"
                   if query.dim() >= 3 and key.dim() >= 3 and query.shape[-3] != key.shape[-3] else ""))
        self.attention[what] = self.attention.get(what, 0) + 1
        out_bytes = query.numel() // max(query.shape[-1], 1) * key.shape[-1] * query.element_size()
        self.attention_bytes[what] = max(self.attention_bytes.get(what, 0), out_bytes)

    def stats(self) -> dict:
        allocs = sum(1 for e in self.events if e[0] == ALLOC)
        empties = sum(1 for e in self.events if e[0] == EMPTY)
        return {"allocations": allocs, "frees": len(self.events) - allocs - empties,
                "empty_caches_replayed": empties,
                "cublas_workspaces": len(self._workspaces),
                "cublaslt_workspaces": len(self._lt_workspaces),
                "plain_tensor_rules": self.rules.calibration,
                "item_placeholders": self.placeholders,
                "init_redraw_checks": self.reads.init_reads,
                "cudnn": self.cudnn.stats(),
                "attention_calls": dict(self.attention),
                "attention_output_bytes": dict(self.attention_bytes),
                "op_calls": dict(self.op_calls),
                "requested_bytes": sum(e[2] for e in self.events if e[0] == ALLOC),
                "empty_cache_calls": self.empty_cache_calls,
                "unmodelled_calls": dict(self.unmodelled)}


def _placeholder(dtype):
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point or dtype.is_complex:
        return 1.0
    return 1


# Convolutions whose outputs take cuDNN's memory format (conv_format.py).
_CONV_OPS = frozenset((torch.ops.aten.convolution.default, torch.ops.aten._convolution.default,
                       torch.ops.aten.convolution_backward.default))


_PRIM_DEVICE = torch.ops.prim.device.default


class RecordingMode(TorchDispatchMode):
    """Pushed after (above) FakeTensorMode: sees every op first."""

    def __init__(self, recording: Recording, cpu_side=None):
        super().__init__()
        self.rec = recording
        self.cpu = cpu_side         # cpu_side.CpuSide in cpu-init mode, else None (all fake)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _PRIM_DEVICE:
            # A fake tensor's device asked for (it answers through the
            # dispatcher: 43,000 times in T5-base's three steps, library
            # code's `x.device`): no data, no request, nothing to record.
            # Answered as FakeTensorMode's own handler does, without the
            # round trip through both modes (0.8 s -> under 0.5 s there).
            t = args[0] if len(args) == 1 else None
            if isinstance(t, FakeTensor) and not t.fake_mode.in_kernel_invocation:
                return t.fake_device
            return func(*args)
        kwargs = kwargs or {}
        real_inputs = None
        if self.cpu is not None:
            if not self.cpu.wants_fake(func, types, args, kwargs):
                return self.cpu.run(func, args, kwargs)     # CPU-side code, for real
            lifted = self.cpu.lift(args, kwargs)
            if lifted[0] is not args:
                # real CPU tensors going to the device: their values are
                # known exactly (shadow_values.py reads them from here)
                real_inputs = (args, kwargs)
            args, kwargs = lifted
        if func is aten._local_scalar_dense.default:
            # .item(), bool(t), printing a value: no data on the fake device;
            # a known value (known_values.py) or a placeholder.
            value = self.rec.known.get(args[0])
            if value is not None:
                return value
            self.rec.placeholders += 1
            # loop_guard: an init's redraw check answers False; a loop that
            # spins on placeholders is caught.
            return self.rec.reads.answer(_placeholder(args[0].dtype))
        if func is aten._to_copy.default and getattr(args[0], "constant", None) is not None:
            # FakeTensorMode keeps the real value of small tensors made from
            # Python numbers and computes copies of them for real, which a
            # copy to "cuda" cannot do: forget the value (only the size counts).
            args[0].constant = None
        if func is aten.add.Tensor:
            target = self.rec.rules.inplace_target(args, kwargs)
            if target is not None:
                return plain_tensor.run_inplace(args, target)
        on_cuda = func in _CONV_OPS and all(getattr(t, "device", None) is not None
                                            and t.device.type == "cuda" for t in args[:3]
                                            if isinstance(t, torch.Tensor))
        conv = cudnn_key.conv_key(func, args, kwargs) if on_cuda else None
        if on_cuda and not cudnn_key.uses_cudnn(func, args, kwargs):
            # torch's native CUDA convolutions (cuDNN off): their im2col
            # buffers are not modelled; the band bounds them (band.py).
            what = cudnn_workspace.NON_CUDNN_CONV
            self.rec.unmodelled[what] = self.rec.unmodelled.get(what, 0) + 1
        if conv is not None:
            self.rec.begin_convolution(conv)
        try:
            return self._run(func, args, kwargs, real_inputs)
        finally:
            if conv is not None:
                self.rec.end_convolution()

    def _run(self, func, args, kwargs, real_inputs=None):
        try:
            if func is aten._convolution.default and not kwargs:
                # A CUDA build of torch runs _convolution's own C++ here, which
                # picks a backend from the tensor's device; a fake tensor's is
                # none it knows (convolution_overrideable: torch 2.11+cu130 with
                # no GPU visible, session 27). convolution (its first 9
                # arguments) gives the same output from its meta function, under
                # _convolution's own flags (benchmark, deterministic,
                # cudnn_enabled, allow_tf32: arguments 9-12), which decide it.
                with torch.backends.cudnn.flags(enabled=bool(args[11]), benchmark=bool(args[9]),
                                                deterministic=bool(args[10]),
                                                allow_tf32=bool(args[12])):
                    out = aten.convolution.default(*args[:9])
            elif foreach_inplace.applies(func, args, kwargs):
                out = None          # in place, no request (foreach_inplace.py)
            else:
                out = func(*args, **kwargs)
        except (torch._subclasses.fake_tensor.DynamicOutputShapeException,
                torch._subclasses.fake_tensor.DataDependentOutputException) as e:
            raise PredictionRefused(
                f"{func} has an output shape that depends on the data, which the fake device "
                f"does not have: at {user_line()}") from e
        if func in _CONV_OPS:
            out = conv_format.restride(func, args, kwargs, out)
        self.rec.known.propagate(func, args, out, kwargs, real_inputs=real_inputs)
        first = self.rec._next_id
        model = cuda_kernels.MODELS.get(func)
        if model is not None:
            model(self.rec, args, kwargs, out)
        elif isinstance(out, torch.Tensor):
            self.rec.track(out)
        elif isinstance(out, (tuple, list)):
            for t in out:
                if isinstance(t, torch.Tensor):
                    self.rec.track(t)
                elif isinstance(t, (tuple, list)):
                    for u in t:
                        self.rec.track(u)
        if func in _GEMM_OPS and isinstance(args[0], torch.Tensor) and args[0].device.type == "cuda":
            self.rec.gemm(lt=func in _LT_OPS and gpu_model.takes_cublaslt(args, kwargs))
        if self.rec._next_id != first:     # the op asked the allocator for memory: the band lists it
            name = str(func)
            self.rec.op_calls[name] = self.rec.op_calls.get(name, 0) + 1
        return out
