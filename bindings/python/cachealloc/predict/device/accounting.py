"""What a recorded step holds at its optimizer steps, by kind: parameters,
gradients and optimizer state (bytes of their storages on the fake cuda
device, each storage counted once). The answer prints it beside the
predicted peak allocated, whose remainder is activations, autograd's saved
tensors, temporaries and workspaces: a plausibility line a reader can check
against the model's size (docs/prediction.md). Read after each
optimizer.step() (a global post-step hook), when gradients still exist; the
largest total seen is kept.

Given the recording, it also tags each of those storages' allocation ids by
kind (peak_makeup.py reads the tags: what the peak is made of) and notes
the event index at which each step ended (where the page marks the steps).
"""
from __future__ import annotations

import torch


def _add(t, seen: set) -> int:
    if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
        return 0
    s = t.untyped_storage()
    if id(s) in seen:
        return 0
    seen.add(id(s))
    return s.nbytes()


class StepAccounting:
    """Register with torch.optim's global post-step hook; `result` is the
    breakdown at the step with the most bytes (None before any step);
    `tags` {allocation id: "parameters" | "gradients" | "optimizer_state"}
    and `step_ends` (event indices) when a recording is given."""

    def __init__(self, recording=None):
        self.result = None
        self.recording = recording
        self.tags = {}
        self.step_ends = []

    def _tag(self, t, kind: str) -> None:
        if self.recording is not None and isinstance(t, torch.Tensor):
            aid = self.recording.allocation_of(t)
            if aid is not None:
                self.tags.setdefault(aid, kind)  # first kind wins: a parameter stays one

    def __call__(self, opt, args, kwargs) -> None:
        seen: set = set()
        params = grads = state = 0
        for group in opt.param_groups:
            for p in group["params"]:
                params += _add(p, seen)
                grads += _add(p.grad, seen)
                self._tag(p, "parameters")
                self._tag(p.grad, "gradients")
        for per_param in opt.state.values():
            for v in per_param.values():
                state += _add(v, seen)
                self._tag(v, "optimizer_state")
        if self.recording is not None:
            self.step_ends.append(len(self.recording.events))
        total = params + grads + state
        if self.result is None or total > self.result["total"]:
            self.result = {"parameters": params, "gradients": grads, "optimizer_state": state,
                           "total": total}
