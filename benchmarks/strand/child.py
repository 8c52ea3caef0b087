"""One fresh process of the strand driver: a workload at one size under one
allocator, optionally under a memory limit, optionally recording its trace.
Prints one JSON line (the last line of stdout). Also a persistent timing
worker (`--serve`): set up once, then runs the step ranges it is sent.

Allocators (`--kind`):
  classic            PyTorch's native allocator, PYTORCH_CUDA_ALLOC_CONF unset
  expandable         native, expandable_segments:True
  advised            native, PYTORCH_CUDA_ALLOC_CONF = --conf (advise's pick)
  cachealloc         cachealloc, native policy, conf = --conf (records traces)
  policy:NAME        cachealloc under placement policy NAME, conf = --conf

Memory: --limit BYTES sets torch.cuda.set_per_process_memory_fraction(limit
/ total) before the workload is built. Outcome: "ok", "oom" (an
out-of-memory error: the size does not run under this allocator and limit),
or "error" (anything else; the message is kept). Peaks come from
memory_stats (cachealloc's glue gives its own). `device_free_at_oom` is the
device's free memory at the OOM, so the driver can tell an OOM of this
process's limit from a device filled by other processes (it then reruns).

On the CPU (`--device cpu`, for tests) every kind runs the same CPU torch,
the peak is the process's resident high-water mark above its level before
the workload was built (/proc/self/status VmHWM, reset through clear_refs),
and a limit is checked after the run (CPU torch has none to set).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import pickle
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KIND_CONF = {"classic": None, "expandable": "expandable_segments:True"}


def set_env(kind: str, conf: str) -> None:
    """PYTORCH_CUDA_ALLOC_CONF for this kind; must run before torch touches CUDA."""
    value = KIND_CONF[kind] if kind in KIND_CONF else conf
    if value:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = value
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)


def is_oom(e: BaseException) -> bool:
    import torch

    if isinstance(e, torch.OutOfMemoryError):
        return True
    text = str(e)
    return "out of memory" in text.lower() or "ALLOC_FAILED" in text


class Rss:
    """The CPU's stand-in for peak allocated: resident memory above a base."""

    def __init__(self):
        try:
            pathlib.Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM
        except OSError:
            pass
        self.base = self.read("VmRSS")

    @staticmethod
    def read(key: str) -> int:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def peak(self) -> int:
        return max(0, self.read("VmHWM") - self.base)


def setup(a):
    """Allocator, limit, workload. Returns (workload, stats function, info)."""
    set_env(a.kind, a.conf)
    import torch

    sys.path.insert(0, str(HERE))
    import suite

    info = {"kind": a.kind, "workload": a.workload, "size": a.size, "device": a.device,
            "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "limit": a.limit}
    if a.device == "cpu":
        rss = Rss()
        w = suite.build(a.workload, a.size, "cpu", a.seed)

        def stats():
            p = rss.peak()
            return {"peak_allocated": p, "peak_reserved": p, "memory_source": "rss"}
        return w, stats, info
    if a.kind == "cachealloc" or a.kind.startswith("policy:"):
        sys.path.insert(0, str(ROOT / "bindings" / "python"))
        import cachealloc

        cachealloc.install(conf=a.conf or None,
                           policy=a.kind.split(":", 1)[1] if a.kind.startswith("policy:") else "native")
        info["policy"] = cachealloc.policy()
    total = torch.cuda.get_device_properties(0).total_memory
    info["total"] = total
    if a.limit:
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.limit / total), 0)
    if a.trace:
        torch.cuda.memory._record_memory_history(max_entries=10**7, context=None)

    def stats():
        s = torch.cuda.memory_stats()
        return {"peak_allocated": s.get("allocated_bytes.all.peak", -1),
                "peak_reserved": s.get("reserved_bytes.all.peak", -1),
                "device_allocs": s.get("num_device_alloc", -1),
                "device_frees": s.get("num_device_free", -1),
                "retries": s.get("num_alloc_retries", -1), "ooms": s.get("num_ooms", -1),
                "memory_source": "cuda"}
    w = suite.build(a.workload, a.size, "cuda", a.seed)
    return w, stats, info


def timed_steps(w, first: int, last: int, device: str) -> list:
    """Seconds per step for steps first..last-1 (synchronized around each)."""
    sys.path.insert(0, str(HERE))
    import common

    times = []
    for i in range(first, last):
        common.synchronize(device)
        t0 = time.perf_counter()
        w.step(i)
        common.synchronize(device)
        times.append(time.perf_counter() - t0)
    return times


def probe(a) -> dict:
    out = {}
    t_start = time.perf_counter()
    try:
        w, stats, info = setup(a)
        out.update(info)
        try:
            out["step_s"] = timed_steps(w, 0, a.steps, a.device)
            out["outcome"] = "ok"
        except Exception as e:  # noqa: BLE001 - the outcome says which
            out.update(outcome="oom" if is_oom(e) else "error", message=str(e).splitlines()[0][:300]
                       if str(e) else type(e).__name__)
            if out["outcome"] == "error":
                out["traceback"] = traceback.format_exc()[-2000:]
        out.update(stats())
    except Exception as e:  # noqa: BLE001 - setup failed (an OOM while building counts)
        out.update(outcome="oom" if is_oom(e) else "error",
                   message=(str(e).splitlines() or [type(e).__name__])[0][:300],
                   traceback=traceback.format_exc()[-2000:])
    if a.device != "cpu" and out.get("outcome") == "oom":
        import torch

        out["device_free_at_oom"] = torch.cuda.mem_get_info()[0]
    if a.device == "cpu" and a.limit and out.get("outcome") == "ok" \
            and out.get("peak_allocated", 0) > a.limit:
        out.update(outcome="oom", message="peak resident memory over the limit (checked after the run)")
    if a.trace and out.get("outcome") == "ok":
        write_trace(a, out)
    out["seconds"] = time.perf_counter() - t_start
    return out


def write_trace(a, out: dict) -> None:
    import torch

    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    path = pathlib.Path(a.trace)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(str(path) + ".pickle.gz", "wb") as f:
        pickle.dump(snap, f, protocol=4)
    meta = {"name": path.name, "workload": a.workload, "size": a.size, "steps": a.steps,
            "seed": a.seed, "allocator": a.kind, "conf": out.get("conf", ""),
            "memory_fraction": None, "device": torch.cuda.get_device_name(0),
            "device_total_memory": out.get("total"), "torch": torch.__version__,
            "n_events": len(snap["device_traces"][0]) if snap.get("device_traces") else 0,
            "final_memory_stats": dict(torch.cuda.memory_stats()),
            "recorded_by": "benchmarks/strand/child.py --trace (issue 48)"}
    pathlib.Path(str(path) + ".json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    out["trace"] = str(path) + ".pickle.gz"
    out["trace_events"] = meta["n_events"]


def serve(a) -> None:
    """Timing worker: set up, run steps 0..warmup-1, print {"ready": ...};
    then per stdin line "run FIRST LAST" print {"step_s": [...]} (or an
    outcome on failure), "stats" prints the peaks, "quit" or EOF ends."""
    try:
        w, stats, info = setup(a)
        timed_steps(w, 0, a.warmup, a.device)
        print(json.dumps({"ready": True, **info}), flush=True)
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"ready": False, "outcome": "oom" if is_oom(e) else "error",
                          "message": str(e)[:300]}), flush=True)
        return
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "stats":
            print(json.dumps(stats()), flush=True)
            continue
        try:
            print(json.dumps({"step_s": timed_steps(w, int(cmd[1]), int(cmd[2]), a.device)}), flush=True)
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"outcome": "oom" if is_oom(e) else "error", "message": str(e)[:300]}),
                  flush=True)
            return


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", required=True)
    p.add_argument("--kind", required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2, help="with --serve: untimed steps first")
    p.add_argument("--limit", type=int, default=0, help="bytes (0: none)")
    p.add_argument("--conf", default="", help="PYTORCH_CUDA_ALLOC_CONF for advised/cachealloc/policy kinds")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", default="", help="record the trace: PATH.pickle.gz and PATH.json")
    p.add_argument("--serve", action="store_true")
    a = p.parse_args(argv)
    if a.kind not in ("classic", "expandable", "advised", "cachealloc") and not a.kind.startswith("policy:"):
        p.error(f"--kind: unknown kind {a.kind!r}")
    if a.serve:
        serve(a)
        return 0
    print(json.dumps(probe(a)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
