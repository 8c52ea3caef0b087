"""Finding and loading the PyTorch glue (libcachealloc_torch.so), which must
have been compiled against the running torch release.

Where it comes from, in order: $CACHEALLOC_TORCH_LIBRARY (used as given:
a mismatch is an error); the prebuilt glue for the running release
(libcachealloc_torch-VERSION.so beside libcachealloc.so: the wheel holds
one per supported release, bindings/torch/glue_matrix.cmake); the one built
against the local torch (beside libcachealloc.so when the build saw torch,
`pip install --no-build-isolation .`, or the source checkout's build);
else compiled for the running torch into a cache (glue_build.py). A copy
built for another release is passed over. A torch no prebuilt glue fits,
on a machine that cannot compile one, is refused naming the releases
this package has glue for.
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


def _folders() -> list:
    """Where built glue libraries are: beside libcachealloc.so, and the
    source checkout's build of the glue."""
    found = []
    try:
        found.append(pathlib.Path(library_path()).parent)
    except FileNotFoundError:
        pass
    build = dev_build_dir()
    if build is not None:
        found.append(build / "bindings" / "torch")
    return found


_MATRIX_NAME = re.compile(r"libcachealloc_torch-(\d+\.\d+\.\d+)\.so$")


def prebuilt_releases() -> dict:
    """{"2.13.0": path, ...}: the glue prebuilt per torch release (the
    compile matrix, bindings/torch/glue_matrix.cmake) that came with the
    package or the checkout's build; the package's copy wins."""
    found = {}
    for folder in reversed(_folders()):
        for path in (sorted(folder.glob("libcachealloc_torch-*.so")) if folder.is_dir() else []):
            m = _MATRIX_NAME.search(path.name)
            if m:
                found[m.group(1)] = str(path)
    return dict(sorted(found.items(), key=lambda kv: release(kv[0])))


def candidates(torch_module) -> list:
    """[(path, where it came from)] of the glue libraries that may fit
    torch_module, in the order they are tried; nothing is loaded."""
    env = os.environ.get("CACHEALLOC_TORCH_LIBRARY")
    if env:
        return [(env, "CACHEALLOC_TORCH_LIBRARY")]
    out = []
    # The matrix is built with the C++11 string ABI (every supported
    # release's Linux wheels use it); a torch built otherwise needs its own.
    if bool(getattr(torch_module._C, "_GLIBCXX_USE_CXX11_ABI", True)):
        for version, path in prebuilt_releases().items():
            if release(version) == release(torch_module.__version__):
                out.append((path, f"prebuilt for torch {version}"))
    for folder in _folders():
        local = folder / "libcachealloc_torch.so"
        if local.is_file():
            out.append((str(local), "built with the package against the local torch"))
    cached = glue_build.cached(torch_module)
    if cached:
        out.append((cached, "compiled for this torch (cache)"))
    return out


def find_and_load(torch_module):
    """The loaded glue for torch_module (a CUDA build of torch), compiling
    it for this torch when no prebuilt one fits. Raises RuntimeError (or
    glue_build.GlueBuildError) saying why there is none."""
    tried = candidates(torch_module)
    if tried and tried[0][1] == "CACHEALLOC_TORCH_LIBRARY":
        env = tried[0][0]
        if not os.path.isfile(env):
            raise RuntimeError(f"cachealloc: CACHEALLOC_TORCH_LIBRARY={env} does not exist")
        return load(env, torch_module.__version__)
    for path, _ in tried:
        try:
            return load(path, torch_module.__version__)
        except RuntimeError:
            continue  # built for another torch: compile one for this torch
    try:
        return load(glue_build.build(torch_module), torch_module.__version__)
    except glue_build.GlueBuildError as e:
        raise glue_build.GlueBuildError(f"{e}\n{unsupported_message(torch_module)}") from e


def unsupported_message(torch_module) -> str:
    """Says which torch releases have a prebuilt glue here, for a torch
    that has none."""
    have = ", ".join(prebuilt_releases()) or "none (a source install)"
    return (f"cachealloc: no prebuilt PyTorch glue fits torch {torch_module.__version__}; this "
            f"package has glue prebuilt for torch {have}. Install one of those torch releases, "
            "or let cachealloc compile the glue (a C++ compiler and the CUDA runtime's headers), "
            "or pass torch_glue=False (plain mode)")
