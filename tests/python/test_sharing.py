"""Plain mode's refusal of CUDA IPC (cachealloc/sharing.py): a CUDA tensor
put on a multiprocessing queue raises in the caller, not in the queue's
feeder thread. No GPU here, so float64 CPU tensors stand in for CUDA ones
(the predicate is the only thing replaced); the queue is a real one."""
import multiprocessing
import multiprocessing.queues as queues

import pytest

torch = pytest.importorskip("torch")


def stand_in(obj):
    return isinstance(obj, torch.Tensor) and obj.dtype == torch.float64


def test_find_cuda_data_looks_inside_containers_at_any_depth_and_ends_on_cycles():
    from cachealloc.sharing import find_cuda_data

    cuda = torch.zeros(2, dtype=torch.float64)
    loop = [1, 2]
    loop.append(loop)
    assert find_cuda_data(cuda, stand_in) is cuda
    assert find_cuda_data({"a": [(1, {cuda})]}, stand_in) is cuda
    assert find_cuda_data({cuda.data_ptr(): "x", "k": (torch.ones(3),)}, stand_in) is None
    assert find_cuda_data(loop, stand_in) is None


def test_a_cuda_tensor_put_on_a_queue_raises_in_the_caller_and_nothing_is_queued():
    from cachealloc.sharing import PLAIN_MODE_MESSAGE, CudaIpcUnavailableError, _refusing_put

    class CheckedQueue(queues.Queue):
        put = _refusing_put(queues.Queue.put, stand_in, PLAIN_MODE_MESSAGE)

    q = CheckedQueue(ctx=multiprocessing.get_context("spawn"))
    with pytest.raises(CudaIpcUnavailableError, match="needs cachealloc's PyTorch glue"):
        q.put({"batch": [torch.zeros(4, dtype=torch.float64)]})
    q.put([torch.ones(3)])  # not CUDA data: queued as before
    got = q.get(timeout=30)
    assert torch.equal(got[0], torch.ones(3))
    assert q.empty()
    q.close()
    q.join_thread()


def test_refuse_cuda_ipc_patches_once_and_refuses_pickling_in_plain_mode():
    from cachealloc.sharing import (PLAIN_MODE_MESSAGE, CudaIpcUnavailableError,
                                    refuse_cuda_ipc)

    saved = {cls: cls.__dict__["put"] for cls in (queues.Queue, queues.JoinableQueue)}
    saved_share = torch.UntypedStorage.__dict__.get("_share_cuda_")
    try:
        refuse_cuda_ipc(PLAIN_MODE_MESSAGE, refuse_pickling=True)
        refuse_cuda_ipc(PLAIN_MODE_MESSAGE, refuse_pickling=True)  # changes nothing
        for cls, put in saved.items():
            assert cls.put.__wrapped__ is put
        with pytest.raises(CudaIpcUnavailableError, match="plain mode"):
            torch.ones(2).untyped_storage()._share_cuda_()
    finally:
        for cls, put in saved.items():
            cls.put = put
        if saved_share is None:
            del torch.UntypedStorage._share_cuda_
        else:
            torch.UntypedStorage._share_cuda_ = saved_share


def test_only_blocks_in_expandable_segments_count_as_unshareable():
    # Native refuses to share a tensor in an expandable segment; the
    # predicate the glue's Queue.put check uses asks the library where a
    # block lies (simulated device, fresh interpreter: the runtime is
    # process-wide).
    import os
    import pathlib
    import subprocess
    import sys
    import textwrap

    repo = pathlib.Path(__file__).resolve().parents[2]
    code = """
    import cachealloc
    from cachealloc import raw
    from cachealloc.sharing import address_in_expandable_segment as expandable
    cachealloc.init("expandable_segments:True", "simulated")
    a = raw._malloc(3 << 20)
    print("expandable", expandable(a), expandable(a + 4096))
    raw._free(a)
    cachealloc.init("", "simulated")
    b = raw._malloc(3 << 20)
    print("classic", expandable(b))
    print("unknown", expandable(12345), expandable(0))
    raw._free(b)
    """
    env = dict(os.environ, PYTHONPATH=str(repo / "bindings" / "python"))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    # A block's own address (as a storage's data_ptr is); not one inside it.
    assert "expandable True False" in lines, proc.stdout
    assert "classic False" in lines and "unknown False False" in lines, proc.stdout
