"""Random fills of real CPU tensors in cpu-init mode, computed only when
something needs their values or the generator's state.

Why: a model built on the CPU is initialised for real (cpu_side.py), and
most of that time is the random number generator filling weights that
nothing on the CPU ever reads: the model is then moved to the fake device,
which keeps shapes, not values. T5-base spends about 3 s of a 12 s
prediction on two fills of every weight (nn.Linear's kaiming_uniform_,
then transformers' normal_ over it) that end in `.to("cuda")`; a
largest-batch search pays that at every size it records.

The rule: a fill of a whole storage is noted, not run, when the fill
cannot fail and nothing else can see that memory: aten.normal_ /
aten.uniform_ on the default CPU generator, of a contiguous float16,
bfloat16, float32 or float64 tensor covering a storage this recording's
real ops made (cpu_side.py counts them; not one from numpy, which shares
its memory), not exported to numpy or DLPack, with finite arguments torch
accepts (std >= 0; from <= to, within the dtype's range). The pending fills
run, in their order, from the generator state saved before the first of
them (so every value and the generator's state after them are those of
the eager run), as soon as:

- a real CPU op reads or writes a storage that has one (a view of it does
  not: views read no data), or the shadow of a device tensor is computed
  from it (shadow_values.py reads small real inputs);
- a real CPU op draws from a generator (torch tags those
  `nondeterministic_seeded`: randn, randint, dropout, a fill that cannot be
  deferred ...);
- Python asks for or sets the generator's state (torch.get_rng_state,
  set_rng_state, manual_seed, seed, and so fork_rng and checkpointing's
  RNG stash), or reads a tensor's memory outside the dispatcher
  (Tensor.numpy, tolist, __array__, __dlpack__, torch.save): those are
  wrapped while the recording runs;
- the recording ends with a pending fill's storage still alive (a tensor
  the script keeps beyond it).

If the generator's state changed unseen meanwhile (a direct
`torch.default_generator.manual_seed`), the fills still run from the state
saved before them and the changed state is put back after them, as the
eager order (fills, then the change) leaves it.

A fill whose storage died meanwhile runs into a scratch tensor of its shape
(so the generator advances as it did), and a fill overwritten by a later one
runs before it, in the same storage. Fills still pending when the recording
ends are never computed: nothing read them or the generator after them.

Not covered: reading the memory by address (Tensor.data_ptr with ctypes,
the buffer protocol of an UntypedStorage), `torch.default_generator`'s own
methods called directly (get_state sees the generator before the pending
fills; a draw through it, or from another thread, whose dispatch modes are
its own, takes the values the first pending fill would have taken), and
random ops on fake CPU tensors (all-fake values, which draw nothing).

Cost: one check per real CPU op while fills are pending (the storages of
its tensor arguments against a dict), none otherwise.
"""
from __future__ import annotations

import math
import weakref
from typing import Callable, List, Tuple

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes

aten = torch.ops.aten

# In-place fills that write every element from the generator and read none.
_FILLS = (aten.normal_.default, aten.uniform_.default)
# The dtypes whose CPU fills always exist (float8 types have no normal_ kernel).
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _accepted(func, dtype, args, kwargs) -> bool:
    """Whether the eager fill would run without raising: finite arguments,
    std >= 0, from <= to within the dtype's range (torch's own checks)."""
    names = ("mean", "std") if func is aten.normal_.default else ("from", "to")
    defaults = (0.0, 1.0)
    try:
        a, b = (float(args[i]) if len(args) > i else float(kwargs.get(n, d))
                for i, (n, d) in enumerate(zip(names, defaults)))
    except (TypeError, ValueError):
        return False
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    if func is aten.normal_.default:
        return b >= 0.0
    info = torch.finfo(dtype)
    return info.min <= a <= b <= info.max and b - a <= info.max


class DeferredFills:
    """The pending fills of one recording. Counts: deferred (fills noted),
    run_late (of those, run by a flush)."""

    def __init__(self, owned: Callable[[object], bool] = lambda storage: True):
        """owned(storage): whether a real op of this recording made it
        (CpuSide's count); only those are deferred."""
        self.generator = torch.default_generator
        self._owned = owned
        self._exported = set()              # id(storage) shared with numpy or DLPack, while it lives
        self._pending: List[Tuple] = []     # (storage weakref, dtype, shape, func, args, kwargs)
        self._storages = {}                 # id(storage) -> its weakref, for each pending fill
        self._state0 = None                 # the generator's state before the first pending fill
        self._draws = {}                    # func -> whether torch tags it as drawing from a generator
        self.deferred = 0
        self.run_late = 0

    def defer(self, func, args, kwargs) -> bool:
        """Notes the op instead of running it when it is a deferrable fill
        (True: the caller returns args[0], as the in-place op would)."""
        if func not in _FILLS or kwargs.get("generator") is not None:
            return False
        t = args[0]
        if isinstance(t, FakeTensor) or t.device.type != "cpu" or t.dtype not in _DTYPES:
            return False
        if not _accepted(func, t.dtype, args[1:], kwargs):
            return False                    # eager raises: let it, where the script called it
        s = t.untyped_storage()
        if t.storage_offset() != 0 or not t.is_contiguous() or \
                t.numel() * t.element_size() != s.nbytes():
            return False
        if id(s) in self._exported or not self._owned(s):
            return False
        if not self._pending:
            self._state0 = self.generator.get_state()
        ref = weakref.ref(s)
        self._pending.append((ref, t.dtype, tuple(t.shape), func, tuple(args[1:]), dict(kwargs)))
        self._storages[id(s)] = ref
        self.deferred += 1
        return True

    def before(self, func, tensors) -> None:
        """Runs the pending fills when the op about to run for real, on
        the real tensors `tensors`, needs them (module docstring)."""
        if not self._pending:
            return
        draws = self._draws.get(func)
        if draws is None:
            draws = self._draws[func] = torch.Tag.nondeterministic_seeded in func.tags
        if draws or (not func.is_view and self._touches(tensors)):
            self.flush()

    def before_read(self, tensors) -> None:
        """Runs the pending fills when one of tensors (real ones whose
        values are about to be read outside CpuSide.run) has one."""
        if self._pending and self._touches(tensors):
            self.flush()

    def exported(self, t) -> None:
        """t's memory is now shared outside torch (numpy, DLPack): never
        deferred again."""
        if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor):
            try:
                s = t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                return
            key = id(s)
            if key not in self._exported:
                # Gone with the storage: a later one may take its id.
                self._exported.add(key)
                weakref.finalize(s, self._exported.discard, key)

    def end(self) -> None:
        """The recording ends: fills whose storage is still alive run (the
        script may read it later, unwatched); the rest never will."""
        if any(ref() is not None for ref, *_ in self._pending):
            self.flush()
        self._pending.clear()
        self._storages.clear()
        self._state0 = None

    def _touches(self, tensors) -> bool:
        for t in tensors:
            try:
                s = t.untyped_storage()
            except (RuntimeError, NotImplementedError):   # sparse and other storage-less layouts
                continue
            ref = self._storages.get(id(s))
            if ref is not None and ref() is s:
                return True
        return False

    def flush(self) -> None:
        """Runs every pending fill, in order, from the saved state."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        self._storages.clear()
        state0, self._state0 = self._state0, None
        with _disable_current_modes():
            # Unmoved since the first fill was noted, unless something
            # changed it unseen (module docstring): then that change came
            # after the fills in the eager order, and is put back after them.
            now = self.generator.get_state()
            changed = not torch.equal(now, state0)
            self.generator.set_state(state0)
            try:
                for ref, dtype, shape, func, args, kwargs in pending:
                    s = ref()
                    if s is not None:
                        t = torch.empty(0, dtype=dtype).set_(s, 0, shape)
                    else:    # its storage died: the draws still happened in the eager run
                        t = torch.empty(shape, dtype=dtype)
                    func(t, *args, **kwargs)
            finally:
                if changed:
                    self.generator.set_state(now)
        self.run_late += len(pending)

    def wrap(self, fn: Callable, shares_memory: bool = False) -> Callable:
        """fn, running the pending fills first; shares_memory: fn (a tensor
        method) shares the tensor's memory outside torch, which is then
        never deferred (exported)."""
        fills = self

        def flushed_first(*args, **kwargs):
            fills.flush()
            if shares_memory:
                fills.exported(args[0])
            return fn(*args, **kwargs)
        flushed_first.__wrapped__ = fn
        flushed_first.__name__ = getattr(fn, "__name__", "flushed_first")
        return flushed_first

    def install(self, set_attr: Callable) -> None:
        """Wraps the Python ways to the generator's state and to a tensor's
        memory (module docstring) with set_attr(obj, name, value), which
        the caller undoes when the recording ends (FakeCudaDevice._set)."""
        import torch.random
        import torch.serialization
        for mod in (torch, torch.random):
            for name in ("get_rng_state", "set_rng_state", "manual_seed", "seed"):
                set_attr(mod, name, self.wrap(getattr(mod, name)))
        for mod in (torch, torch.serialization):
            set_attr(mod, "save", self.wrap(getattr(mod, "save")))
        set_attr(torch.Tensor, "tolist", self.wrap(torch.Tensor.tolist))
        for name in ("numpy", "__array__", "__dlpack__"):
            set_attr(torch.Tensor, name, self.wrap(getattr(torch.Tensor, name), shares_memory=True))

    def stats(self) -> dict:
        """Fills deferred; of those, run late (by a flush) and never run
        (pending at the end, or still pending now)."""
        return {"cpu_fills_deferred": self.deferred, "cpu_fills_run_late": self.run_late,
                "cpu_fills_never_run": self.deferred - self.run_late}
