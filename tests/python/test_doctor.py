"""`cachealloc doctor` (doctor.py): findings, then one verdict line. On a
machine without a GPU it says what GPU use lacks and that the lab and the
simulated backend work, and exits 1."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_doctor_ends_with_one_verdict_line():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))
    out = subprocess.run([sys.executable, "-m", "cachealloc.cli", "doctor"], capture_output=True,
                         text=True, env=env, timeout=120)
    lines = out.stdout.strip().splitlines()
    verdict = lines[-1]
    assert lines[0].startswith("library:"), out.stdout
    assert any(line.startswith("CUDA backends:") for line in lines), out.stdout
    if verdict.startswith("ready"):
        assert out.returncode == 0
        assert any(line.startswith("GPU 0:") for line in lines)
    else:
        assert out.returncode == 1, out.stdout + out.stderr
        assert verdict.startswith("not ready for GPU use: ")
        assert "install(backend='simulated') work here" in verdict
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed: its line is not checked")
    assert any(line.startswith("torch:") and torch.__version__ in line for line in lines)
