"""CUDA IPC through torch.multiprocessing (spawn) between native and
cachealloc processes, all four ways (ipc_script.py), and setups that
cannot share: the error must reach the sender, and nothing may hang
(every run has a timeout)."""
import math
import json
import os
import subprocess
import sys

import pytest

from native_vs_cachealloc import HERE

TIMEOUT = 420  # seconds per script run; a hang fails the test


def run(*args):
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "bindings" / "python"))
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    proc = subprocess.run([sys.executable, str(HERE / "ipc_script.py"), *args],
                          capture_output=True, text=True, env=env, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# "-expandable": the producer (or consumer) runs with expandable_segments:True,
# so the tensor travels as native 2.11's expandable-segment handle (its pages'
# exported handles), which the other side maps.
@pytest.mark.parametrize("producer,consumer", [
    ("native", "native"), ("cachealloc", "cachealloc"), ("cachealloc", "native"),
    ("native", "cachealloc"), ("native-expandable", "native"),
    ("cachealloc-expandable", "cachealloc-expandable"), ("cachealloc-expandable", "native"),
    ("native-expandable", "cachealloc")])
def test_a_shared_tensor_is_read_written_held_and_released_as_under_native(producer, consumer):
    out = run("share", producer, consumer)
    print(out)
    assert out["offset_in_segment"]
    # float32 sums of the same values in two processes' reductions: equal to
    # float32 precision (a wrong page or offset would be off by far more).
    assert math.isclose(out["consumer_sum"], out["expected_sum"], rel_tol=1e-6)
    assert out["producer_sees_write"]
    assert out["held_value"] == 7.0
    # Freed by the producer while held: still allocated, and not reused.
    assert out["allocated_after_producer_free"] == 4 * 2**20
    assert not out["reused_while_held"]
    assert out["allocated_after_release"] == 0
    assert out["reused_after_release"]
    # 1,000 shared and released: no value wrong, memory not growing.
    assert out["loop_wrong_values"] == 0
    # What one share leaves behind in every pairing, native-native included
    # (H100, torch 2.11): at most one small block and one large segment
    # (PyTorch's IPC bookkeeping); no growth with the number of shares.
    allocated, reserved = out["loop_allocated_reserved_delta"]
    assert allocated <= 2 * 2**20 and reserved <= 20 * 2**20, (allocated, reserved)
    assert abs(out["loop_device_free_delta"]) <= 64 * 2**20
    assert out["consumer_exitcode"] == 0


def test_plain_mode_refuses_in_the_sender_saying_the_glue_is_needed():
    out = run("refuse", "plain")
    print(out)
    for queue in ("simple_queue", "queue"):
        assert out[queue]["raised_in_caller"], queue
        assert out[queue]["type"] == "CudaIpcUnavailableError"
        assert "needs cachealloc's PyTorch glue" in out[queue]["message"]


def test_the_async_backend_refuses_with_natives_error_and_in_the_sender():
    native, ours = run("refuse", "native-async"), run("refuse", "cachealloc-async")
    print(native, ours, sep="\n")
    # Native raises in the sender only where the sender pickles (its Queue's
    # feeder thread swallows the error); cachealloc raises there too.
    assert native["simple_queue"]["raised_in_caller"]
    assert "cudaMallocAsync does not yet support shareIpcHandle" in native["simple_queue"]["message"]
    for queue in ("simple_queue", "queue"):
        assert ours[queue]["raised_in_caller"], queue
        assert "cudaMallocAsync does not yet support shareIpcHandle" in ours[queue]["message"]

