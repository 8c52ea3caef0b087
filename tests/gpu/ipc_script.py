"""CUDA tensors sent between processes with torch.multiprocessing (spawn),
the producer and the consumer each under native or cachealloc. Prints one
JSON line of what it saw, for tests/gpu/test_ipc_gpu.py.

    ipc_script.py share PRODUCER CONSUMER   (each: native | cachealloc)
    ipc_script.py refuse SETUP              (plain | native-async | cachealloc-async)

share: the consumer reads the producer's tensor and writes into it; the
producer frees a tensor the consumer still holds (its memory must not be
reused until the consumer lets go); 1,000 tensors are shared and released
one after another (allocated bytes, reserved bytes and the device's free
bytes must come back). refuse: a setup that cannot share sends a tensor;
where does the error rise, and what does it say. Every wait has a timeout,
so a hang fails instead of blocking.
"""
import json
import os
import sys

WAIT = 120  # seconds, for any message from the other process
MiB = 2**20


def install(mode):
    """Sets up the allocator `mode` in this process, before CUDA is used."""
    # Spawned consumers inherit the producer's environment: each process
    # sets its own.
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if mode == "native-async":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    if mode.endswith("expandable"):
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if mode.startswith("cachealloc") or mode == "plain":
        import cachealloc

        cachealloc.install(backend="async" if mode.endswith("async") else None,
                           torch_glue=mode != "plain")
        assert cachealloc.mode() == ("plain" if mode == "plain" else "torch-extension")


def consumer(mode, inbox, outbox):
    install(mode)
    import torch

    held = None
    while True:
        msg = inbox.get(timeout=WAIT)
        kind = msg[0]
        if kind == "read_write":
            t = msg[1]
            outbox.put(("sum", t.sum().item()))
            t[0] = -1.0
            torch.cuda.synchronize()
            del t
            outbox.put(("written",))
        elif kind == "hold":
            held = msg[1]
            outbox.put(("holding", held[0].item()))
        elif kind == "release":
            held = None
            torch.cuda.synchronize()
            outbox.put(("released",))
        elif kind == "loop":
            t = msg[1]
            value = t[0].item()
            del t
            outbox.put(("value", value))
        elif kind == "free":
            torch.cuda.synchronize()
            outbox.put(("free", torch.cuda.mem_get_info()[0]))
        elif kind == "stop":
            outbox.put(("stopped",))
            return


def expect(outbox, kind):
    msg = outbox.get(timeout=WAIT)
    assert msg[0] == kind, f"expected {kind}, got {msg}"
    return msg[1] if len(msg) > 1 else None


def share(producer_mode, consumer_mode):
    install(producer_mode)
    import torch
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=consumer, args=(consumer_mode, inbox, outbox), daemon=True)
    proc.start()
    out = {"producer": producer_mode, "consumer": consumer_mode}
    try:
        # Read and write: the tensor is not at its segment's start, so the
        # handle's offset matters.
        pad = torch.ones(1000, device="cuda")
        t = torch.arange(4096, dtype=torch.float32, device="cuda")
        out["offset_in_segment"] = t.data_ptr() > pad.data_ptr()
        inbox.put(("read_write", t))
        out["consumer_sum"] = expect(outbox, "sum")
        out["expected_sum"] = t.sum().item()
        expect(outbox, "written")
        out["producer_sees_write"] = t[0].item() == -1.0

        # Freed by the producer while the consumer holds it.
        allocated_before = torch.cuda.memory_allocated()
        h = torch.full((MiB,), 7.0, device="cuda")  # 4 MiB: the base of a 20 MiB segment
        addr = h.data_ptr()
        inbox.put(("hold", h))
        out["held_value"] = expect(outbox, "holding")
        del h
        out["allocated_after_producer_free"] = torch.cuda.memory_allocated() - allocated_before
        others = [torch.empty(MiB, device="cuda") for _ in range(4)]
        out["reused_while_held"] = any(o.data_ptr() == addr for o in others)
        del others
        inbox.put(("release",))
        expect(outbox, "released")
        torch.cuda.ipc_collect()
        out["allocated_after_release"] = torch.cuda.memory_allocated() - allocated_before
        again = torch.empty(MiB, device="cuda")
        out["reused_after_release"] = again.data_ptr() == addr
        del again

        # 1,000 shared and released: nothing may stay behind.
        del t, pad
        torch.cuda.ipc_collect()
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        base = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
        inbox.put(("free",))
        free_before = expect(outbox, "free")
        wrong = 0
        for i in range(1000):
            x = torch.full((512 * 1024,), float(i), device="cuda")  # 2 MiB
            inbox.put(("loop", x))
            wrong += expect(outbox, "value") != float(i)
            del x
        torch.cuda.ipc_collect()
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        inbox.put(("free",))
        free_after = expect(outbox, "free")
        out["loop_wrong_values"] = wrong
        out["loop_allocated_reserved_delta"] = [torch.cuda.memory_allocated() - base[0],
                                                torch.cuda.memory_reserved() - base[1]]
        out["loop_device_free_delta"] = free_after - free_before
        inbox.put(("stop",))
        expect(outbox, "stopped")
    finally:
        proc.join(timeout=WAIT)
        if proc.is_alive():
            proc.kill()
    out["consumer_exitcode"] = proc.exitcode
    return out


def refuse(setup):
    install(setup)
    import torch
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    t = torch.ones(1024, device="cuda")
    out = {"setup": setup}
    for name, make in (("simple_queue", ctx.SimpleQueue), ("queue", ctx.Queue)):
        q = make()
        try:
            q.put(t)
            out[name] = {"raised_in_caller": False}
        except Exception as e:  # noqa: BLE001 -- the error is what is reported
            out[name] = {"raised_in_caller": True, "type": type(e).__name__, "message": str(e)}
        if name == "queue":
            q.close()
            q.cancel_join_thread()  # a feeder thread that failed must not block exit
    return out


if __name__ == "__main__":
    what = sys.argv[1]
    result = share(sys.argv[2], sys.argv[3]) if what == "share" else refuse(sys.argv[2])
    print(json.dumps(result))
