"""large_segment_size_mb and the settings re-parse rule on the GPU: each
case of large_segment_script.py in a fresh process under native torch and
under cachealloc (glue mode); the segment sizes must be identical."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))
from large_segment_script import CASES  # noqa: E402


def run(allocator, case):
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "bindings" / "python"))
    p = subprocess.run([sys.executable, str(HERE / "large_segment_script.py"), allocator, case],
                       capture_output=True, text=True, env=env, cwd=HERE, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])["result"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_segments_equal_native(case):
    native, ours = run("native", case), run("cachealloc", case)
    print("CASE", case, "native", native, "cachealloc", ours)
    assert ours == native
