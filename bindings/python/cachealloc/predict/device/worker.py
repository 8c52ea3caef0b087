"""One fake-device recording, in a fresh process (guard.py says why):

    python worker.py --gpu-json JSON --out TRACE --summary JSON --steps N
                     (--builder FILE:FUNC --size S | -- SCRIPT ARGS...)

Run as a file, not as part of the package: the fake CUDA guard must load
before anything imports torch (the cachealloc package does). A script runs
unmodified as __main__; the recording stops after its N-th optimizer step
(optimizer.step() calls, counted by a global step hook), or when it ends.
A builder FUNC(size) returns a step callable, called N times.
--mode cpu-init (default: CPU tensors real, cpu_side.py) or fake (every
tensor fake). --deadline T: the recording ends at time.time() == T, naming
the step's line (watchdog.py; the caller's clock, so that the worker's own
start-up counts against the prediction's budget). Exit status: 0 recorded,
3 refused, caught in a loop or out of time (the summary's "refused" says why, its "failure" is
{"kind": "refused"|"loop"|"timeout", "where": "file:line", "detail"}).
--trace-exceptions (a request's "trace_exceptions") also lists the
exceptions that went through the user's code (caught.py): the answer layer
re-runs a recording that saw no optimizer step or no allocation so, to say
why. The script's output goes to this process's stdout/stderr, flushed at
the end of each recording (the answer layer shows its tail on an error).
"""
import importlib.util
import json
import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def _load_guard():
    mod = _load_module("_cachealloc_fake_guard", HERE / "guard.py")
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
    p.add_argument("--trace-exceptions", action="store_true")
    p.add_argument("--mode", default="cpu-init", choices=("cpu-init", "fake"))
    p.add_argument("--deadline", type=float, help="time.time() at which the recording is out of time")
    p.add_argument("--parent-pid", type=int, help="end when this process is no longer the parent")
    # Serve many recordings from one process (one torch import): requests
    # are JSON lines on file descriptor --request-fd ({"size", "out",
    # "summary", "argv", "env", "deadline", "trace_exceptions"}), each answered by its exit status
    # as a line on file descriptor --reply-fd. stdin stays the script's own
    # (the caller gives /dev/null: a script's input() gets EOF, not a hang).
    p.add_argument("--reply-fd", type=int)
    p.add_argument("--request-fd", type=int)
    p.add_argument("script", nargs="*")
    ns = p.parse_args(argv)
    from_here = _load_module("_cachealloc_watchdog", HERE / "watchdog.py")
    if ns.parent_pid:
        from_here.die_with_parent(ns.parent_pid)
    watchdog = from_here.Watchdog()
    guard = _load_guard()
    sys.path.insert(0, str(HERE.parents[2]))
    import torch  # noqa: F401  (after the guard)
    guard.after_torch_import()
    if ns.reply_fd is None:
        return record_one(ns, watchdog, ns.size, ns.out, ns.summary, ns.script, ns.deadline,
                          ns.trace_exceptions, last=True)
    reply = os.fdopen(ns.reply_fd, "w", buffering=1)
    for line in os.fdopen(ns.request_fd, "r"):
        req = json.loads(line)
        os.environ.update(req.get("env") or {})
        try:
            status = record_one(ns, watchdog, req.get("size"), req["out"], req["summary"],
                                req.get("argv") or [], req.get("deadline"),
                                req.get("trace_exceptions", False))
        except BaseException as e:  # the script failed: report, keep serving
            import traceback
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        reply.write(f"{status}\n")
    return 0


def _load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_fallen_back = None     # why this worker runs all-fake after cpu-init overflowed the host


def record_one(ns, watchdog, size, out, summary_path, script, deadline=None,
               trace_exceptions=False, last=False):
    """One recording: in --mode, falling back to all-fake when cpu-init's
    real CPU tensors would overflow host memory (host_memory.py). Exit
    status 0 recorded, 3 refused, caught in a loop or out of time (the
    summary's "refused" and "failure" say which and where). last: no
    recording follows in this process, so the step's objects are not
    collected (the process ends without tearing them down, _exit)."""
    import gc
    t0 = time.perf_counter()
    import torch
    from cachealloc.predict.kernels import gpu_model
    from cachealloc.predict.device import trace_writer
    from cachealloc.predict.device.failure import user_frame
    from cachealloc.predict.device.host_memory import HostMemoryExceeded
    from cachealloc.predict.gpus import Gpu

    global _fallen_back
    g = json.loads(ns.gpu_json)
    gpu = Gpu(g["name"], g["total_memory"], tuple(g["capability"]), g["multi_processor_count"],
              g["context_bytes"], g.get("product", ""))
    mode = "fake" if _fallen_back else ns.mode
    summary = {"refused": None, "failure": None, "steps": 0, "torch": torch.__version__,
               "size": size, "builder": bool(ns.builder), "mode": mode,
               "mode_note": _fallen_back}
    state = {"dev": None, "steps": [0]}

    def expired(frame):
        """The watchdog's callback: where the main thread is, as the failure."""
        at = None
        if frame is not None:
            at = user_frame(frame, own=True) or user_frame(frame)
        where = f"{at[0]}:{at[1]}" if at else None
        innermost = (f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
                     if frame is not None else "unknown")
        detail = (f"the prediction's time budget ran out with the step at "
                  f"{where or 'an unknown line'} (innermost frame {innermost}) after "
                  f"{state['steps'][0]} optimizer step(s); allow more with --timeout SECONDS")
        summary.update(refused=f"timed out: {detail}", steps=state["steps"][0],
                       failure={"kind": "timeout", "where": where, "detail": detail},
                       record_seconds=time.perf_counter() - t0)
        with open(summary_path, "w") as f:
            json.dump(summary, f)

    if deadline is not None:
        watchdog.arm(deadline - time.time(), expired, str(summary_path) + ".stack")
    try:
        overflow = None
        try:
            status, dev = _record(ns, gpu, size, script, mode, summary, state, trace_exceptions)
        except HostMemoryExceeded as e:
            overflow = str(e)
        if overflow is not None:
            # Outside the except block, so that its traceback (and the real
            # tensors its frames hold) is gone before the second run.
            _fallen_back = (f"cpu-init mode stopped: {overflow}; ran all-fake instead (the "
                            f"CPU side's values are placeholders)")
            state["dev"] = None
            gc.collect()
            summary.update(mode="fake", mode_note=_fallen_back)
            status, dev = _record(ns, gpu, size, script, "fake", summary, state,
                                  trace_exceptions)
    finally:
        if deadline is not None:
            watchdog.disarm()
    summary["steps"] = state["steps"][0]
    summary["record_seconds"] = time.perf_counter() - t0
    summary.update(dev.recording.stats())
    if dev.cpu_side is not None:
        summary.update(dev.cpu_side.stats())
    summary["modelled"] = gpu_model.describe(gpu, torch.__version__, dev.recording.cudnn.describe())
    summary.update(_coverage_facts(dev.recording))
    sys.stdout.flush()
    sys.stderr.flush()
    trace_writer.write(out, dev.recording.events, dev.recording.fallible)
    summary.update(_write_upper(out, dev.recording))
    with open(summary_path, "w") as f:
        json.dump(summary, f)
    if last:
        return status
    del dev
    state.clear()
    gc.collect()
    return status


def _write_upper(out, recording) -> dict:
    """The trace with each missing convolution's bounded workspace where it
    ran (device/workspace_upper.py), beside the step's own trace; the
    summary's "workspace_upper_trace" names it (absent: none needed)."""
    from cachealloc.predict.device import trace_writer, workspace_upper
    from cachealloc.predict.kernels import workspace_bound
    events, n = workspace_upper.upper_events(
        recording.events, recording.conv_calls, recording.cudnn.missing_keys,
        workspace_bound.bound, recording._next_id)
    if not n:
        return {}
    path = str(out) + ".upper"
    trace_writer.write(path, events, recording.fallible)   # measured workspaces stay fallible
    return {"workspace_upper_trace": path, "workspace_upper_calls": n}


def _record(ns, gpu, size, script, mode, summary, state, trace_exceptions=False):
    """Runs the step once on a fresh fake device; (status, device)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from cachealloc.predict.device.accounting import StepAccounting
    from cachealloc.predict.device.caught import CaughtExceptions
    from cachealloc.predict.device import peak_makeup
    import contextlib
    import gc
    from cachealloc.predict.device.fake_device import FakeCudaDevice
    from cachealloc.predict.device.failure import PredictionRefused, StopRecording

    steps = state["steps"] = [0]

    def hook(opt, args, kwargs):
        steps[0] += 1
        if steps[0] >= ns.steps:
            raise _StepsDone()

    dev = state["dev"] = FakeCudaDevice(gpu, mode)
    status = 0
    caught = CaughtExceptions() if trace_exceptions else None
    accounting = StepAccounting(dev.recording)
    accounting_handle = register_optimizer_step_post_hook(accounting)
    try:
        with dev, (caught or contextlib.nullcontext()):
            # Everything alive now (torch, the dynamo modules FakeTensorMode
            # imported, this worker) is left out of the cyclic collector's
            # full passes, which otherwise walk it again and again during
            # the step (about 1 s of a recording). Reference counting frees
            # as before; the step's own objects are collected as before.
            gc.freeze()
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
    except (PredictionRefused, StopRecording) as e:
        refused = e.refused if isinstance(e, StopRecording) else e
        summary["refused"] = str(refused)
        summary["failure"] = refused.failure
        status = 3
    except _StepsDone:
        pass
    finally:
        accounting_handle.remove()
    summary["at_optimizer_step"] = accounting.result
    summary["step_ends"] = accounting.step_ends
    tags = dict(accounting.tags)
    tags.update((aid, "workspaces") for aid in dev.recording.workspaces)
    summary["peak_makeup"] = peak_makeup.at_peak(dev.recording.events, tags)
    if caught is not None:
        summary["exceptions"] = caught.found
    return status, dev


def _coverage_facts(recording) -> dict:
    """What the answer layer's band needs beyond Recording.stats(): which
    ops that ran have a kernel model (cuda_kernels.MODELS, the cuBLAS GEMMs,
    the cuDNN convolutions, the steered attention kernels), and the
    convolution keys the cuDNN table lacked and those it had from another
    GPU of the same capability (at most 500 each, with their calls)."""
    from cachealloc.predict.kernels import cuda_kernels, cudnn_key, cudnn_workspace
    from cachealloc.predict.device import recorder
    modelled = {str(op) for op in cuda_kernels.MODELS}
    modelled |= {str(op) for op in recorder._GEMM_OPS}
    if cudnn_workspace.NON_CUDNN_CONV not in recording.unmodelled:
        # (convolutions that ran without cuDNN are a band item instead)
        modelled |= {str(op) for op in cudnn_key.FORWARD_OPS + cudnn_key.BACKWARD_OPS}
    missing = dict(list(recording.cudnn.missing_keys.items())[:500])
    borrowed = dict(list(recording.cudnn.borrowed_keys.items())[:500])
    return {"kernel_model_ops": sorted(op for op in recording.op_calls if op in modelled),
            "cudnn_missing_keys": missing, "cudnn_other_gpu_keys": borrowed}


def _exit(status) -> None:
    """Ends the process once its answer is written (the trace, the summary,
    the reply): without the interpreter's teardown, which frees the step's
    objects, torch's and the libraries' modules one by one (1-2 s, as long
    as a small model's whole recording). The script's atexit handlers do
    not run: the recording is over when they would."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if status is None else status if isinstance(status, int) else 1)


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
