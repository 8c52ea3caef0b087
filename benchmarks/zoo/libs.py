"""The model libraries the zoo builds from, imported the one way that works
both on the GPU machine (torch 2.11, torchvision 0.26: its C ops load) and
on a CPU machine whose torchvision wheel was built for another torch
(torch 2.13 CPU with torchvision 0.28+cu130: its _C.so cannot load).

torchvision registers fake (meta) kernels for its C ops at import
(torchvision/_meta_registrations.py), which fails with "operator
torchvision::nms does not exist" when _C.so did not load. The zoo uses no
torchvision op (detection only), so when the library cannot load, the two
schemas that import touches are declared with no kernel: calling them would
fail loudly, importing works. This is the ONE place that does it; every
zoo module goes through here, and so do timm and transformers (both import
torchvision when it is installed: timm's data transforms, transformers'
image utilities, which every model's loss module pulls in)."""
from __future__ import annotations

import glob
import importlib.util
import os
import sys

# The ops torchvision's import registers fake kernels for, as its _C
# library declares them (torchvision/csrc/ops/nms.cpp, quantized/qnms).
_SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
}


def _declare_missing_ops() -> str:
    """Loads torchvision's C library if it can; else declares the schemas.
    Returns how the ops came to exist ("library", "declared", "present")."""
    import torch
    try:
        torch._C._get_schema("torchvision::nms", "")
        return "present"
    except RuntimeError:
        pass
    spec = importlib.util.find_spec("torchvision")
    if spec is None:
        raise ImportError("torchvision is not installed (scripts/install_deps.sh installs it)")
    libs = glob.glob(os.path.join(spec.submodule_search_locations[0], "_C*.so"))
    if libs:
        try:
            torch.ops.load_library(libs[0])
            return "library"
        except OSError:  # built against another torch: the case this module exists for
            pass
    for name, schema in _SCHEMAS.items():
        torch.library.define(f"torchvision::{name}", schema)
    return "declared"


TORCHVISION_OPS = None  # how the C ops came to exist, once torchvision is imported


def _torchvision_importable() -> None:
    global TORCHVISION_OPS
    if "torchvision" not in sys.modules and importlib.util.find_spec("torchvision") is not None:
        TORCHVISION_OPS = _declare_missing_ops()


def torchvision():
    _torchvision_importable()
    import torchvision as tv
    return tv


def timm():
    _torchvision_importable()
    import timm as t
    return t


def transformers():
    _torchvision_importable()
    import transformers as t
    return t


def versions() -> dict:
    """The versions of every library a zoo setup may use (None: not
    installed): the imported module's, else the package metadata's (nothing
    is imported here)."""
    from importlib import metadata
    out = {}
    for name in ("torch", "torchvision", "timm", "transformers"):
        mod = sys.modules.get(name)  # the one imported, if it was: it is what ran
        try:
            out[name] = getattr(mod, "__version__", None) or metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    if TORCHVISION_OPS:
        out["torchvision_ops"] = TORCHVISION_OPS
    return out
