"""One fake-device recording, in a fresh process (guard.py says why):

    python worker.py --gpu-json JSON --out TRACE --summary JSON --steps N
                     (--builder FILE:FUNC --size S | -- SCRIPT ARGS...)

Run as a file, not as part of the package: the fake CUDA guard must load
before anything imports torch (the cachealloc package does). A script runs
unmodified as __main__; the recording stops after its N-th optimizer step
(optimizer.step() calls, counted by a global step hook), or when it ends.
A builder FUNC(size) returns a step callable, called N times.
Exit status: 0 recorded, 3 refused (the summary's "refused" says why).
"""
import importlib.util
import json
import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def _load_guard():
    spec = importlib.util.spec_from_file_location("_cachealloc_fake_guard", HERE / "guard.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.load()
    return mod


class _StepsDone(BaseException):
    """Raised by the step hook after the N-th step (a BaseException, so the
    script's own `except Exception` does not swallow it)."""


def main(argv):
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--gpu-json", required=True)
    p.add_argument("--out")
    p.add_argument("--summary")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--builder")
    p.add_argument("--size", type=int)
    # Serve many recordings from one process (one torch import): requests
    # are JSON lines on stdin ({"size", "out", "summary", "argv", "env"}),
    # each answered by its exit status as a line on file descriptor --reply-fd.
    p.add_argument("--reply-fd", type=int)
    p.add_argument("script", nargs="*")
    ns = p.parse_args(argv)
    guard = _load_guard()
    sys.path.insert(0, str(HERE.parents[2]))
    import torch  # noqa: F401  (after the guard)
    guard.after_torch_import()
    if ns.reply_fd is None:
        return record_one(ns, ns.size, ns.out, ns.summary, ns.script)
    reply = os.fdopen(ns.reply_fd, "w", buffering=1)
    for line in sys.stdin:
        req = json.loads(line)
        os.environ.update(req.get("env") or {})
        try:
            status = record_one(ns, req.get("size"), req["out"], req["summary"], req.get("argv") or [])
        except BaseException as e:  # the script failed: report, keep serving
            import traceback
            traceback.print_exc()
            status = 1
        reply.write(f"{status}\n")
    return 0


def record_one(ns, size, out, summary_path, script):
    import gc
    t0 = time.perf_counter()
    import torch
    from cachealloc.predict.kernels import gpu_model
    from cachealloc.predict.device import trace_writer
    from cachealloc.predict.device.fake_device import FakeCudaDevice
    from cachealloc.predict.gpus import Gpu
    from cachealloc.predict.device.recorder import PredictionRefused

    g = json.loads(ns.gpu_json)
    gpu = Gpu(g["name"], g["total_memory"], tuple(g["capability"]), g["multi_processor_count"],
              g["context_bytes"], g.get("product", ""))
    summary = {"refused": None, "steps": 0, "torch": torch.__version__, "size": size,
               "builder": bool(ns.builder)}
    steps = [0]

    def hook(opt, args, kwargs):
        steps[0] += 1
        if steps[0] >= ns.steps:
            raise _StepsDone()

    dev = FakeCudaDevice(gpu)
    status = 0
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from cachealloc.predict.device.accounting import StepAccounting
    accounting = StepAccounting(dev.recording)
    accounting_handle = register_optimizer_step_post_hook(accounting)
    try:
        with dev:
            if ns.builder:
                path, _, func = ns.builder.rpartition(":")
                spec = importlib.util.spec_from_file_location("_cachealloc_predict_builder", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                # FUNC names a function, or a key of the module's WORKLOADS dict.
                build = getattr(mod, func, None) or getattr(mod, "WORKLOADS", {}).get(func)
                if build is None:
                    raise SystemExit(f"{path} has no function or WORKLOADS entry {func!r}")
                step = build(size)
                for _ in range(ns.steps):
                    step()
                    steps[0] += 1
                del step, build, mod
            else:
                import runpy
                from torch.optim.optimizer import register_optimizer_step_post_hook
                handle = register_optimizer_step_post_hook(hook)
                sys.argv = list(script)
                try:
                    runpy.run_path(script[0], run_name="__main__")
                except _StepsDone:
                    pass
                except SystemExit as e:
                    if e.code not in (0, None):
                        raise
                finally:
                    handle.remove()
    except PredictionRefused as e:
        summary["refused"] = str(e)
        status = 3
    except _StepsDone:
        pass
    finally:
        accounting_handle.remove()
    summary["steps"] = steps[0]
    summary["at_optimizer_step"] = accounting.result
    summary["step_ends"] = accounting.step_ends
    from cachealloc.predict.device import peak_makeup
    tags = dict(accounting.tags)
    tags.update((aid, "workspaces") for aid in dev.recording.workspaces)
    summary["peak_makeup"] = peak_makeup.at_peak(dev.recording.events, tags)
    summary["record_seconds"] = time.perf_counter() - t0
    summary.update(dev.recording.stats())
    summary["modelled"] = gpu_model.describe(gpu, torch.__version__, dev.recording.cudnn.describe())
    trace_writer.write(out, dev.recording.events, dev.recording.fallible)
    with open(summary_path, "w") as f:
        json.dump(summary, f)
    del dev
    gc.collect()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
