"""GPUMemoryProfiler on a real GPU: every code block of its usage guide
(tests/data/gpumemoryprofiler_guide_blocks.py) runs under cachealloc (glue
mode) and under PyTorch's native allocator, each in a fresh process
(gpumemoryprofiler_script.py). Under cachealloc the figures of every block
whose profiled call is alone in it agree exactly with
torch.cuda.memory_stats(), and no peak statistic is reset; under native
the accumulated-counter figures agree and the peaks are the profiler's
resets (the documented approximation). Both runs end with a real
forward/backward loop (not a leak) against the same loop keeping its
outputs (a leak, found with its allocation site)."""
import pytest

from native_vs_cachealloc import run_script

GUIDE_BLOCKS = 12


@pytest.mark.parametrize("mode", ["cachealloc", "native"])
def test_every_guide_block_runs_and_agrees_with_the_allocators_statistics(mode):
    out = run_script("gpumemoryprofiler_script.py", mode)
    assert out["mode"] == ("torch-extension" if mode == "cachealloc" else "not installed")
    assert len(out["blocks"]) == GUIDE_BLOCKS
    checked = [b for b in out["blocks"] if "agrees_with_memory_stats" in b]
    assert len(checked) == 5
    if mode == "cachealloc":
        assert all("peak_memory_usage()" in b["agrees_with_memory_stats"] for b in checked)
    assert out["peak_kept"] == (mode == "cachealloc")
    assert out["leaks"]["leak_site"].startswith("training:")
