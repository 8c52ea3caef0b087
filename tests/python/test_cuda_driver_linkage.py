"""libcachealloc.so must load where no CUDA driver or toolkit is installed,
and serve torch's cu12 and cu13 builds alike: it links no CUDA library.
The runtime's functions are forwarders into the libcudart the process uses,
found at run time (bindings/cuda/cuda_runtime_loader.h), and the driver
functions that expandable segments need (cuMemCreate, cuMemMap, ...) are
looked up through it (bindings/cuda/driver_api.h), as PyTorch does."""
import os
import pathlib
import shutil
import subprocess

import pytest

BUILD = pathlib.Path(os.environ.get("CACHEALLOC_BUILD",
                                    pathlib.Path(__file__).resolve().parents[2] / "build"))


def _library():
    lib = BUILD / "bindings" / "libcachealloc.so"
    if not lib.exists():
        pytest.fail(f"{lib} not built: ninja -C {BUILD} cachealloc_shared")
    return lib


def _tool(name):
    if shutil.which(name) is None:
        pytest.skip(f"{name} (binutils) is not installed")
    return name


def test_library_needs_no_cuda_library():
    out = subprocess.run([_tool("readelf"), "-d", str(_library())], capture_output=True,
                         text=True, check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert needed, out
    assert not [n for n in needed if n.startswith(("libcuda.so", "libcudart"))], needed


def _has_cuda_backends():
    out = subprocess.run([_tool("nm"), "-C", str(_library())], capture_output=True, text=True).stdout
    return "cuda_runtime_library" in out


def test_library_leaves_no_cuda_symbol_to_the_loader():
    """No cuda*/cu* symbol is undefined (bound at load time to whatever
    library comes first) or exported (the forwarders would then stand in
    for torch's own runtime calls)."""
    if not _has_cuda_backends():
        pytest.skip("this build has no CUDA backends (CUDA headers not found at build time)")
    undefined = subprocess.run([_tool("nm"), "-D", "--undefined-only", str(_library())],
                               capture_output=True, text=True, check=True).stdout.split()
    exported = subprocess.run([_tool("nm"), "-D", "--defined-only", str(_library())],
                              capture_output=True, text=True, check=True).stdout.split()
    assert not [s for s in undefined if s.startswith("cu")], undefined
    assert not [s for s in exported if s.startswith("cu")], exported
