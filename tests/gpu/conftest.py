"""GPU tests: they need PyTorch with CUDA and a GPU, and skip (saying why)
everywhere else."""
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))  # native_vs_cachealloc


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}, cuda={torch.version.cuda})"
    try:
        import cachealloc

        cachealloc.library_path()
    except FileNotFoundError as e:
        return str(e)
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test skipped: {reason}")
    for item in items:
        if "tests/gpu" in str(item.fspath):
            item.add_marker(skip)
