"""Random fills of real CPU tensors in cpu-init mode, computed only when
something needs their values or the generator's state.

Why: a model built on the CPU is initialised for real (cpu_side.py), and
most of that time is the random number generator filling weights that
nothing on the CPU ever reads: the model is then moved to the fake device,
which keeps shapes, not values. T5-base spends about 3 s of a 12 s
prediction on two fills of every weight (nn.Linear's kaiming_uniform_,
then transformers' normal_ over it) that end in `.to("cuda")`; a
largest-batch search pays that at every size it records.

The rule, exact: a fill of a whole storage (aten.normal_ / aten.uniform_ of
a contiguous floating tensor covering its storage, on the default CPU
generator) is noted, not run. The pending fills run, in their order, from
the generator state saved before the first of them (so every value and the
generator's final state are those of the eager run), as soon as:

- a real CPU op reads or writes a storage that has one (a view of it does
  not: views read no data);
- a real CPU op draws from a generator (torch tags those
  `nondeterministic_seeded`: randn, randint, dropout, a fill that cannot be
  deferred ...);
- Python asks for or sets the generator's state (torch.get_rng_state,
  set_rng_state, manual_seed, seed, and so fork_rng and checkpointing's
  RNG stash), or reads a tensor's memory outside the dispatcher
  (Tensor.numpy, tolist, __array__, torch.save): those are wrapped while
  the recording runs.

A fill whose storage died meanwhile runs into a scratch tensor of its shape
(so the generator advances as it did), and a fill overwritten by a later one
runs before it, in the same storage. Fills still pending when the recording
ends are never computed: nothing read them or the generator after them.

Not covered: reading the memory by address (Tensor.data_ptr with ctypes,
the buffer protocol of an UntypedStorage) or through
`torch.default_generator.get_state()` called directly: such a read sees
the storage as torch.empty left it, or the generator as it was before the
pending fills.

Cost: one check per real CPU op while fills are pending (the storages of
its tensor arguments against a dict), none otherwise.
"""
from __future__ import annotations

import weakref
from typing import Callable, List, Tuple

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes

aten = torch.ops.aten

# In-place fills that write every element from the generator and read none.
_FILLS = (aten.normal_.default, aten.uniform_.default)


def _real_tensors(values):
    """The real (not fake) tensors among values, one list level deep
    (aten's arguments nest no deeper)."""
    for v in values:
        if isinstance(v, torch.Tensor):
            if not isinstance(v, FakeTensor):
                yield v
        elif isinstance(v, (list, tuple)):
            for t in v:
                if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor):
                    yield t


class DeferredFills:
    """The pending fills of one recording. Counts: deferred (fills noted),
    run_late (of those, run by a flush), flushes."""

    def __init__(self, generator: torch.Generator = None):
        self.generator = generator or torch.default_generator
        self._pending: List[Tuple] = []     # (storage weakref, dtype, shape, func, args, kwargs)
        self._storages = {}                 # id(storage) -> its weakref, for each pending fill
        self._state0 = None                 # the generator's state before the first pending fill
        self._draws = {}                    # func -> whether torch tags it as drawing from a generator
        self.deferred = 0
        self.run_late = 0
        self.flushes = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def defer(self, func, args, kwargs) -> bool:
        """Notes the op instead of running it when it is a deferrable fill
        (True: the caller returns args[0], as the in-place op would)."""
        if func not in _FILLS or kwargs.get("generator") is not None:
            return False
        t = args[0]
        if isinstance(t, FakeTensor) or t.device.type != "cpu" or not t.dtype.is_floating_point:
            return False
        s = t.untyped_storage()
        if t.storage_offset() != 0 or not t.is_contiguous() or \
                t.numel() * t.element_size() != s.nbytes():
            return False
        if not self._pending:
            self._state0 = self.generator.get_state()
        ref = weakref.ref(s)
        self._pending.append((ref, t.dtype, tuple(t.shape), func, tuple(args[1:]), dict(kwargs)))
        self._storages[id(s)] = ref
        self.deferred += 1
        return True

    def before(self, func, args, kwargs) -> None:
        """Runs the pending fills when the op about to run for real needs
        them (module docstring)."""
        if not self._pending:
            return
        draws = self._draws.get(func)
        if draws is None:
            draws = self._draws[func] = torch.Tag.nondeterministic_seeded in func.tags
        if draws or (not func.is_view and self._touches(args, kwargs)):
            self.flush()

    def _touches(self, args, kwargs) -> bool:
        for t in _real_tensors((*args, *kwargs.values())):
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
        with _disable_current_modes():
            # Unmoved since the first fill was noted (every draw seen
            # flushes first); set again against a draw torch does not tag.
            self.generator.set_state(self._state0)
            for ref, dtype, shape, func, args, kwargs in pending:
                s = ref()
                if s is not None:
                    t = torch.empty(0, dtype=dtype).set_(s, 0, shape)
                else:    # its storage died: the draws still happened in the eager run
                    t = torch.empty(shape, dtype=dtype)
                func(t, *args, **kwargs)
        self._state0 = None
        self.run_late += len(pending)
        self.flushes += 1

    def wrap(self, fn: Callable) -> Callable:
        """fn, running the pending fills first."""
        fills = self

        def flushed_first(*args, **kwargs):
            fills.flush()
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
        for name in ("numpy", "tolist", "__array__"):
            set_attr(torch.Tensor, name, self.wrap(getattr(torch.Tensor, name)))

    def stats(self) -> dict:
        """Fills deferred; of those, run late (by a flush) and never run
        (pending at the end, or still pending now)."""
        return {"cpu_fills_deferred": self.deferred, "cpu_fills_run_late": self.run_late,
                "cpu_fills_never_run": self.deferred - self.run_late}
