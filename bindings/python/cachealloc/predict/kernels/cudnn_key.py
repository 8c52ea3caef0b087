"""The key of a convolution call in the cuDNN workspace table: every
parameter that can change which algorithm cuDNN's heuristics pick and so
how much workspace the call asks the caching allocator for.

One function for both sides: benchmarks/predict/cudnn_probe.py computes it
from the real CUDA tensors on a GPU, the predictor (cudnn_workspace.py) from
the fake run's tensors; both see the same shapes, strides and dtypes, so a
call on the GPU and the same call in the fake run get the same string.

This file imports only torch (the probe loads it by path on a machine where
the cachealloc package is not built).

Key, '|'-separated:
  fwd / bwd                   aten.convolution / aten.convolution_backward
  in=N,C,H,W                  input shape
  w=O,I,kH,kW                 weight shape
  s= p= d= op=                stride, padding, dilation, output_padding
  g=                          groups
  t=0/1                       transposed
  float32 ...                 dtype of the input
  fmt=contiguous/channels_last/strided
                              the memory format cuDNN is run in (channels_last
                              when input or weight suggests it, as torch's
                              cudnn_conv_suggest_memory_format)
  bias=0/1 (fwd)              whether a bias is added
  mask=111 (bwd)              which of grad_input, grad_weight, grad_bias are wanted
  flags=B,D,T                 torch.backends.cudnn benchmark, deterministic,
                              allow_tf32 (1/0) when the call ran
"""
from __future__ import annotations

import torch

try:
    from torch._prims_common import suggest_memory_format
except ImportError:         # a torch without it: the plain stride test below
    suggest_memory_format = None


# Two questions torch's kernels ask of a tensor's strides, answered as the
# C++ answers them (the fake tensors carry a GPU run's strides). This file
# keeps to the standard library and torch (key_probe.py loads it by path on
# the GPU), so conv_format.py and cuda_copy.py take them from here.

def dense(t) -> bool:
    """Whether its elements fill one run of storage exactly once (any
    permutation of a contiguous layout): what TensorIterator needs to see
    one run, and what `.to(dtype)` keeps: its dimensions longer than 1, by
    increasing stride, step 1, then each the product of the sizes before."""
    expected = 1
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1):
        if stride != expected:
            return False
        expected *= size
    return True


def suggests(t, fmt) -> bool:
    """Tensor::suggest_memory_format() == fmt, torch's own rule
    (torch._prims_common.suggest_memory_format): a channel slice of a
    channels_last tensor, or an N x C x 1 x 1 tensor with channels_last
    strides, suggests channels_last; plain contiguous strides suggest
    contiguous. torch asks it to choose cuDNN's format and a copy's layout."""
    if not isinstance(t, torch.Tensor) or t.dim() not in (4, 5):
        return False
    if suggest_memory_format is not None:
        try:
            return suggest_memory_format(t) == fmt
        except (RuntimeError, TypeError):
            pass
    return not t.is_contiguous() and t.is_contiguous(memory_format=fmt)


aten = torch.ops.aten

FORWARD_OPS = (aten.convolution.default, aten._convolution.default)
BACKWARD_OPS = (aten.convolution_backward.default,)
# aten._convolution's own switch (its 12th argument): False sends the call to
# torch's native CUDA kernels whatever torch.backends.cudnn.enabled says.
_CUDNN_ENABLED_ARG = 11


def uses_cudnn(func, args, kwargs=None) -> bool:
    """Whether a convolution call goes to cuDNN on a CUDA build: cuDNN
    switched on (torch.backends.cudnn.enabled, which convolution and
    convolution_backward read when they run; aten._convolution reads its
    own cudnn_enabled argument instead). False for any other op."""
    if func is aten._convolution.default:
        kwargs = kwargs or {}
        on = (args[_CUDNN_ENABLED_ARG] if len(args) > _CUDNN_ENABLED_ARG
              else kwargs.get("cudnn_enabled", True))
        return bool(on)
    if func in FORWARD_OPS or func in BACKWARD_OPS:
        return bool(torch.backends.cudnn.enabled)
    return False


def _ints(v) -> str:
    return ",".join(str(int(x)) for x in v)


def memory_format(inp, weight) -> str:
    """'channels_last' when input or weight suggests it (cuDNN then runs
    NHWC), 'contiguous' when both are contiguous, else 'strided' (torch
    copies to contiguous first)."""
    def cl(t):
        if t.dim() not in (4, 5):
            return False
        fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
        if not t.is_contiguous() and t.is_contiguous(memory_format=fmt):
            return True
        # A tensor with gaps that torch's rule calls channels_last (a channel
        # slice of a channels_last tensor: CSPNet's cross-stage split) is
        # copied to channels_last, and cuDNN runs it so (conv_input.py): its
        # key is channels_last, not "strided" (holdout 32's CSPResNet-50,
        # whose "strided" keys carried NCHW plans' workspaces the H100 never
        # took). Dense tensors keep the plain test here (N x C x 1 x 1 ones
        # are both layouts at once; the weight's case is below).
        return not dense(t) and suggests(t, fmt)
    if cl(inp) or cl(weight):
        return "channels_last"
    # A plain NCHW input with spatial extent, and a 1 x 1 weight whose
    # channels_last strides are also contiguous ones: torch's rule calls the
    # weight channels_last, so cuDNN runs channels_last on a copy of the
    # input (conv_input.py), not NCHW (CSPResNet-50's transition after a
    # torch.cat of two formats: its NCHW key carried a 36.75 MiB workspace
    # the H100 never took). Over N x C x 1 x 1 inputs both layouts are one.
    if inp.dim() in (4, 5) and any(n > 1 for n in inp.shape[2:]):
        fmt = torch.channels_last if inp.dim() == 4 else torch.channels_last_3d
        if weight.dim() == inp.dim() and suggests(weight, fmt):
            return "channels_last"
    if inp.is_contiguous() and weight.is_contiguous():
        return "contiguous"
    return "strided"


def flags() -> str:
    b = torch.backends.cudnn
    return f"{int(bool(b.benchmark))},{int(bool(b.deterministic))},{int(bool(b.allow_tf32))}"


def conv_key(func, args, kwargs=None) -> str | None:
    """The table key of an aten.convolution / aten.convolution_backward
    call, or None for any other op, for a call that does not go to cuDNN
    (uses_cudnn: it asks for no cuDNN workspace), or a call whose tensors
    are not all tensors (which cannot happen for these schemas)."""
    kwargs = kwargs or {}
    if (func in FORWARD_OPS or func in BACKWARD_OPS) and not uses_cudnn(func, args, kwargs):
        return None
    call_flags = flags()
    if func in FORWARD_OPS:
        names = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed",
                 "output_padding", "groups", "benchmark", "deterministic", "cudnn_enabled",
                 "allow_tf32")
        a = dict(zip(names, args))
        a.update(kwargs)
        inp, w = a["input"], a["weight"]
        extra = f"bias={int(a['bias'] is not None)}"
        kind = "fwd"
        if func is aten._convolution.default:  # its own flags, not torch.backends.cudnn's
            call_flags = ",".join(str(int(bool(a.get(k, 0))))
                                  for k in ("benchmark", "deterministic", "allow_tf32"))
    elif func in BACKWARD_OPS:
        names = ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation",
                 "transposed", "output_padding", "groups", "output_mask")
        a = dict(zip(names, args))
        a.update(kwargs)
        inp, w = a["input"], a["weight"]
        extra = "mask=" + "".join(str(int(bool(m))) for m in a["output_mask"])
        kind = "bwd"
    else:
        return None
    if not isinstance(inp, torch.Tensor) or not isinstance(w, torch.Tensor):
        return None
    return "|".join([
        kind, "in=" + _ints(inp.shape), "w=" + _ints(w.shape), "s=" + _ints(a["stride"]),
        "p=" + _ints(a["padding"]), "d=" + _ints(a["dilation"]),
        "op=" + _ints(a["output_padding"]), f"g={int(a['groups'])}",
        f"t={int(bool(a['transposed']))}", str(inp.dtype).replace("torch.", ""),
        "fmt=" + memory_format(inp, w), extra, "flags=" + call_flags])
