"""Data-dependent loops on the fake device: caught, or answered as the GPU
would answer them.

The fake device has no data: a value read (`.item()`, `bool(t)`, `any()`)
gets a placeholder (1, 1.0, True). A loop that waits for a value to change
(rejection sampling: `while True: ...; if not mask.any(): break`) then
never ends. Two rules, applied by RecordingMode at each placeholder read:

1. Weight initialisation (the read runs in torch.nn.init's own code, on a
   fake tensor): a bool read answers False. torch.nn.init reads values only
   to decide whether to draw again (torch 2.13's trunc_normal_ samples by
   rejection, `if not mask.any(): break`); on a GPU, with the bounds a few
   standard deviations out as every model zoo uses them, no sample is
   rejected and the first check says False. Memory-wise a redraw repeats the
   first draw's temporaries at the same sizes, which the cache serves, so
   answering False costs no request the GPU would have made.
   (init_reads counts these answers; the summary reports them.)

2. Any other loop: a read that *decides a branch* (the frame's current
   instruction is a conditional jump, or the read's value reaches one on
   the same line before being stored, returned or dropped: `if not
   m.any()`, `while err.item() > tol`) from the same call stack (every
   frame's code and instruction), LOOP_READS times with no optimizer step
   between them, ends the prediction: failure kind "loop", naming the
   file, the line and the placeholder.

Why rule 2 cannot fire on a normal training script: its reads of values
are logging and accumulation (`loss.item()`, `total += acc.item()`): not
branches, never counted. The branches it takes on values (early stopping,
`if loss.item() < best`, a NaN guard: those answer from known_values.py
and are no placeholder at all) happen once or a few times per step, and
every optimizer step clears the counts. What can still reach LOOP_READS:
more than LOOP_READS value-dependent branches on one line inside one
step (e.g. an evaluation loop over more than 1000 batches that breaks on a
value) before the first optimizer step; such a loop, run on placeholders,
would not mean what it means on the GPU anyway. A rejection loop on the
fake device spins at about 1-3 ms per round (a few fake ops), so 1000
rounds are caught in seconds.
"""
from __future__ import annotations

import bisect
import dis
import linecache
import os
import sys

import torch

from .failure import PredictionRefused, StopRecording

LOOP_READS = 1000       # branch-deciding placeholder reads of one stack per step window
_MAX_KEYS = 100_000     # distinct stacks kept per window (bounded memory)

_TORCH = os.path.dirname(torch.__file__)
_CACHEALLOC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# torch's own dispatch machinery between a value read and the code that asked for it.
_PLUMBING = tuple(os.path.join(_TORCH, p) for p in (
    "_compile.py", "_dynamo" + os.sep, "utils" + os.sep + "_python_dispatch.py", "_ops.py",
    "utils" + os.sep + "_stats.py", "_subclasses" + os.sep, "_tensor.py", "overrides.py",
    "utils" + os.sep + "_pytree.py", "_prims_common" + os.sep, "_refs" + os.sep,
    "_decomp" + os.sep, "_meta_registrations.py")) + (_CACHEALLOC, "<frozen")
_INIT_FILE = os.path.abspath(torch.nn.init.__file__)
# Where a value stops flowing towards a branch on its line.
_SINKS = ("STORE_", "RETURN_", "POP_TOP", "YIELD_VALUE", "JUMP_FORWARD", "JUMP_BACKWARD",
          "JUMP_ABSOLUTE", "END_FOR", "FOR_ITER")


def _is_condition(opname: str) -> bool:
    return "_IF_" in opname or opname in ("UNARY_NOT", "TO_BOOL")


_instr_cache: dict = {}     # code -> ([offsets], [instructions]), bounded


def decides_branch(frame) -> bool:
    """Whether the value being read at frame's current instruction decides a
    branch on that line (see the module's rule 2)."""
    code = frame.f_code
    cached = _instr_cache.get(code)
    if cached is None:
        instrs = list(dis.get_instructions(code))
        cached = ([ins.offset for ins in instrs], instrs)
        if len(_instr_cache) > 10_000:
            _instr_cache.clear()
        _instr_cache[code] = cached
    offsets, instrs = cached
    # f_lasti may point into the inline cache entries that follow a call
    # (Python >= 3.11), which dis does not list: the instruction is the last
    # one at or before it.
    i = bisect.bisect_right(offsets, frame.f_lasti) - 1
    if i < 0:
        return False
    for ins in instrs[i:i + 16]:
        if _is_condition(ins.opname):
            return True
        if ins.opname.startswith(_SINKS):
            return False
    return False


_HANDLERS = ("__torch_function__", "__torch_dispatch__")


def site_frame(frame):
    """The innermost frame outside torch's dispatch machinery, cachealloc,
    and any mode's or subclass's handler (`with torch.device("cuda")` is a
    TorchFunctionMode whose __torch_function__ sits between `bool(mask)`
    and the code that tests it): the code that asked for the value."""
    while frame is not None and (frame.f_code.co_filename.startswith(_PLUMBING)
                                 or frame.f_code.co_name in _HANDLERS):
        frame = frame.f_back
    return frame


class PlaceholderReads:
    """Consulted by RecordingMode for every placeholder read; step() is an
    optimizer post-step hook (fake_device.py registers it)."""

    def __init__(self, reads: int = LOOP_READS):
        self.reads = reads
        self.init_reads = 0          # bool reads inside torch.nn.init answered False
        self._counts: dict = {}      # stack key -> branch-deciding reads this window

    def step(self, *unused) -> None:
        self._counts.clear()

    def answer(self, placeholder):
        """The value to give this read: the placeholder, or False for an
        init's redraw check; raises StopRecording for a caught loop."""
        site = site_frame(sys._getframe(1))
        if site is None:
            return placeholder
        if isinstance(placeholder, bool) and os.path.abspath(site.f_code.co_filename) == _INIT_FILE:
            self.init_reads += 1
            return False
        if not decides_branch(site):
            return placeholder
        key = []
        f = site
        while f is not None:
            key.append((f.f_code, f.f_lasti))
            f = f.f_back
        key = tuple(key)
        n = self._counts.get(key, 0) + 1
        if len(self._counts) >= _MAX_KEYS and key not in self._counts:
            self._counts.clear()
        self._counts[key] = n
        if n >= self.reads:
            raise StopRecording(_loop_caught(site, placeholder, n))
        return placeholder


def _loop_caught(site, placeholder, n) -> PredictionRefused:
    from .failure import user_line
    file, line = site.f_code.co_filename, site.f_lineno
    source = linecache.getline(file, line).strip()
    caller = user_line(site)
    called_from = "" if caller.startswith(f"{file}:{line}:") else f", called from {caller}"
    detail = (f"a data-dependent loop: {file}:{line} (`{source}`) tested the fake device's "
              f"placeholder value {placeholder!r} {n} times with no optimizer step between"
              f"{called_from}. The fake device has no data, so the value such a loop waits for "
              f"never comes. Loops over CPU tensors run for real in cpu-init mode (build the "
              f"model on the CPU, then .to('cuda')); a loop over CUDA tensors cannot be "
              f"predicted: take it out of the step, or bound it")
    return PredictionRefused(f"caught in a loop: {detail}", kind="loop", where=f"{file}:{line}",
                             detail=detail)
