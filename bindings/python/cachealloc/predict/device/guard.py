"""Builds and loads fake_guard.cc: the fake device's CUDA device guard and
CUDA hooks (see that file for why each is needed).

Imports no torch, and must run before torch is imported: ATen creates its
CUDA hooks once, on first use. That is why a fake-device recording always
runs in a fresh worker process (worker.py), never in the caller's.

The library is compiled once per torch install with the system C++
compiler against the installed torch's own headers (about 5 s) and cached
under $CACHEALLOC_CACHE or ~/.cache/cachealloc.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

SOURCE = pathlib.Path(__file__).with_name("fake_guard.cc")


class GuardError(RuntimeError):
    pass


def torch_dir() -> pathlib.Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise GuardError("torch is not installed in this Python")
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def torch_version(tdir: pathlib.Path) -> str:
    text = (tdir / "version.py").read_text()
    for line in text.splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("'\"")
    return "unknown"


def _cache_dir() -> pathlib.Path:
    root = os.environ.get("CACHEALLOC_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "cachealloc")
    return pathlib.Path(root)


def build() -> pathlib.Path:
    """Path of the compiled guard library for the installed torch, building it if needed."""
    tdir = torch_dir()
    version = torch_version(tdir)
    key = hashlib.sha256(SOURCE.read_bytes() + str(tdir).encode() + version.encode()).hexdigest()[:16]
    out = _cache_dir() / f"fake_guard-{version}-{key}.so"
    if out.exists():
        return out
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise GuardError("the fake device needs a C++ compiler (g++) to build its CUDA guard; none found")
    if not (tdir / "include" / "c10" / "core" / "impl" / "FakeGuardImpl.h").exists():
        raise GuardError(f"torch at {tdir} has no C++ headers (torch/include): cannot build the fake guard")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    cmd = [cxx, "-shared", "-fPIC", "-O1", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1",
           f"-I{tdir / 'include'}", str(SOURCE), f"-L{tdir / 'lib'}", "-lc10", "-ltorch_cpu",
           f"-Wl,-rpath,{tdir / 'lib'}", "-o", str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise GuardError("building the fake CUDA guard failed:\n" + proc.stderr[-2000:])
    os.replace(tmp, out)
    return out


def load() -> None:
    """Loads the guard into this process; raises GuardError if torch was
    imported first (its CUDA hooks are then fixed)."""
    if "torch" in sys.modules:
        raise GuardError("the fake device must be set up before torch is imported "
                         "(run the recording through cachealloc.predict, which starts a fresh process)")
    global _lib
    _lib = ctypes.CDLL(str(build()), mode=ctypes.RTLD_GLOBAL)
    if _lib.cachealloc_fake_cuda_hooks_active() != 1:
        raise GuardError("the fake CUDA hooks did not take effect")


def after_torch_import() -> None:
    """Puts the fake CUDA guard back over a CUDA build's own (registered when
    torch imported libtorch_cuda)."""
    _lib.cachealloc_fake_cuda_guard_register()


_lib = None
