"""Exact values of the small device tensors whose values do not depend on the
GPU's own data, computed on the CPU beside the fake run.

A fake tensor has no data, so a script's value check on it gets a
placeholder (known_values.py). But many device tensors a training step
reads back are not data at all: position ids and cache positions
(`torch.arange(n, device="cuda")`), masks built from them, a batch's labels
copied from the host. Their values are the same on any machine, so the
fake run can know them exactly and take the GPU run's branch.

The rule: a device tensor gets a shadow (an exact CPU copy) when it is made
by a deterministic op whose every tensor input has one (or is a real CPU
tensor that is not a parameter), it is of an integer or bool type (float
results may differ in their last bits between the CPU and the GPU), and it
has at most MAX_ELEMENTS elements. Ops whose CUDA result depends on the
order a kernel writes or ties (scatter/index_put with repeated indices,
sort, topk, unique) are left out. Factories count (arange,
full, ones, zeros, linspace, eye; not the `empty` family, whose contents are
undefined, nor any op torch tags as seeded-random). Ops that write into an
argument forget the shadow of every tensor sharing its storage. Anything
computed from a parameter, an activation or a random draw has no shadow and
keeps the placeholder: only values that are the same on every machine are
known.

The case that made it: transformers 5.x builds Llama's position ids with
arange and checks `(packed_sequence_mask[:, -1] == 0).all()` to tell a
packed batch; on the fake device that was unknown, so the model took the
traced path with a 4-D mask, repeated the key/value heads and ran attention
with a mask, where the GPU ran grouped-query attention with none (+5.8 %
peak allocated at a Llama-style decoder, issue 46's llama row).

Cost: one CPU op per device op whose inputs are all shadowed (small integer
tensors), bounded by MAX_ELEMENTS per tensor and by the live tensors
(entries leave with their tensor).
"""
from __future__ import annotations

import weakref

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

aten = torch.ops.aten

MAX_ELEMENTS = 1 << 16        # per tensor: a position-id row of 64 K tokens

# Factories whose contents are undefined: never shadowed.
_UNDEFINED_PACKETS = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                      "empty_permuted")
# Ops whose CUDA result is not defined by their inputs alone (duplicate
# indices written in any order; ties ordered by the kernel): never shadowed.
_UNORDERED_PREFIXES = ("scatter", "index_put", "_index_put", "index_copy", "index_add", "put",
                       "sort", "argsort", "topk", "kthvalue", "unique", "_unique", "mode", "median",
                       "nanmedian", "index_reduce", "_embedding_bag")


class _Unknown(Exception):
    pass


def storage_key(t):
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


def forget_sharing(entries: dict, t) -> None:
    """Drops from entries ({key: (weak reference, value)}) every tensor that
    is t, shares t's storage, or is gone."""
    key = storage_key(t)
    for k, (ref, _) in list(entries.items()):
        other = ref()
        if other is None or other is t or (key is not None and storage_key(other) == key):
            entries.pop(k, None)


class ShadowValues:
    """id(device tensor) -> (weak reference to it, its exact CPU copy)."""

    def __init__(self, scalar_of=None):
        # scalar_of(t): the one value all of t's elements have, if known
        # (known_values.KnownValues.get), to shadow a filled tensor too.
        self._shadow = {}
        self._scalar_of = scalar_of
        self._skip = {}     # op -> True when it is random, writes or has undefined output (cache)
        # before_real_read([t]): called before a real CPU tensor's values are
        # read for a shadow (cpu-init: deferred_fills.DeferredFills.before_read).
        self.before_real_read = None

    def get(self, t):
        entry = self._shadow.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        return entry[1]

    def scalar(self, t):
        """The value of a one-element tensor with a shadow (what .item()
        returns on the GPU); None otherwise."""
        s = self.get(t)
        if s is None or s.numel() != 1:
            return None
        with _disable_current_modes():
            return s.item()

    def __len__(self):
        return len(self._shadow)

    def _set(self, t, value) -> None:
        key = id(t)
        self._shadow[key] = (weakref.ref(t), value)
        weakref.finalize(t, self._shadow.pop, key, None)

    def _skipped(self, func) -> bool:
        skip = self._skip.get(func)
        if skip is None:
            tags = getattr(func, "tags", ())
            writes = any(a.alias_info is not None and a.alias_info.is_write
                         for a in func._schema.arguments)
            name = func._schema.name.split("::")[-1]
            skip = (torch.Tag.nondeterministic_seeded in tags or writes
                    or name in _UNDEFINED_PACKETS or name.startswith(_UNORDERED_PREFIXES)
                    or not isinstance(func, torch._ops.OpOverload))
            self._skip[func] = skip
        return skip

    def _cpu_of(self, x):
        if isinstance(x, FakeTensor):
            s = self.get(x)
            if s is not None:
                return s
            value = self._scalar_of(x) if self._scalar_of else None
            if value is not None and x.numel() <= MAX_ELEMENTS:
                with _disable_current_modes():
                    return torch.full(tuple(x.shape), value, dtype=x.dtype)
            raise _Unknown
        if isinstance(x, torch.Tensor):                 # a real (CPU) tensor
            # a parameter (or anything autograd tracks) is model state the
            # optimizer will change: never known
            if (x.numel() > MAX_ELEMENTS or x.device.type != "cpu" or x.requires_grad
                    or isinstance(x, torch.nn.Parameter)):
                raise _Unknown
            if self.before_real_read is not None:
                self.before_real_read([x])   # its values must be there (deferred_fills.py)
            return x
        if isinstance(x, torch.device):
            return torch.device("cpu")
        return x

    def forget(self, t) -> None:
        """Forget the shadow of t and of every tensor sharing its storage
        (known_values.KnownValues finds the tensors an op writes)."""
        if self._shadow:
            forget_sharing(self._shadow, t)

    def after(self, func, args, kwargs, out) -> None:
        """After a device op: shadow its outputs when it is deterministic,
        small and every tensor input is known (the module docstring)."""
        outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        # Integer and bool values only: a float computed on the CPU may
        # differ in its last bits from the GPU's (summation order, TF32,
        # fast math), so it is never "exact"; nor is a tensor autograd tracks.
        if not outs or any(not isinstance(t, FakeTensor) or t.device.type != "cuda"
                           or t.numel() > MAX_ELEMENTS or t.dtype.is_floating_point
                           or t.dtype.is_complex or t.requires_grad for t in outs):
            return
        if self._skipped(func):
            return
        try:
            cpu_args, cpu_kwargs = pytree.tree_map(self._cpu_of, (args, kwargs))
        except _Unknown:
            return
        if "device" in cpu_kwargs:
            cpu_kwargs["device"] = torch.device("cpu")
        cpu_kwargs.pop("pin_memory", None)
        try:
            with _disable_current_modes():
                got = func(*cpu_args, **cpu_kwargs)
        except Exception:       # an op with no CPU kernel, or refusing the CPU copies
            return
        got_leaves = [t for t in pytree.tree_leaves(got) if isinstance(t, torch.Tensor)]
        if len(got_leaves) != len(outs):
            return
        for t, v in zip(outs, got_leaves):
            if tuple(v.shape) == tuple(t.shape) and v.dtype == t.dtype:
                self._set(t, v)
