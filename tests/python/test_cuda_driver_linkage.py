"""libcachealloc.so must load where no CUDA driver is installed: the CUDA
backends link only the runtime (libcudart), and the driver functions that
expandable segments need (cuMemCreate, cuMemMap, ...) are looked up at run
time (bindings/cuda/driver_api.h), as PyTorch does."""
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


def test_library_needs_no_cuda_driver_library():
    out = subprocess.run([_tool("readelf"), "-d", str(_library())], capture_output=True,
                         text=True, check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert needed, out
    assert not [n for n in needed if n.startswith("libcuda.so")], needed


def test_library_calls_no_driver_function_directly():
    out = subprocess.run([_tool("nm"), "-D", "--undefined-only", str(_library())],
                         capture_output=True, text=True, check=True).stdout
    undefined = [line.split()[-1] for line in out.splitlines() if line.strip()]
    if not any(s.startswith("cudaMalloc") for s in undefined):
        pytest.skip("this build has no CUDA backends (CUDA toolkit not found at build time)")
    # cu* (driver) symbols would bind to libcuda at load time; only the
    # runtime's cuda* are allowed.
    driver = [s for s in undefined if s.startswith("cu") and not s.startswith("cuda")]
    assert not driver, driver
