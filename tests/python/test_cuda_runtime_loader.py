"""The CUDA runtime is found at run time (bindings/cuda/cuda_runtime_loader.h):
cachealloc_cuda_support says which library serves the CUDA backends, or
why none does and how to fix it, and the cuda backend refuses with the same
words. Each case runs in a fresh process (the runtime is looked for once per
process)."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

PROBE = """
import ctypes, sys
sys.path.insert(0, sys.argv[1])
import cachealloc
detail = ctypes.c_char_p()
status = cachealloc.lib().cachealloc_cuda_support(ctypes.byref(detail))
print(status)
print(detail.value.decode())
try:
    cachealloc.init(backend="cuda")
    print("init: ok")
except cachealloc.CacheallocError as e:
    print("init:", e)
"""


def _probe(**env):
    out = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "bindings" / "python")],
                         capture_output=True, text=True, env=dict(os.environ, **env), timeout=60)
    assert out.returncode == 0, out.stderr
    status, detail, init = out.stdout.strip().splitlines()
    return int(status), detail, init


def test_a_runtime_that_cannot_be_loaded_is_named_with_the_fix(tmp_path):
    status, detail, init = _probe(CACHEALLOC_CUDART=str(tmp_path / "libcudart.so.13"))
    if status == -1:
        pytest.skip("this build has no CUDA backends (CUDA headers not found at build time)")
    assert status == 0
    assert f"CACHEALLOC_CUDART={tmp_path}/libcudart.so.13 cannot be loaded" in detail
    # The backend refuses with the loader's words, not "no CUDA device".
    assert "CACHEALLOC_CUDART=" in init and "cannot be loaded" in init


def test_the_runtime_found_is_reported_with_its_version():
    status, detail, init = _probe()
    if status == -1:
        pytest.skip("this build has no CUDA backends (CUDA headers not found at build time)")
    if status == 0:
        pytest.skip(f"no CUDA runtime on this machine: {detail}")
    path, version = detail.rsplit(" (version ", 1)
    assert "libcudart.so.1" in path and os.path.isfile(path)
    assert int(version.rstrip(")")) >= 12000


RETRY = """
import ctypes, os, sys
sys.path.insert(0, sys.argv[1])
import cachealloc
detail = ctypes.c_char_p()
os.environ["CACHEALLOC_CUDART"] = sys.argv[2] + ".missing"
print(cachealloc.lib().cachealloc_cuda_support(ctypes.byref(detail)))
os.environ["CACHEALLOC_CUDART"] = sys.argv[2]
print(cachealloc.lib().cachealloc_cuda_support(ctypes.byref(detail)))
"""


def test_a_failed_look_is_not_kept():
    # As when cachealloc asks before torch has loaded its runtime.
    status, detail, _ = _probe()
    if status != 1:
        pytest.skip(f"no CUDA runtime here, or no CUDA backends: {detail}")
    path = detail.rsplit(" (version ", 1)[0]
    out = subprocess.run([sys.executable, "-c", RETRY, str(ROOT / "bindings" / "python"), path],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["0", "1"], out.stdout + out.stderr
