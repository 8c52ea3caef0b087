"""The few values the fake device knows without data, so that a script's
value checks go the GPU run's way rather than the placeholder's:

- a normal training step has finite numbers: `torch.isnan(t)` and
  `torch.isinf(t)` are all False, `torch.isfinite(t)` all True (a NaN guard,
  `if torch.isnan(loss): continue`, does not skip every step, as the generic
  placeholder True would make it);
- a tensor filled with one value has that value everywhere: ones/zeros/full
  (and _like, new_), e.g. a script's `attention_mask = torch.ones_like(ids)`,
  which transformers checks with `padding_mask.all()` before skipping the
  attention mask (tracing_checks.py).

Kept through views, copies and dtype casts, any()/all(), comparisons with a
number, logical_not (~) and max/min; they answer `.item()`/`bool()`
(RecordingMode asks here first). Small tensors that do not depend on the
GPU's data (arange-made position ids and what is computed from them) are
known exactly, element by element (shadow_values.py). Writing into a tensor (any op that mutates
an argument: `mask[:, 300:] = 0`, `masked_fill_`, an optimizer step)
forgets the value of every known tensor sharing its storage. Every other
read of a value gets the documented placeholder (1, 1.0, True).

isfinite is a composite op (it reaches the dispatch mode as eq/abs/ne), so
the three checks are marked at the Python level (torch.X and Tensor.X);
their allocations are recorded as usual.
"""
from __future__ import annotations

import operator
import weakref

import torch

from . import shadow_values

aten = torch.ops.aten


def _overloads(*names):
    out = set()
    for name in names:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(aten, packet, None), overload or "default", None)
        if op is not None:
            out.add(op)
    return out


# ops whose output has its input's single value (cast to the output's dtype)
_SAME = _overloads("view", "clone", "alias", "detach", "squeeze", "squeeze.dim", "squeeze.dims",
                   "unsqueeze", "reshape", "_to_copy", "expand", "amax", "amin", "max", "min",
                   "select.int", "slice.Tensor", "permute", "transpose.int", "t", "contiguous",
                   "_unsafe_view", "flatten.using_ints")
_ALL = _overloads("all", "all.dim", "all.dims")
_ANY = _overloads("any", "any.dim", "any.dims")
_FLIP = _overloads("logical_not", "bitwise_not")
_COMPARE = {op: fn for names, fn in (
    (("eq.Scalar",), operator.eq), (("ne.Scalar",), operator.ne), (("gt.Scalar",), operator.gt),
    (("ge.Scalar",), operator.ge), (("lt.Scalar",), operator.lt), (("le.Scalar",), operator.le))
    for op in _overloads(*names)}
# fills: op -> where its value is (argument index, or a constant)
_FILLS = {**{op: ("const", 1) for op in _overloads("ones", "ones_like", "new_ones")},
          **{op: ("const", 0) for op in _overloads("zeros", "zeros_like", "new_zeros")},
          **{op: ("arg", 1) for op in _overloads("full", "full_like")},
          **{op: ("arg", 2) for op in _overloads("new_full")}}
CHECKS = {"isnan": False, "isinf": False, "isposinf": False, "isneginf": False, "isfinite": True}


def _as_dtype(value, dtype):
    """value as a Python number of dtype's kind (what .item() returns)."""
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point or dtype.is_complex:
        return float(value)
    return int(value)


class KnownValues:
    """id(tensor) -> (weak reference to it, the one value all its elements
    have). Entries leave with their tensor (weakref.finalize): bounded by
    the live tensors that were filled or checked."""

    def __init__(self):
        self._known = {}
        self._writes = {}   # op -> indices of the arguments it writes (cache)
        # Exact CPU copies of small tensors that do not depend on the GPU's
        # data (shadow_values.py): they answer reads the one-value rule cannot.
        self.shadows = shadow_values.ShadowValues(scalar_of=self._single)

    def mark(self, t, value) -> None:
        if isinstance(t, torch.Tensor) and isinstance(value, (bool, int, float)):
            key = id(t)
            self._known[key] = (weakref.ref(t), _as_dtype(value, t.dtype))
            weakref.finalize(t, self._known.pop, key, None)

    def _single(self, t):
        entry = self._known.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        return entry[1]

    def get(self, t):
        """The one value all of t's elements have, when known (a fill, a
        check, or a one-element tensor with an exact shadow); else None."""
        value = self._single(t)
        if value is not None:
            return value
        return self.shadows.scalar(t)

    def is_known(self, t) -> bool:
        """Whether t's values are known (one value, or an exact shadow)."""
        return self._single(t) is not None or self.shadows.get(t) is not None

    def propagate(self, func, args, out, kwargs=None, real_inputs=None) -> None:
        """After an op: forget what it wrote into; its output's value when
        it is a fill or its input's value is known. real_inputs: the op's
        (args, kwargs) before real CPU tensors were made fake, if any."""
        if self._known or len(self.shadows):
            self._forget_written(func, args, kwargs or {})
        src_args, src_kwargs = real_inputs or (args, kwargs or {})
        self.shadows.after(func, src_args, src_kwargs, out)
        if not isinstance(out, torch.Tensor):
            return
        fill = _FILLS.get(func)
        if fill is not None:
            kind, where = fill
            value = where if kind == "const" else (
                args[where] if len(args) > where else (kwargs or {}).get("fill_value"))
            if isinstance(value, (bool, int, float)):
                self.mark(out, value)
            return
        if not (args and isinstance(args[0], torch.Tensor)):
            return
        value = self.get(args[0])
        if value is None:
            return
        if func in _SAME:
            self.mark(out, value)
        elif func in _ALL:
            self.mark(out, bool(value) or args[0].numel() == 0)
        elif func in _ANY:
            self.mark(out, bool(value) and args[0].numel() > 0)
        elif func in _FLIP:
            self.mark(out, (not value) if isinstance(value, bool) else ~int(value))
        elif func in _COMPARE and len(args) > 1 and isinstance(args[1], (bool, int, float)):
            self.mark(out, _COMPARE[func](value, args[1]))

    def _forget_written(self, func, args, kwargs) -> None:
        writes = self._writes.get(func)
        if writes is None:
            schema = func._schema
            writes = tuple((i, a.name) for i, a in enumerate(schema.arguments)
                           if a.alias_info is not None and a.alias_info.is_write)
            self._writes[func] = writes
        for i, name in writes:
            t = args[i] if i < len(args) else kwargs.get(name)
            # a Tensor(a!)[] argument (the foreach and fused optimizer ops)
            # writes every tensor of its list
            for w in (t if isinstance(t, (list, tuple)) else (t,)):
                if isinstance(w, torch.Tensor):
                    if self._known:
                        shadow_values.forget_sharing(self._known, w)
                    self.shadows.forget(w)

    def wrap(self, original):
        """torch.isnan & co. (function or method), marking the result."""
        known = self
        value = CHECKS[original.__name__]

        def check(*args, **kwargs):
            out = original(*args, **kwargs)
            if isinstance(out, torch.Tensor) and out.device.type == "cuda":
                known.mark(out, value)
            return out
        check.__name__ = original.__name__
        return check
