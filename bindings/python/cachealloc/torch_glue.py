"""Finding and loading the PyTorch glue (libcachealloc_torch.so), which must
have been compiled against the running torch release.

Where it comes from, in order: $CACHEALLOC_TORCH_LIBRARY (used as given:
a mismatch is an error); beside libcachealloc.so (pip puts it there when
the build saw torch, `pip install --no-build-isolation .`); the source
checkout's build; else compiled for the running torch into a cache
(glue_build.py). A copy built for another release is passed over.
"""
from __future__ import annotations

import ctypes
import os
import pathlib
import re

from . import glue_build
from ._native import dev_build_dir, lib, library_path


def release(version: str) -> tuple:
    """(major, minor, patch) of a torch version, from each part's leading
    digits: "2.11.0+cu130" -> (2, 11, 0), "2.6.0rc1" -> (2, 6, 0), "2.11" ->
    (2, 11, 0). Nightlies of one release share it, though their layouts may
    differ: the check below cannot tell them apart."""
    parts = (version.split("+")[0].split(".") + ["0", "0", "0"])[:3]
    return tuple(int(re.match(r"\d*", p).group() or 0) for p in parts)


def load(path: str, running: str):
    """Loads libcachealloc_torch.so after checking that it was compiled
    against the running torch release: it overrides virtual functions of
    PyTorch's allocator classes, whose layout may change between releases,
    so a mismatch could crash instead of failing. Raises RuntimeError naming
    both versions (or the loader's error)."""
    # libcachealloc.so first (and its shared libstdc++ with it), then the
    # glue with its symbols kept local: nothing in the glue may take part in
    # resolving symbols of libraries loaded later. (Loading runs the glue's
    # static constructors before the check; they only build empty objects.)
    lib()
    try:
        g = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        raise RuntimeError(f"cachealloc: cannot load the PyTorch glue {path}: {e}. Rebuild it "
                           "against the installed torch, or pass torch_glue=False") from e
    try:
        built = g.cachealloc_torch_built_for
    except AttributeError:
        raise RuntimeError(f"cachealloc: the PyTorch glue {path} predates cachealloc's torch version "
                           "check (it does not say which torch it was built against); rebuild it, "
                           "or pass torch_glue=False") from None
    built.restype = ctypes.c_char_p
    built_for = (built() or b"").decode()
    if release(built_for) != release(running):
        raise RuntimeError(
            f"cachealloc: the PyTorch glue {path} was built against torch {built_for}, but torch "
            f"{running} is running. Rebuild it against the installed torch (cmake -S . -B build "
            "finds it), or pass torch_glue=False to install the plain C entry points")
    return g


def _prebuilt() -> list:
    """Glue libraries built with the package or the checkout, if any."""
    found = []
    try:
        found.append(pathlib.Path(library_path()).parent / "libcachealloc_torch.so")
    except FileNotFoundError:
        pass
    build = dev_build_dir()
    if build is not None:
        found.append(build / "bindings" / "torch" / "libcachealloc_torch.so")
    return [str(p) for p in found if p.is_file()]


def find_and_load(torch_module):
    """The loaded glue for torch_module (a CUDA build of torch), compiling
    it for this torch when no prebuilt one fits. Raises RuntimeError (or
    glue_build.GlueBuildError) saying why there is none."""
    env = os.environ.get("CACHEALLOC_TORCH_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise RuntimeError(f"cachealloc: CACHEALLOC_TORCH_LIBRARY={env} does not exist")
        return load(env, torch_module.__version__)
    for path in _prebuilt():
        try:
            return load(path, torch_module.__version__)
        except RuntimeError:
            continue  # built for another torch: compile one for this torch
    return load(glue_build.build(torch_module), torch_module.__version__)
