"""Where torch's own C++ code treats the fake run's tensors (FakeTensor, a
tensor subclass: isTensorSubclassLike() is true) differently from the plain
tensors of a GPU run, and how the recording puts the plain behaviour back.
Both places choose an out-of-place add for subclasses, which allocates one
more tensor than the GPU does:

- aten::linear (ATen/native/Linear.cpp) on an input that takes the matmul
  path (e.g. a non-contiguous 3-D input: nn.MultiheadAttention's packed
  in-projection on a transposed batch_first input) adds the bias with
  output.add_(bias) for plain tensors, output + bias for subclasses.
  Modelled: F.linear is wrapped (fake_device.py) so the recorder knows the
  bias; an add.Tensor(x, bias) inside it runs as add_ on x.
- Autograd's gradient accumulation (InputBuffer::accumulate, torch 2.11):
  when a node receives a second gradient for one input, with grad mode off,
  it adds in place into the old gradient (the buffer's) if that tensor is a
  plain, dense tensor held only by the buffer (tensor and storage use count
  1), else out of place: never into the new gradient (only sparse old
  gradients do that; older torch releases did it for dense ones too, and
  the H200 recording of GPT-2's tied embedding shows the out-of-place sum).
  Modelled: an add.Tensor of two same-shaped, same-dtype gradients inside a
  backward node, grad mode off, runs in place into its first operand (the
  old gradient: the engine calls old_var + var) under that rule. The use
  counts seen from a dispatch mode include references the dispatch itself
  holds; calibrate() measures them
  once on a known single-owner accumulation, so the rule compares against
  that. A same-shaped add inside a backward formula (rare: torch's backward
  kernels are fused ops) would be taken for an accumulation too.

SiLU's backward, once a third rule here, is no longer one: the fake run
took silu_backward's composite formula because a CPU build of torch lacks
its CUDA kernel, not because of grad mode or subclasses; a CPU build now
gets a CUDA build's dispatch (backend_kernels.py), and the op reaches the
fake device whole, as on a GPU.
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _storage_uses(t) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def _dense(t) -> bool:
    from torch._prims_common import is_non_overlapping_and_dense_or_false
    return is_non_overlapping_and_dense_or_false(t)


class _Probe(TorchDispatchMode):
    """Stands where RecordingMode stands; notes the use counts of the first
    backward accumulation's operands, and touches output storages as the
    recorder does (one Python storage object each)."""

    def __init__(self):
        super().__init__()
        self.counts = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (func is aten.add.Tensor and self.counts is None and not torch.is_grad_enabled()
                and torch._C._current_autograd_node() is not None):
            a, b = args[0], args[1]
            self.counts = (a._use_count(), _storage_uses(a), b._use_count(), _storage_uses(b))
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                weakref.finalize(t.untyped_storage(), lambda: None)
        return out


class PlainTensorRules:
    """The two rules above, consulted by RecordingMode for each add.Tensor."""

    def __init__(self):
        self.linear_bias = []          # the bias of each F.linear call in progress
        self.single_owner = None       # (tensor uses, storage uses) of a one-owner operand
        self.calibration = "ok"        # or why the accumulation rule is off

    def calibrate(self) -> None:
        """Run inside FakeTensorMode, before RecordingMode is pushed: a
        backward whose node input gets two fresh one-owner gradients."""
        probe = _Probe()
        with probe:
            x = torch.empty(4, 4, device="cuda", requires_grad=True)
            y = x * 1.0
            (y * 2.0 + y * 3.0).sum().backward()
        # Both operands are one-owner gradients: their counts must agree. If
        # this torch shows something else, the rule stays off (accumulation
        # out of place, as before) and stats() says so.
        if probe.counts is not None and probe.counts[:2] == probe.counts[2:]:
            self.single_owner = probe.counts[:2]
        else:
            self.single_owner = None
            self.calibration = f"accumulation rule off: probe counts {probe.counts}"

    def linear(self, original):
        rules = self

        def linear(input, weight, bias=None):
            if bias is None or not isinstance(input, torch.Tensor) or input.device.type != "cuda":
                return original(input, weight, bias)
            rules.linear_bias.append(bias)
            try:
                return original(input, weight, bias)
            finally:
                rules.linear_bias.pop()
        return linear

    def _owned(self, t) -> bool:
        return (self.single_owner is not None and _dense(t)
                and (t._use_count(), _storage_uses(t)) == self.single_owner)

    def inplace_target(self, args, kwargs):
        """For an aten.add.Tensor call: the operand the GPU would add into
        in place (0: the bias add's output or the old gradient), or None for
        an out-of-place add."""
        if len(args) != 2 or (kwargs and kwargs.get("alpha", 1) != 1):
            return None
        a, b = args
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return None
        if a.device.type != "cuda":
            return None
        if self.linear_bias and b is self.linear_bias[-1]:
            return 0 if a.dtype == torch.result_type(a, b) else None
        if (torch.is_grad_enabled() or torch._C._current_autograd_node() is None
                or a.shape != b.shape or a.dtype != b.dtype or b.device != a.device):
            return None
        if self._owned(a):
            return 0
        return None


def run_inplace(args, target):
    """add_ into args[target]; returns an alias of it (same storage, so no
    new request), which autograd records as the add's output."""
    x, y = args[target], args[1 - target]
    aten.add_.Tensor(x, y)
    return aten.alias.default(x)
