"""The few values the fake device knows without data: a normal training step
has finite numbers, so `torch.isnan(t)` and `torch.isinf(t)` are all False
and `torch.isfinite(t)` all True. Kept through any()/all(), logical_not (~)
and views, they answer `.item()`/`bool()` (RecordingMode asks here first),
so a script's NaN guard (`if torch.isnan(loss): continue`) does not skip
every step, as the generic placeholder (True) would make it.

Every other read of a value gets the documented placeholder (1, 1.0, True).
isfinite is a composite op (it reaches the dispatch mode as eq/abs/ne), so
the three checks are marked at the Python level (torch.X and Tensor.X);
their allocations are recorded as usual.
"""
from __future__ import annotations

import weakref

import torch

aten = torch.ops.aten

# ops whose output has its (bool) input's single known value
_SAME = {aten.any.default, aten.any.dim, aten.all.default, aten.all.dim,
         aten.view.default, aten.clone.default, aten.alias.default, aten.detach.default,
         aten.squeeze.default, aten.squeeze.dim, aten.unsqueeze.default, aten.reshape.default,
         aten._to_copy.default, aten.expand.default, aten.amax.default, aten.amin.default,
         aten.max.default, aten.min.default, aten.select.int, aten.slice.Tensor}
for _name in ("any.dims", "all.dims", "squeeze.dims"):
    _ov = getattr(getattr(aten, _name.split(".")[0]), _name.split(".")[1], None)
    if _ov is not None:
        _SAME.add(_ov)
_FLIP = {aten.logical_not.default, aten.bitwise_not.default}
CHECKS = {"isnan": False, "isinf": False, "isposinf": False, "isneginf": False, "isfinite": True}


class KnownValues:
    """id(tensor) -> the one value all its elements have (bool)."""

    def __init__(self):
        self._known = {}

    def mark(self, t, value: bool) -> None:
        if isinstance(t, torch.Tensor) and t.dtype == torch.bool:
            key = id(t)
            self._known[key] = value
            weakref.finalize(t, self._known.pop, key, None)

    def get(self, t):
        return self._known.get(id(t))

    def propagate(self, func, args, out) -> None:
        """After an op: its bool output's value when its input's is known."""
        if not (args and isinstance(args[0], torch.Tensor) and isinstance(out, torch.Tensor)):
            return
        value = self.get(args[0])
        if value is None:
            return
        if func in _SAME:
            self.mark(out, value)
        elif func in _FLIP:
            self.mark(out, not value)

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
