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


class RecordError(RuntimeError):
    """The step itself failed on the fake device (its traceback included)."""


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


def _result(status, summary: pathlib.Path, trace: pathlib.Path, log: str,
            timeout: Optional[float] = None) -> Recorded:
    if status == 3 and summary.exists():
        data = json.loads(summary.read_text())
        failure = data.get("failure") or {"kind": "refused", "where": None,
                                          "detail": data["refused"]}
        raise PredictionRefused.from_failure(data["refused"], failure)
    stack = pathlib.Path(str(summary) + ".stack")
    if timeout is not None and stack.exists() and "Timeout (" in stack.read_text(errors="replace"):
        # The watchdog thread could not run (the main thread held the GIL):
        # faulthandler's dump says where the step was (watchdog.py).
        raise _timed_out(timeout, stack)
    if status != 0 or not summary.exists():
        raise RecordError("the step failed on the fake device (exit %s):\n%s" % (status, log[-4000:]))
    return Recorded(trace, json.loads(summary.read_text()))


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
           batch_env: Optional[str] = None, workdir=None, mode: str = "cpu-init",
           timeout: Optional[float] = None) -> Recorded:
    """One recording in a fresh worker process. mode: "cpu-init" or "fake"
    (device/cpu_side.py); timeout: seconds (None: no limit); past it
    PredictionRefused with failure kind "timeout" naming the step's line."""
    workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="cachealloc-predict-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tag = f"s{size}" if size is not None else "run"
    trace, summary = workdir / f"predicted-{tag}.pickle", workdir / f"predicted-{tag}.json"
    for stale in (summary, pathlib.Path(str(summary) + ".stack")):
        stale.unlink(missing_ok=True)
    builder, script, extra = _request(target, size, batch_arg, batch_env)
    if timeout is not None and timeout <= 0:
        raise out_of_time(timeout, "before the step was recorded")
    cmd = [sys.executable, str(WORKER), "--gpu-json", _gpu_json(gpu), "--out", str(trace),
           "--summary", str(summary), "--steps", str(steps), "--mode", mode]
    if timeout is not None:
        cmd += ["--deadline", repr(time.time() + timeout)]
    cmd += ["--builder", builder, "--size", str(size)] if builder else ["--"] + script
    proc = _start(cmd, dict(_worker_env(), **extra), stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=_grace(timeout))
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise _timed_out(timeout, pathlib.Path(str(summary) + ".stack")) from None
    finally:
        _kill(proc)
    return _result(proc.returncode, summary, trace, err, timeout)


class Session:
    """One worker process serving many recordings of one target (a size
    search): torch is imported once. The script's output goes to a log file
    in workdir."""

    def __init__(self, target, gpu: Gpu, *, steps=3, batch_arg=None, batch_env=None, workdir=None,
                 mode: str = "cpu-init"):
        self.target, self.batch_arg, self.batch_env = target, batch_arg, batch_env
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

    def record(self, size: int, timeout: Optional[float] = None) -> Recorded:
        _, script, extra = _request(self.target, size, self.batch_arg, self.batch_env)
        trace = self.workdir / f"predicted-s{size}.pickle"
        summary = self.workdir / f"predicted-s{size}.json"
        stack = pathlib.Path(str(summary) + ".stack")
        for stale in (summary, stack):
            stale.unlink(missing_ok=True)
        if timeout is not None and timeout <= 0:
            raise out_of_time(timeout, f"before size {size} was recorded")
        if self.proc.poll() is not None:
            raise RecordError("the worker is gone (exit %s):\n%s"
                              % (self.proc.returncode, self.log_path.read_text()[-4000:]))
        req = {"size": size, "out": str(trace), "summary": str(summary), "argv": script,
               "env": extra, "deadline": None if timeout is None else time.time() + timeout}
        self._requests.write(json.dumps(req) + "\n")
        self._requests.flush()
        ready, _, _ = select.select([self._reply], [], [], _grace(timeout))
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
        return _result(status, summary, trace, self.log_path.read_text(), timeout)

    def close(self) -> None:
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
