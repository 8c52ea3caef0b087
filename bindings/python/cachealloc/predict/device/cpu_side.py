"""The cpu-init mode: CPU-side code runs for real, only the CUDA device is
fake.

In the all-fake mode every tensor is a FakeTensor, CPU tensors included, so
a model built on the CPU initialises on placeholders: a loop that waits for
a value (torch 2.13's rejection-sampling trunc_normal_) cannot end, and
any value the script computes on the CPU is a guess. Here RecordingMode
sends each op that touches no fake tensor and names no CUDA device to the
real CPU kernels (FakeTensorMode popped for the call): the model's
initialisation, the script's CPU data and its checks run as on the user's
machine. Everything that lives on the CUDA device stays fake:

- a CPU tensor moved with `.cuda()`/`.to("cuda")` becomes a fake CUDA
  tensor of the same shape, dtype and strides (FakeTensorMode converts the
  real input; the copy is the usual recorded request);
- factory calls with device="cuda" (or under `with torch.device("cuda")`,
  which passes the device to the op) give fakes;
- an op on any fake tensor stays fake (a fake tensor moved back with
  `.cpu()` is a fake CPU tensor).

Requests are recorded only for CUDA tensors, so the two modes record the
same requests for the same step; they differ in what the CPU side
computes (real values here, placeholders there).

Random fills of whole CPU storages (normal_, uniform_) run only when
something reads those storages or the generator (deferred_fills.py): the
values and the generator's stream stay the eager run's, and weights that
only go to the device are never filled.

Host memory stays bounded (host_memory.py): each new storage a real op
makes is counted while it lives; a factory op's size is known before it
runs (the same call on the meta device), so a model too large for the
host is stopped before its memory is touched. Past the budget,
HostMemoryExceeded ends this recording and the worker runs the step again
all-fake, saying so in the answer. `pin_memory=True` is dropped on real
factories (pinned memory is CUDA's host allocator, absent here; it is not
device memory either way).
"""
from __future__ import annotations

import weakref

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes

from . import host_memory
from .deferred_fills import DeferredFills


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for t in out:
            yield from _tensors(t)


def real_tensors(values):
    """The real (not fake) tensors among values, or in a list among them
    (aten's arguments nest no deeper: Tensor[], Tensor?[]). Runs for every
    op: a plain loop, not a pytree walk."""
    for v in values:
        if isinstance(v, torch.Tensor):
            if not isinstance(v, FakeTensor):
                yield v
        elif isinstance(v, (list, tuple)):
            for t in v:
                if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor):
                    yield t


def _has_real(values) -> bool:
    """Whether a real tensor is among values (real_tensors)."""
    return next(real_tensors(values), None) is not None


# Ops whose output is the memory they were handed (a tensor made outside
# the dispatcher, numpy's with torch.from_numpy, is first seen here).
_HANDED = frozenset({torch.ops.aten.lift_fresh.default, torch.ops.aten.lift.default,
                     torch.ops.aten.alias.default})


class CpuSide:
    """Runs the real CPU ops of a cpu-init recording and counts their host
    memory. live/peak: bytes of live storages the real ops made."""

    def __init__(self, available: int = None):
        self.available = host_memory.available_bytes() if available is None else available
        self.budget = host_memory.budget(self.available)
        self.live = 0
        self.peak = 0
        self.ops = 0                 # real CPU ops run
        self._live = {}              # id(storage object) -> bytes
        self._made = set()           # ids of those a real op made (not one it was handed)
        self._factory = {}           # op -> whether it is a factory (a device argument, no tensor input)
        self.fake_mode = None        # the device's FakeTensorMode (fake_device.py sets it)
        # Random fills run only when needed (deferred_fills.py), of storages
        # counted here only: one from outside (numpy's) may be read unwatched.
        self.fills = DeferredFills(owned=lambda storage: id(storage) in self._made)

    def wants_fake(self, func, types, args, kwargs) -> bool:
        """Whether the op belongs to the fake device: a fake tensor among
        its inputs, or a CUDA device among its arguments."""
        for t in types:
            if issubclass(t, FakeTensor):
                return True
        dev = kwargs.get("device")
        if dev is not None and (dev.type if isinstance(dev, torch.device) else torch.device(dev).type) == "cuda":
            return True
        for a in args:
            if isinstance(a, torch.device) and a.type == "cuda":
                return True
        return False

    def lift(self, args, kwargs):
        """(args, kwargs) of a fake op with its real tensors made fake: a
        real tensor copied to "cuda" must not reach FakeTensorMode as it is
        (with no fake input, it would run the copy for real, as it does for
        constants, on a CUDA backend this process lacks)."""
        if not (_has_real(args) or _has_real(kwargs.values())):
            return args, kwargs
        return pytree.tree_map_only(
            torch.Tensor, lambda t: t if isinstance(t, FakeTensor) else self.fake_mode.from_tensor(t),
            (args, kwargs))

    def run(self, func, args, kwargs):
        """The op, for real on the CPU."""
        self.ops += 1
        if self.fills.defer(func, args, kwargs):
            return args[0]
        self.fills.before(func, real_tensors((*args, *kwargs.values())))
        if kwargs.get("pin_memory"):
            kwargs = dict(kwargs, pin_memory=False)
        if self._is_factory(func, args, kwargs):
            need = self._meta_bytes(func, args, kwargs)
            if need and self.live + need > self.budget:
                self._exceeded(self.live + need)
        with _disable_current_modes():
            out = func(*args, **kwargs)
        self._track(out, made=not func.is_view and func not in _HANDED)
        return out

    def _is_factory(self, func, args, kwargs) -> bool:
        known = self._factory.get(func)
        if known is None:
            known = any(a.name == "device" for a in func._schema.arguments)
            self._factory[func] = known
        return known and not any(isinstance(a, torch.Tensor) for a in args) and \
            not any(isinstance(v, torch.Tensor) for v in kwargs.values())

    @staticmethod
    def _meta_bytes(func, args, kwargs) -> int:
        """Bytes the factory call will allocate: the same call on "meta"."""
        try:
            with _disable_current_modes():
                out = func(*args, **dict(kwargs, device=torch.device("meta")))
        except Exception:       # an op the meta device lacks: counted after it runs
            return 0
        return sum(t.untyped_storage().nbytes() for t in _tensors(out))

    def _track(self, out, made: bool = True) -> None:
        """Counts the new storages among out; made: whether the op made
        them (not lift_fresh's or alias's: memory it was handed, numpy's
        from torch.from_numpy, is seen first there)."""
        for t in _tensors(out):
            if t.device.type != "cpu" or isinstance(t, FakeTensor):
                continue
            s = t.untyped_storage()
            key = id(s)
            if key in self._live:
                continue
            n = s.nbytes()
            self._live[key] = n
            if made:
                self._made.add(key)
            self.live += n
            weakref.finalize(s, self._died, key)
        self.peak = max(self.peak, self.live)
        if self.live > self.budget:
            self._exceeded(self.live)

    def _died(self, key) -> None:
        self.live -= self._live.pop(key, 0)
        self._made.discard(key)

    def _exceeded(self, needed: int):
        from .failure import user_line
        raise host_memory.HostMemoryExceeded(needed, self.budget, self.available, user_line())

    def stats(self) -> dict:
        return {"host_bytes_peak": self.peak, "host_budget": self.budget,
                "host_available": self.available, "cpu_ops": self.ops, **self.fills.stats()}
