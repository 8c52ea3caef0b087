"""Issue 34 on two GPUs (multi_gpu_suite.sh): DDP and FSDP2 on GPT-2 small
under native and cachealloc, the NCCL user-buffer path, and the merged
report. Skips, with its reason, on machines with fewer than two CUDA
devices. MULTI_GPU_REPEATS (default 1) sets the repeats, MULTI_GPU_LLAMA=1
adds the Llama-style decoder; results land in $OUT/multi_gpu."""
import json
import os
import pathlib
import subprocess

import pytest
from two_gpus import needs_two_gpus

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = needs_two_gpus


@pytest.fixture(scope="module")
def results():
    out = pathlib.Path(os.environ.get("OUT", "/tmp/out"))
    llama = ["--llama"] if os.environ.get("MULTI_GPU_LLAMA") == "1" else []
    proc = subprocess.run(["bash", str(ROOT / "tests" / "gpu" / "multi_gpu_suite.sh"),
                           "--repeats", os.environ.get("MULTI_GPU_REPEATS", "1"), *llama],
                          capture_output=True, text=True, timeout=900)
    print(proc.stdout[-6000:], proc.stderr[-3000:])
    root = out / "multi_gpu"
    return root, json.loads((root / "summary.json").read_text())


@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_peak_reserved_equals_native_and_losses_match(results, mode):
    _, summary = results
    assert mode in summary, f"{mode}: no runs"
    for rank, r in summary[mode].items():
        print(mode, rank, r["peak_reserved"], r["peak_allocated"], r["step_ratio"])
        assert set(r["peak_reserved"]["cachealloc"]) <= set(r["peak_reserved"]["native"]), r
        assert r["loss_max_diff_to_native"] <= max(0.05, 2 * r["loss_native_spread"]), r


@pytest.mark.parametrize("allocator", ["native", "cachealloc"])
def test_nccl_user_buffers_work_and_the_pool_stays_classic(results, allocator):
    _, summary = results
    data = summary[f"user_buffer_{allocator}"]
    for results_of_rank in data["ranks"]:
        classic, expandable, after = results_of_rank
        assert classic["allreduce_ok"] and expandable["allreduce_ok"]
        assert classic["pool_segments"][0] >= 1 and classic["pool_segments"][2] == 0
        assert expandable["pool_segments"][0] >= 1 and expandable["pool_segments"][2] == 0
        assert after["default_segments"][2] >= 1  # the default pool did switch


def test_user_buffer_pools_match_native(results):
    _, summary = results
    ours, native = summary["user_buffer_cachealloc"], summary["user_buffer_native"]
    for o, n in zip(ours["ranks"], native["ranks"]):
        assert [r.get("pool_segments") for r in o] == [r.get("pool_segments") for r in n]


def test_report_and_peak_analysis_were_written(results):
    root, _ = results
    text = (root / "report_cachealloc.txt").read_text()
    assert text.startswith("Rank "), text[:500]
    assert "Advised PYTORCH_CUDA_ALLOC_CONF=" in text
    assert (root / "report_cachealloc.html").stat().st_size > 0
    sites = (root / "peak_sites.txt").read_text()
    assert "live blocks by site" in sites and "highest" in sites, sites[:2000]
