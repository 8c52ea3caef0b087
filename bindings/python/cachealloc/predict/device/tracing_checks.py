"""Libraries that ask "is this tensor a FakeTensor?" to tell whether they are
being traced (torch.compile/export) take the fake device's tensors for a
trace, and then skip the value checks an eager GPU run makes. On the GPU
those tensors are plain, so the answer there is "no". Here it is "no" when
the tensor's value is known (known_values.py: the check then reads it as
the GPU would), and stays "yes" when it is not: the library then takes its
data-independent path (for a mask: built, as a batch with padding needs),
not a placeholder's guess.

The case that matters: transformers (5.x, utils/import_utils.py) has
`is_tracing(t)`, true for a FakeTensor (`is_fake_tensor`). Its mask builders
(masking_utils.py) skip the attention mask when no token is padded
(`padding_mask.all()`) unless tracing; traced, they always build it. A BERT
step with an all-ones attention mask then ran scaled_dot_product_attention
with an fp32 additive mask on the fake device and with no mask on the GPU
(the memory-efficient kernel's bias and its saved copies: +1.9 % peak
allocated at batch 16, seq 512).

Installed by script_support.install for the recording's duration: the module
is patched now if already imported, or when it is imported (an import hook,
since the script imports transformers after the fake device is set up).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

# module -> function answering "is this a FakeTensor (being traced)?"
CHECKS = {"transformers.utils.import_utils": "is_fake_tensor"}


def _fake_unless_known(known):
    """is_fake_tensor for the recording: a FakeTensor whose value is known
    counts as plain (as on the GPU); one with unknown data stays fake."""
    from torch._subclasses.fake_tensor import FakeTensor

    def is_fake_tensor(x) -> bool:
        return isinstance(x, FakeTensor) and not known.is_known(x)
    return is_fake_tensor


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of a CHECKS module so that
    the check is replaced once the module has run."""

    def __init__(self, dev):
        self.dev = dev

    def find_spec(self, name, path=None, target=None):
        if name not in CHECKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, dev = spec.loader, self.dev

        class _Patching(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                _patch(dev, module)

        spec.loader = _Patching()
        return spec


def _patch(dev, module) -> None:
    name = CHECKS[module.__name__]
    if hasattr(module, name):
        dev._set(module, name, _fake_unless_known(dev.recording.known))


def install(dev) -> None:
    """dev: the FakeCudaDevice (dev._set is undone on its exit)."""
    for name in CHECKS:
        if name in sys.modules:
            _patch(dev, sys.modules[name])
    dev._set(sys, "meta_path", [_PatchOnImport(dev)] + list(sys.meta_path))
