"""Pool checkpoints through the C API (what the PyTorch glue calls for
torch.compile's CUDA graph trees), on the simulated backend: save, restore
with its callbacks, the live-allocation check, and refused calls."""
import ctypes
import os

import pytest

FREED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
ALLOCATED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


@pytest.fixture
def lib(ca):
    """The C library the ca fixture loaded (the same process-wide state)."""
    lib = ctypes.CDLL(os.environ["CACHEALLOC_LIBRARY"])
    lib.cachealloc_pool_checkpoint_save.argtypes = [
        ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p)]
    lib.cachealloc_pool_checkpoint_release.argtypes = [ctypes.c_void_p]
    lib.cachealloc_pool_checkpoint_restore.argtypes = [ctypes.c_void_p, FREED, ALLOCATED,
                                                       ctypes.c_void_p]
    lib.cachealloc_pool_live_allocations_match.argtypes = [
        ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]
    lib.cachealloc_last_error.restype = ctypes.c_char_p
    lib.cachealloc_block_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                          ctypes.POINTER(ctypes.c_int)]
    return lib


def error(lib):
    return lib.cachealloc_last_error().decode()


def live_match(lib, pool, ptrs):
    arr = (ctypes.c_void_p * len(ptrs))(*ptrs)
    match = ctypes.c_int(-1)
    assert lib.cachealloc_pool_live_allocations_match(0, *pool.id, arr, len(ptrs),
                                                      ctypes.byref(match)) == 0, error(lib)
    return match.value == 1


def restore(lib, checkpoint):
    freed, allocated = [], []
    on_freed = FREED(lambda user, p: freed.append(p))
    on_allocated = ALLOCATED(lambda user, p, n: allocated.append((p, n)))
    rc = lib.cachealloc_pool_checkpoint_restore(checkpoint, on_freed, on_allocated, None)
    return rc, freed, allocated


def test_restore_puts_the_pool_back_and_reports_what_it_freed_and_allocated(ca, lib):
    pool = ca.MemPool()
    with ca.use_mem_pool(pool):
        x = ca._malloc(1024)
        y = ca._malloc(2048)
    ca._free(y)
    assert live_match(lib, pool, [x])
    assert not live_match(lib, pool, [x, y])
    saved = ctypes.c_void_p()
    assert lib.cachealloc_pool_checkpoint_save(0, *pool.id, ctypes.byref(saved)) == 0, error(lib)
    layout = [(b["size"], b["state"]) for s in pool.snapshot() for b in s["blocks"]]

    # Later: x dies, z is carved where y was.
    with ca.use_mem_pool(pool):
        z = ca._malloc(1024 + 2048)
    ca._free(x)
    assert live_match(lib, pool, [z])

    rc, freed, allocated = restore(lib, saved)
    assert rc == 0, error(lib)
    assert freed == [z]
    assert allocated == [(x, 1024)]
    assert [(b["size"], b["state"]) for s in pool.snapshot() for b in s["blocks"]] == layout
    assert live_match(lib, pool, [x])
    with pytest.raises(Exception):
        ca._free(z)  # the restore freed it: unknown now
    ca._free(x)      # the caller holds the restored block
    lib.cachealloc_pool_checkpoint_release(saved)
    pool.release()


def test_refused_calls_name_the_problem_and_change_nothing(ca, lib):
    saved = ctypes.c_void_p()
    assert lib.cachealloc_pool_checkpoint_save(0, 0, 77, ctypes.byref(saved)) == -1
    assert "(0, 77)" in error(lib)
    assert lib.cachealloc_pool_checkpoint_save(0, 0, 77, None) == -1
    assert "NULL" in error(lib)
    rc, freed, allocated = restore(lib, None)
    assert rc == -1 and "NULL" in error(lib) and not freed and not allocated
    match = ctypes.c_int()
    assert lib.cachealloc_pool_live_allocations_match(0, 0, 77, None, 0, ctypes.byref(match)) == -1
    assert "(0, 77)" in error(lib)

    pool = ca.MemPool()
    with ca.use_mem_pool(pool):
        x = ca._malloc(1024)
    assert lib.cachealloc_pool_checkpoint_save(0, *pool.id, ctypes.byref(saved)) == 0
    pool.release()  # use count 0: the graph is gone
    before = ca.snapshot()["segments"]
    rc, _, _ = restore(lib, saved)
    assert rc == -1 and "released" in error(lib)
    assert ca.snapshot()["segments"] == before
    lib.cachealloc_pool_checkpoint_release(saved)
    ca._free(x)


def test_restore_callbacks_run_without_the_device_lock(ca, lib):
    """A callback may call back into cachealloc for the same device (the
    glue's DataPtrs do): with the lock still held this would deadlock."""
    pool = ca.MemPool()
    with ca.use_mem_pool(pool):
        x = ca._malloc(4096)
    saved = ctypes.c_void_p()
    assert lib.cachealloc_pool_checkpoint_save(0, *pool.id, ctypes.byref(saved)) == 0
    sizes = []

    def on_allocated(user, p, n):
        size, device = ctypes.c_size_t(), ctypes.c_int(0)
        assert lib.cachealloc_block_info(p, ctypes.byref(size), ctypes.byref(device)) == 0
        sizes.append(size.value)

    cb_freed, cb_allocated = FREED(lambda u, p: None), ALLOCATED(on_allocated)
    assert lib.cachealloc_pool_checkpoint_restore(saved, cb_freed, cb_allocated, None) == 0
    assert sizes == [4096]
    ca._free(x)
    lib.cachealloc_pool_checkpoint_release(saved)
    pool.release()
