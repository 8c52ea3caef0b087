"""The runtime behind the C API: (re-)initialization while other threads
allocate, and what a re-initialization resets. Each case runs in a fresh
interpreter (the runtime is process-wide)."""
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def run(code, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def test_reinit_while_another_thread_allocates_is_safe():
    # cachealloc_init is refused while a block is in use and otherwise
    # replaces the allocator; a thread allocating meanwhile must see either
    # the old allocator or the new one, never a freed one (this crashed or
    # hung before the runtime kept retired generations alive).
    code = """
    import ctypes, threading, cachealloc
    lib = cachealloc._native.lib()
    cachealloc.init("", "simulated")
    stop = False
    counts = {"ok": 0, "refused": 0}
    def worker():
        out = ctypes.c_void_p()
        while not stop:
            rc = lib.cachealloc_try_malloc(1 << 20, 0, None, ctypes.byref(out))
            assert rc == 0, lib.cachealloc_last_error()
            lib.cachealloc_free(out, 0, 0, None)
            counts["ok"] += 1
    t = threading.Thread(target=worker)
    t.start()
    for _ in range(20000):
        if lib.cachealloc_init(b"", b"simulated") != 0:
            assert b"already in use" in lib.cachealloc_last_error()
            counts["refused"] += 1
    stop = True
    t.join()
    print("COUNTS", counts["ok"], counts["refused"])
    # Nothing leaked into the final allocator: no block in use, stats exact.
    s = cachealloc.memory_stats()
    assert s["allocated_bytes.all.current"] == 0, s["allocated_bytes.all.current"]
    """
    for attempt in range(3):
        rc, out = run(code)
        assert rc == 0 and "did not allocate" not in out, (attempt, rc, out[-3000:])
        ok, refused = map(int, out.split("COUNTS")[1].split())
        assert ok > 0 and refused > 0, out  # the two really raced


def test_reinit_turns_history_and_context_capture_off_together():
    # A re-initialization starts a new allocator with history off; the
    # context capture that history asked for must stop with it, not keep
    # capturing frames for a history nobody records.
    code = """
    import cachealloc
    cachealloc.init("", "simulated")
    cachealloc.record_memory_history("all", "all", "python", 1000)
    cachealloc.init("", "simulated")
    p = cachealloc._malloc(1000); cachealloc._free(p)
    p = cachealloc._malloc(4096)
    s = cachealloc.snapshot()
    frames = [len(b.get("frames", [])) for seg in s["segments"] for b in seg["blocks"]
              if b["state"] == "active_allocated"]
    print("TRACES", len(s["device_traces"][0]), "FRAMES", frames)
    """
    rc, out = run(code)
    assert rc == 0, out
    assert "TRACES 0 FRAMES [0]" in out, out


def test_last_oom_reports_the_failed_requests_numbers():
    # What the PyTorch glue passes on to OOM observers and the profiler:
    # the request, its rounding, the segment size the device refused, and
    # the limit in force. Per thread; -1 before any OOM.
    code = """
    import ctypes, threading, cachealloc
    lib = cachealloc._native.lib()
    cachealloc.init("", "simulated:1073741824")  # a 1 GiB device
    class Info(ctypes.Structure):
        _fields_ = [("device", ctypes.c_int), ("limit_set", ctypes.c_int)] + [
            (n, ctypes.c_size_t) for n in ("requested", "rounded", "allocation", "device_total",
                                          "device_free", "allowed", "allocated", "reserved")]
    info = Info()
    assert lib.cachealloc_last_oom(ctypes.byref(info)) == -1
    assert b"no out-of-memory" in lib.cachealloc_last_error()
    keep = cachealloc._malloc(300 << 20)
    cachealloc.set_per_process_memory_fraction(0.5, 0)
    out = ctypes.c_void_p()
    assert lib.cachealloc_try_malloc((400 << 20) + 1, 0, None, ctypes.byref(out)) == 1
    assert lib.cachealloc_last_oom(ctypes.byref(info)) == 0
    print("OOM", info.device, info.limit_set, info.requested, info.rounded, info.allocation,
          info.device_total, info.allowed, info.allocated, info.reserved)
    other = []
    t = threading.Thread(target=lambda: other.append(lib.cachealloc_last_oom(ctypes.byref(Info()))))
    t.start(); t.join()
    print("OTHER THREAD", other[0])
    """
    rc, out = run(code)
    assert rc == 0, out
    GiB, MiB = 1 << 30, 1 << 20
    # 400 MiB + 1 rounds to 400 MiB + 512; above 10 MiB the segment is that
    # rounded up to 2 MiB: 402 MiB.
    assert f"OOM 0 1 {400 * MiB + 1} {400 * MiB + 512} {402 * MiB} {GiB} {GiB // 2} {300 * MiB} {300 * MiB}" in out, out
    assert "OTHER THREAD -1" in out, out


def test_python_frame_capture_does_not_keep_every_code_object_alive():
    # Captured stacks cache each code object's names, holding a reference;
    # a program that keeps compiling new code must not keep all of it
    # alive (the cache is bounded at 16384 code objects).
    code = """
    import sys, cachealloc
    cachealloc.init("", "simulated")
    cachealloc.record_memory_history("all", "all", "python", 10)
    ns = {"ca": cachealloc}
    def run(i):
        c = compile("ca._free(ca._malloc(1000))", f"<generated {i}>", "exec")
        exec(c, ns)
        return c
    first = run(0)
    held = sys.getrefcount(first)
    probe = compile("pass", "<probe>", "exec")
    base = sys.getrefcount(probe)
    print("CACHED", held - base)
    for i in range(1, 20000):
        run(i)
    print("AFTER", sys.getrefcount(first) - base)
    """
    rc, out = run(code)
    assert rc == 0, out
    assert "CACHED 1" in out and "AFTER 0" in out, out


def test_simulated_devices_never_hand_out_the_same_address():
    # Simulated devices were placed 1 TiB apart whatever their size, so a
    # larger device's segments overlapped the next device's: one address
    # named a block on each, and a free with the wrong device hint freed
    # the other device's block.
    code = """
    import cachealloc as ca
    TiB = 1 << 40
    ca.init("", f"simulated:{4 * TiB}:2")
    on_0 = [ca._malloc(TiB, 0), ca._malloc(TiB, 0)]
    on_1 = ca._malloc(TiB, 1)
    print("SHARED", on_1 in on_0)
    ca._free(on_1, 0)  # wrong hint: the block is still found on device 1
    print("ALLOCATED TiB", ca.memory_allocated(0) // TiB, ca.memory_allocated(1) // TiB)
    """
    rc, out = run(code)
    assert rc == 0, out
    assert "SHARED False" in out and "ALLOCATED TiB 2 0" in out, out


def test_simulated_sizes_that_do_not_fit_are_refused():
    # A size past 2**64 was read as 2**64 - 1 (strtoull saturates), and
    # sizes whose address ranges cannot be laid out below 2**63 (snapshots
    # hold addresses as signed 64-bit ints) were accepted.
    code = """
    import cachealloc as ca
    ca.init("", "simulated")
    for backend in ("simulated:99999999999999999999999", "simulated:18446744073709551615",
                    f"simulated:{1 << 62}:2"):
        try:
            ca.init("", backend)
            print("ACCEPTED", backend, ca.backend())
        except ca.CacheallocError as e:
            print("REFUSED", e)
    print("BACKEND", ca.backend())
    """
    rc, out = run(code)
    assert rc == 0, out
    assert "ACCEPTED" not in out and out.count("REFUSED backend") == 3, out
    assert "BACKEND simulated\n" in out, out


def test_config_falls_back_to_pytorch_alloc_conf_as_native():
    # native (c10 CUDAAllocatorConfig::instance): PYTORCH_CUDA_ALLOC_CONF,
    # else PYTORCH_ALLOC_CONF.
    code = """
    import cachealloc as ca
    ca.init(None, "simulated")
    print("MAX_SPLIT", ca.memory_stats(0)["max_split_size"])
    """
    def max_split(**conf):
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
        env.update(conf, PYTHONPATH=str(REPO / "bindings" / "python"))
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert f"MAX_SPLIT {64 << 20}" in max_split(PYTORCH_ALLOC_CONF="max_split_size_mb:64")
    assert "MAX_SPLIT -1" in max_split()
