"""Runs one fake-device recording in a fresh worker process (worker.py) and
returns where its trace is and what it saw.

A target is either a builder, "path/to/file.py:function" (function(size)
returns a callable that runs one training step), or a command line
["python", "train.py", ...] run unmodified. For a command, the size under
search reaches the script as the caller says (size_argv): an argument
rewritten (`--batch-size 32`, `--batch-size=32`, appended if absent) or an
environment variable.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import List, Optional, Sequence, Union

from ..gpus import Gpu
from ..device import watchdog
from ..device.failure import PredictionRefused, is_installed_file

WORKER = pathlib.Path(__file__).parent.parent / "device" / "worker.py"


# Bytes of the script's own output shown with an error: its last lines,
# where a swallowed failure usually printed itself. The output goes to a
# file, never to memory, so a chatty script costs disk, not host memory.
TAIL_BYTES = 6000


class RecordError(RuntimeError):
    """The step could not be predicted: it failed on the fake device (kind
    "failed": its traceback is in the output tail), or it ran and showed no
    step to predict ("no_step", "no_allocation"). failure: {"kind", "where",
    "detail"} as nohang's PredictionRefused.failure; output_tail: the last
    TAIL_BYTES of the script's stdout and stderr; exceptions: what went
    through the user's code (device/caught.py), when traced."""

    def __init__(self, message: str, kind: str = "failed", output_tail: str = "",
                 exceptions=(), where=None):
        super().__init__(message)
        self.failure = {"kind": kind, "where": where, "detail": message}
        self.output_tail = output_tail
        self.exceptions = list(exceptions)

    def __str__(self) -> str:
        """The message and the output's tail (API callers get both in one)."""
        return self.failure["detail"] + ("\n" + self.output_tail if self.output_tail else "")


def not_seen(summary: dict, no_optimizer_step: bool):
    """(kind, message) when a recording showed no step to predict, else None.
    No CUDA allocation is always an error (nothing that runs on the GPU was
    seen: a prediction would be an empty one); a script with no
    optimizer.step() is one unless the user said it has none (a builder's
    step is what its callable does: counted per call)."""
    if not summary.get("allocations"):
        return ("no_allocation", "the step made no CUDA allocation on the fake device, so there is "
                "nothing to predict: does the script put its model and data on \"cuda\", and did it "
                "catch its own failure before the step? (its output and any exception it raised are "
                "below)")
    if not summary.get("builder") and not summary.get("steps") and not no_optimizer_step:
        return ("no_step", "the script ran to its end without an optimizer.step(): no training "
                "step was seen (did it catch its own failure? its output and any exception it "
                "raised are below). For an inference or evaluation script, which has no optimizer "
                "step, pass --no-optimizer-step")
    return None


def tail(path: pathlib.Path, start: int = 0) -> str:
    """The last TAIL_BYTES of a log file from byte `start` on."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            f.seek(max(start, end - TAIL_BYTES))
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


@dataclasses.dataclass
class Recorded:
    trace: pathlib.Path
    summary: dict


def size_argv(argv: Sequence[str], arg: str, size: int) -> List[str]:
    """argv with `arg VALUE` / `arg=VALUE` set to size (appended if absent)."""
    out = list(argv)
    for i, a in enumerate(out):
        if a == arg and i + 1 < len(out):
            out[i + 1] = str(size)
            return out
        if a.startswith(arg + "="):
            out[i] = f"{arg}={size}"
            return out
    return out + [arg, str(size)]


def _script_of(command: Sequence[str]) -> List[str]:
    """The script and its arguments from `python [-u] train.py ...` or `train.py ...`."""
    cmd = list(command)
    if cmd and (os.path.basename(cmd[0]).startswith("python")):
        cmd = cmd[1:]
        while cmd and cmd[0].startswith("-") and cmd[0] != "-m":
            cmd = cmd[1:]
        if cmd and cmd[0] == "-m":
            raise ValueError("python -m MODULE is not supported: give the script's path")
    if not cmd:
        raise ValueError("no script given")
    if not pathlib.Path(cmd[0]).is_file():
        raise ValueError(f"script {cmd[0]!r} not found")
    return cmd


def _gpu_json(gpu: Gpu) -> str:
    return json.dumps({"name": gpu.name, "total_memory": gpu.total_memory,
                       "capability": list(gpu.capability),
                       "multi_processor_count": gpu.multi_processor_count,
                       "context_bytes": gpu.context_bytes, "product": gpu.product})


def _request(target, size, batch_arg, batch_env):
    """(builder or None, script argv, extra env) for one size."""
    if isinstance(target, str):
        if ":" not in target:
            raise ValueError(f"builder {target!r} must be FILE.py:FUNCTION")
        if size is None:
            raise ValueError("a builder needs a size")
        if not pathlib.Path(target.rpartition(":")[0]).is_file():
            raise ValueError(f"builder file {target.rpartition(':')[0]!r} not found")
        return target, [], {}
    script = _script_of(target)
    env = {}
    if size is not None:
        if batch_arg:
            script = size_argv(script, batch_arg, size)
        elif batch_env:
            env[batch_env] = str(size)
        else:
            raise ValueError("searching a script's size needs --batch-arg or --batch-env")
    return None, script, env


def _result(status, summary: pathlib.Path, trace: pathlib.Path, log_tail: str,
            timeout: Optional[float] = None) -> Recorded:
    if status == 3 and summary.exists():
        data = json.loads(summary.read_text())
        failure = data.get("failure") or {"kind": "refused", "where": None,
                                          "detail": data["refused"]}
        refused = PredictionRefused.from_failure(data["refused"], failure)
        refused.mode = data.get("mode")     # the mode that ran (--json's "mode")
        raise refused
    stack = pathlib.Path(str(summary) + ".stack")
    if timeout is not None and stack.exists() and "Timeout (" in stack.read_text(errors="replace"):
        # The watchdog thread could not run (the main thread held the GIL):
        # faulthandler's dump says where the step was (watchdog.py).
        raise _timed_out(timeout, stack)
    if status != 0 or not summary.exists():
        raise RecordError(f"the step failed on the fake device (worker exit {status}); "
                          "the end of its output:", "failed", log_tail)
    return Recorded(trace, json.loads(summary.read_text()))


def _seen(rec: Recorded, log_tail: str, no_optimizer_step: bool, again) -> Recorded:
    """rec, or RecordError when it showed no step: then the recording is run
    again by again() with the user's exceptions traced, and the error
    carries that run's output tail and exceptions. When the traced re-run
    itself fails or runs out of the time budget, the error carries the first
    run's output tail (and no exceptions): "no step" is still the answer."""
    why = not_seen(rec.summary, no_optimizer_step)
    if why is None:
        return rec
    exceptions = []
    try:
        traced, log_tail = again()
        exceptions = traced.summary.get("exceptions") or []
    except (PredictionRefused, RecordError):
        pass
    err = RecordError(why[1], why[0], log_tail, exceptions)
    err.mode = rec.summary.get("mode")      # the mode that ran (--json's "mode")
    raise err


def _timed_out(timeout: float, stack: Optional[pathlib.Path]) -> PredictionRefused:
    where, innermost = (watchdog.stack_file_where(str(stack), is_installed_file)
                        if stack is not None else (None, None))
    detail = (f"the prediction's time budget ran out with the step at "
              f"{where or 'an unknown line'}" + (f" (innermost frame {innermost})" if innermost else
                                                  " (the worker did not answer)")
              + "; allow more with --timeout SECONDS")
    return PredictionRefused.from_failure(f"timed out: {detail}", {"kind": "timeout", "where": where,
                                                                   "detail": detail})


def out_of_time(timeout: float, phase: str) -> PredictionRefused:
    """The budget ran out outside a recording (replays, between probes)."""
    total = f" ({timeout:.0f} s)" if timeout and timeout > 0 else ""
    detail = (f"the prediction's time budget{total} ran out {phase}; allow more with "
              f"--timeout SECONDS")
    return PredictionRefused.from_failure(f"timed out: {detail}", {"kind": "timeout", "where": None,
                                                                   "detail": detail})


def _worker_env():
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def _kill(proc: subprocess.Popen) -> None:
    """The worker and whatever the script started (its own process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait()


def _grace(timeout: Optional[float]) -> Optional[float]:
    """How long the caller waits for a worker given `timeout`: the worker's
    own watchdog, then faulthandler's backstop, then a margin."""
    return None if timeout is None else timeout + 2 * watchdog.BACKSTOP_S


def _start(cmd, env, **kw) -> subprocess.Popen:
    # Its own session: the worker and the script's children are killed as
    # one group (_kill); the worker ends itself if this process dies.
    cmd = cmd[:2] + ["--parent-pid", str(os.getpid())] + cmd[2:]   # before any "--"
    return subprocess.Popen(cmd, env=env,
                            stdin=subprocess.DEVNULL, start_new_session=True, **kw)


def record(target: Union[str, Sequence[str]], gpu: Gpu, *, steps: int = 3,
           size: Optional[int] = None, batch_arg: Optional[str] = None,
           batch_env: Optional[str] = None, workdir=None,
           no_optimizer_step: bool = False, mode: str = "cpu-init",
           timeout: Optional[float] = None) -> Recorded:
    """One recording in a fresh worker process. mode: "cpu-init" or "fake"
    (device/cpu_side.py); timeout: seconds (None: no limit) for the
    recording and any traced re-run together; past it PredictionRefused with
    failure kind "timeout" naming the step's line. RecordError when the step
    failed or was not seen (not_seen). The worker's output goes to a log
    file in workdir (disk, not memory); errors carry its tail."""
    workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="cachealloc-predict-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tag = f"s{size}" if size is not None else "run"
    builder, script, extra = _request(target, size, batch_arg, batch_env)
    if timeout is not None and timeout <= 0:
        raise out_of_time(timeout, "before the step was recorded")
    deadline = None if timeout is None else time.time() + timeout

    def run(suffix: str = "", traced: bool = False):
        trace = workdir / f"predicted-{tag}{suffix}.pickle"
        summary = workdir / f"predicted-{tag}{suffix}.json"
        stack = pathlib.Path(str(summary) + ".stack")
        log = workdir / f"worker-{tag}{suffix}.log"
        for stale in (summary, stack):
            stale.unlink(missing_ok=True)
        left = None if deadline is None else deadline - time.time()
        if left is not None and left <= 0:
            raise out_of_time(timeout, "before the step was recorded")
        cmd = [sys.executable, str(WORKER), "--gpu-json", _gpu_json(gpu), "--out", str(trace),
               "--summary", str(summary), "--steps", str(steps), "--mode", mode]
        cmd += ["--trace-exceptions"] if traced else []
        if deadline is not None:
            cmd += ["--deadline", repr(deadline)]
        cmd += ["--builder", builder, "--size", str(size)] if builder else ["--"] + script
        with open(log, "wb") as out:
            proc = _start(cmd, dict(_worker_env(), **extra), stdout=out, stderr=subprocess.STDOUT)
            try:
                proc.wait(timeout=_grace(left))
            except subprocess.TimeoutExpired:
                _kill(proc)
                raise _timed_out(timeout, stack) from None
            finally:
                _kill(proc)
        log_tail = tail(log)
        return _result(proc.returncode, summary, trace, log_tail, timeout), log_tail

    rec, log_tail = run()
    return _seen(rec, log_tail, no_optimizer_step, lambda: run("-traced", True))


class Session:
    """One worker process serving many recordings of one target (a size
    search): torch is imported once. The script's output goes to a log file
    in workdir."""

    def __init__(self, target, gpu: Gpu, *, steps=3, batch_arg=None, batch_env=None, workdir=None,
                 no_optimizer_step: bool = False, mode: str = "cpu-init"):
        self.target, self.batch_arg, self.batch_env = target, batch_arg, batch_env
        self.no_optimizer_step = no_optimizer_step
        self.workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="cachealloc-predict-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        builder, _, _ = _request(target, 1, batch_arg, batch_env)
        read_fd, write_fd = os.pipe()           # replies: worker -> here
        req_read, req_write = os.pipe()         # requests: here -> worker
        cmd = [sys.executable, str(WORKER), "--gpu-json", _gpu_json(gpu), "--steps", str(steps),
               "--reply-fd", str(write_fd), "--request-fd", str(req_read), "--mode", mode]
        if builder:
            cmd += ["--builder", builder]
        self.log_path = self.workdir / "worker.log"
        self._log = open(self.log_path, "w")
        self.proc = _start(cmd, _worker_env(), stdout=self._log, stderr=self._log,
                           pass_fds=(write_fd, req_read))
        os.close(write_fd)
        os.close(req_read)
        self._reply = os.fdopen(read_fd, "r")
        self._requests = os.fdopen(req_write, "w")
        self.busy = None        # the request start() sent and wait() has not taken

    def record(self, size: int, timeout: Optional[float] = None) -> Recorded:
        """One size; timeout: seconds for it and any traced re-run together."""
        if timeout is not None and timeout <= 0:
            raise out_of_time(timeout, f"before size {size} was recorded")
        deadline = None if timeout is None else time.time() + timeout
        rec, log_tail = self._record(size, timeout, deadline)
        return _seen(rec, log_tail, self.no_optimizer_step,
                     lambda: self._record(size, timeout, deadline, True))

    def _record(self, size: int, timeout: Optional[float], deadline: Optional[float],
                traced: bool = False):
        self.start(size, timeout, deadline, traced)
        return self.wait()

    def start(self, size: int, timeout: Optional[float], deadline: Optional[float],
              traced: bool = False) -> None:
        """Sends one recording's request; wait() takes its answer. One
        request at a time (busy while it runs)."""
        _, script, extra = _request(self.target, size, self.batch_arg, self.batch_env)
        suffix = "-traced" if traced else ""
        trace = self.workdir / f"predicted-s{size}{suffix}.pickle"
        summary = self.workdir / f"predicted-s{size}{suffix}.json"
        stack = pathlib.Path(str(summary) + ".stack")
        for stale in (summary, stack):
            stale.unlink(missing_ok=True)
        if deadline is not None and deadline <= time.time():
            raise out_of_time(timeout, f"before size {size} was recorded")
        if self.proc.poll() is not None:
            raise RecordError(f"the worker is gone (exit {self.proc.returncode}); the end of its "
                              "output:", "failed", tail(self.log_path))
        req = {"size": size, "out": str(trace), "summary": str(summary), "argv": script,
               "env": extra, "deadline": deadline, "trace_exceptions": traced}
        self._log.flush()
        start = self.log_path.stat().st_size     # this recording's output starts here
        self._requests.write(json.dumps(req) + "\n")
        self._requests.flush()
        self.busy = (size, timeout, deadline, trace, summary, stack, start)

    def wait(self):
        """(Recorded, its output's tail) of the request start() sent."""
        size, timeout, deadline, trace, summary, stack, start = self.busy
        self.busy = None
        left = None if deadline is None else max(0.0, deadline - time.time())
        ready, _, _ = select.select([self._reply], [], [], _grace(left))
        if not ready:
            _kill(self.proc)
            raise _timed_out(timeout, stack)
        line = self._reply.readline()
        if line.strip():
            status = int(line)
        else:                                   # the worker ended (watchdog, faulthandler, crash)
            self.proc.wait()
            status = 3 if self.proc.returncode == 3 else f"worker died, exit {self.proc.returncode}"
        self._log.flush()
        log_tail = tail(self.log_path, start)
        return _result(status, summary, trace, log_tail, timeout), log_tail

    def seen(self, rec: Recorded, log_tail: str, size: int, timeout: Optional[float],
             deadline: Optional[float]) -> Recorded:
        """record()'s check of a recording start()/wait() made."""
        return _seen(rec, log_tail, self.no_optimizer_step,
                     lambda: self._record(size, timeout, deadline, True))

    def close(self) -> None:
        if self.busy is not None:       # a recording no one will take: not waited for
            _kill(self.proc)
        if self.proc.poll() is None:
            try:
                self._requests.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        _kill(self.proc)
        for f in (self._requests, self._reply, self._log):
            try:
                f.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
