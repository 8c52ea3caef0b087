"""The no-code-change switch on a GPU: a script that never imports
cachealloc runs under `cachealloc run`, and torch.cuda.memory_stats()
comes from cachealloc. Also the first install() compiling the PyTorch glue
for the running torch when no glue came with the library."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON_DIR = ROOT / "bindings" / "python"


def _env(tmp_path, **extra):
    """(environment, interpreter) whose start-up reads the hook's .pth
    (switch_env.py)."""
    from switch_env import switch_env  # tests/gpu (conftest puts it on sys.path)

    return switch_env(tmp_path, **extra)


def _run_script(env_python, *run_options):
    env, python = env_python
    cmd = [python, "-m", "cachealloc.cli", "run", *run_options, "--",
           python, str(ROOT / "tests" / "gpu" / "autoinstall_script.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_script_that_never_imports_cachealloc_runs_on_it_under_cachealloc_run(tmp_path):
    out, stderr = _run_script(_env(tmp_path), "--conf", "max_split_size_mb:64")
    print("KIND", out, stderr[-2000:])
    assert out["cachealloc_loaded"] and out["mode"] == "torch-extension", (out, stderr)
    assert out["allocator_backend"] == "pluggable"  # native says "native"
    assert out["torch_allocated"] == out["cachealloc_allocated"] >= 4 << 20
    assert out["max_split_size"] == 64 << 20  # the --conf reached cachealloc


def test_without_the_switch_the_same_script_runs_on_natives_allocator(tmp_path):
    env, python = _env(tmp_path)
    proc = subprocess.run([python, str(ROOT / "tests" / "gpu" / "autoinstall_script.py")],
                          capture_output=True, text=True, env=env, timeout=600)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["allocator_backend"] == "native" and not out["cachealloc_loaded"]


def test_first_install_compiles_the_glue_for_the_running_torch(tmp_path):
    """A library with no glue beside it (as after an isolated pip install):
    install() compiles one into the cache, then loads it from there."""
    import cachealloc

    lib = pathlib.Path(cachealloc.library_path())
    alone = tmp_path / "lib"
    alone.mkdir()
    for p in lib.parent.iterdir():  # the library and its bundled Abseil, not the glue
        if p.name.endswith(".so") or ".so." in p.name:
            if "cachealloc_torch" not in p.name:
                shutil.copy(p, alone)
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), CACHEALLOC_LIBRARY=str(alone / lib.name),
               CACHEALLOC_CACHE_DIR=str(tmp_path / "cache"), CACHEALLOC_BUILD=str(tmp_path / "none"))
    env.pop("CACHEALLOC_TORCH_LIBRARY", None)
    code = ("import cachealloc, torch; cachealloc.install(); x = torch.ones(1 << 20, device='cuda'); "
            "print(cachealloc.mode(), torch.cuda.memory_stats()['allocated_bytes.all.current'])")
    for attempt in ("compiles", "cached"):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              timeout=600)
        print("KIND", attempt, proc.stdout, proc.stderr[-2000:])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["torch-extension", str(4 << 20)]
        assert ("compiling the PyTorch glue" in proc.stderr) == (attempt == "compiles")
    assert list((tmp_path / "cache").glob("*/libcachealloc_torch.so"))
