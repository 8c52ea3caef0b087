"""Compiles the PyTorch glue (libcachealloc_torch.so) against the torch that
is running, when no glue built for it came with the package.

Why at run time: the glue overrides virtual functions of PyTorch's C++
allocator classes, so it must be compiled against the very torch release it
is loaded into, and an isolated `pip install .` cannot see that torch.
The result is cached per cachealloc version, glue source and torch version
under $CACHEALLOC_CACHE_DIR (default $XDG_CACHE_HOME/cachealloc, else
~/.cache/cachealloc), so it is compiled once (about a minute) and then
only loaded. Processes building at once (torchrun's workers) take turns on
a lock; the library appears under its final name only when complete.

What it needs: a C++20 compiler ($CXX, else c++ or g++), the torch headers
(in every torch wheel), and the CUDA runtime's header and library, from
$CUDA_HOME, /usr/local/cuda or the nvidia-* wheels torch depends on.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional

from ._native import library_path, package_dir, source_tree


class GlueBuildError(RuntimeError):
    """The glue could not be compiled; the message says what is missing."""


def cache_dir() -> pathlib.Path:
    env = os.environ.get("CACHEALLOC_CACHE_DIR")
    if env:
        return pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "cachealloc"


def glue_files(torch_dir: pathlib.Path) -> List[str]:
    """The glue's translation units and the headers of its own they include,
    from bindings/torch/glue_files.txt (the one list, which CMake reads too).
    Raises GlueBuildError when the list is missing."""
    listing = torch_dir / "glue_files.txt"
    try:
        lines = listing.read_text().splitlines()
    except OSError as e:
        raise GlueBuildError(f"cachealloc: the PyTorch glue's file list is missing ({listing}: "
                             f"{e.strerror}); reinstall the package") from None
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _sources() -> tuple:
    """(the glue's .cpp files, its own headers, include root holding
    bindings/c_api/cachealloc.h, the CPU-wheel shim folder): the package's
    copy (glue_src/, shipped in the wheel), else the source checkout's."""
    shipped = package_dir() / "glue_src"
    root = shipped if shipped.is_dir() else source_tree()
    if root is None:
        raise GlueBuildError(f"cachealloc: the PyTorch glue's source is missing ({shipped}); "
                             "reinstall the package")
    torch_dir = root / "bindings" / "torch"
    names = glue_files(torch_dir)
    return ([torch_dir / n for n in names if n.endswith(".cpp")],
            [torch_dir / n for n in names if n.endswith(".h")], root, torch_dir / "cpu_wheel_shim")


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise GlueBuildError(
        "cachealloc: no C++ compiler found ($CXX, c++, g++, clang++). The PyTorch glue must be "
        "compiled once for the installed torch: install a compiler (apt-get install g++), or "
        "build it with the package (pip install --no-build-isolation .), or use "
        "cachealloc.install(torch_glue=False) (plain mode)")


def _cuda_dirs(torch_module) -> tuple:
    """(include dir holding cuda_runtime_api.h, path of libcudart) of the CUDA
    runtime torch uses: a toolkit ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda)
    or the nvidia-* wheels installed beside torch."""
    roots: List[pathlib.Path] = [pathlib.Path(p) for p in (os.environ.get("CUDA_HOME"),
                                                           os.environ.get("CUDA_PATH")) if p]
    roots.append(pathlib.Path("/usr/local/cuda"))
    site = pathlib.Path(torch_module.__file__).resolve().parents[1]
    roots += sorted(site.glob("nvidia/*"))  # nvidia/cuda_runtime (CUDA 12), nvidia/cu13 (13)
    for root in roots:
        include = root / "include"
        if not (include / "cuda_runtime_api.h").is_file():
            continue
        libs = [p for d in ("lib64", "lib", "targets/x86_64-linux/lib")
                for p in sorted((root / d).glob("libcudart.so*"))]
        if libs:
            return include, libs[0]
    raise GlueBuildError(
        "cachealloc: the CUDA runtime's header (cuda_runtime_api.h) and libcudart were not found "
        f"under $CUDA_HOME, /usr/local/cuda or {site}/nvidia; set CUDA_HOME to a CUDA toolkit, "
        "or use cachealloc.install(torch_glue=False) (plain mode)")


def _key(torch_module, files: List[pathlib.Path]) -> str:
    """Cache folder name: what the compiled glue depends on."""
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:12]
    cuda = torch_module.version.cuda or "cpu"
    return f"torch-{torch_module.__version__}-cuda-{cuda}-src-{digest}"


def command(torch_module, output: str) -> List[str]:
    """The compiler command that builds the glue for this torch into output."""
    cpps, _, root, shim = _sources()
    compiler = _compiler()
    torch_dir = pathlib.Path(torch_module.__file__).resolve().parent
    include = torch_dir / "include"
    cuda_include, cudart = _cuda_dirs(torch_module)
    cachealloc_lib = pathlib.Path(library_path()).resolve()
    torch_lib = torch_dir / "lib"
    cmd = [compiler, "-std=c++20", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
           f"-D_GLIBCXX_USE_CXX11_ABI={int(torch_module._C._GLIBCXX_USE_CXX11_ABI)}",
           f'-DCACHEALLOC_TORCH_VERSION="{torch_module.__version__}"',
           f"-I{root}", f"-I{include}", f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
           f"-I{cuda_include}"]
    # CPU-only wheels lack one generated c10/cuda header (see the shim).
    if not (include / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").is_file():
        cmd.append(f"-I{shim}")
    cmd += [str(cpp) for cpp in cpps] + ["-o", output, f"-L{torch_lib}"]
    cmd += [f"-l{name}" for name in ("c10", "torch", "torch_cpu", "c10_cuda", "torch_cuda")
            if (torch_lib / f"lib{name}.so").is_file()]
    # By path: the nvidia wheels ship only libcudart.so.N (no unversioned link).
    cmd += [str(cudart), str(cachealloc_lib),
            # Symbols stay private to the glue (see bindings/torch/CMakeLists.txt).
            "-Wl,--exclude-libs,ALL",
            f"-Wl,-rpath,{cachealloc_lib.parent}", f"-Wl,-rpath,{torch_lib}",
            f"-Wl,-rpath,{cudart.parent}"]
    return cmd


def _cache_target(torch_module) -> pathlib.Path:
    """Where the glue compiled for torch_module is (or goes) in the cache."""
    cpps, headers, root, _ = _sources()
    folder = cache_dir() / _key(torch_module,
                                cpps + headers + [root / "bindings" / "c_api" / "cachealloc.h"])
    return folder / "libcachealloc_torch.so"


def cached(torch_module) -> Optional[str]:
    """Path of a glue already compiled for torch_module, or None."""
    try:
        target = _cache_target(torch_module)
    except GlueBuildError:
        return None
    return str(target) if target.is_file() else None


def build(torch_module, quiet: bool = False) -> str:
    """Path of a glue compiled for torch_module, compiling it first when the
    cache has none. Raises GlueBuildError naming what is missing, or with
    the compiler's last lines when compiling fails."""
    target = _cache_target(torch_module)
    folder = target.parent
    if target.is_file():
        return str(target)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise GlueBuildError(f"cachealloc: cannot create the glue cache {folder}: {e}; set "
                             "CACHEALLOC_CACHE_DIR to a writable folder") from e
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be compiling it
        if target.is_file():
            return str(target)
        fd, partial = tempfile.mkstemp(dir=folder, suffix=".so.partial")
        os.close(fd)
        try:
            cmd = command(torch_module, partial)
            if not quiet:
                print(f"cachealloc: compiling the PyTorch glue for torch {torch_module.__version__} "
                      f"(once, about a minute) into {folder}", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
                raise GlueBuildError(f"cachealloc: compiling the PyTorch glue failed "
                                     f"(exit {proc.returncode}):\n{' '.join(cmd)}\n{tail}")
            os.replace(partial, target)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    return str(target)
