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
import subprocess
import sys
import tempfile
from typing import List, Optional, Sequence, Union

from ..gpus import Gpu
from ..device.recorder import PredictionRefused

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


def _result(status, summary: pathlib.Path, trace: pathlib.Path, log: str) -> Recorded:
    if status == 3:
        raise PredictionRefused(json.loads(summary.read_text())["refused"])
    if status != 0 or not summary.exists():
        raise RecordError("the step failed on the fake device (exit %s):\n%s" % (status, log[-4000:]))
    return Recorded(trace, json.loads(summary.read_text()))


def _worker_env():
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def record(target: Union[str, Sequence[str]], gpu: Gpu, *, steps: int = 3,
           size: Optional[int] = None, batch_arg: Optional[str] = None,
           batch_env: Optional[str] = None, workdir=None) -> Recorded:
    """One recording in a fresh worker process."""
    workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="cachealloc-predict-"))
    tag = f"s{size}" if size is not None else "run"
    trace, summary = workdir / f"predicted-{tag}.pickle", workdir / f"predicted-{tag}.json"
    builder, script, extra = _request(target, size, batch_arg, batch_env)
    cmd = [sys.executable, str(WORKER), "--gpu-json", _gpu_json(gpu), "--out", str(trace),
           "--summary", str(summary), "--steps", str(steps)]
    cmd += ["--builder", builder, "--size", str(size)] if builder else ["--"] + script
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(_worker_env(), **extra))
    return _result(proc.returncode, summary, trace, proc.stderr)


class Session:
    """One worker process serving many recordings of one target (a size
    search): torch is imported once. The script's output goes to a log file
    in workdir."""

    def __init__(self, target, gpu: Gpu, *, steps=3, batch_arg=None, batch_env=None, workdir=None):
        self.target, self.batch_arg, self.batch_env = target, batch_arg, batch_env
        self.workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="cachealloc-predict-"))
        builder, _, _ = _request(target, 1, batch_arg, batch_env)
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, str(WORKER), "--gpu-json", _gpu_json(gpu), "--steps", str(steps),
               "--reply-fd", str(write_fd)]
        if builder:
            cmd += ["--builder", builder]
        self.log_path = self.workdir / "worker.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=self._log, stderr=self._log,
                                     text=True, env=_worker_env(), pass_fds=(write_fd,))
        os.close(write_fd)
        self._reply = os.fdopen(read_fd, "r")

    def record(self, size: int) -> Recorded:
        _, script, extra = _request(self.target, size, self.batch_arg, self.batch_env)
        trace = self.workdir / f"predicted-s{size}.pickle"
        summary = self.workdir / f"predicted-s{size}.json"
        req = {"size": size, "out": str(trace), "summary": str(summary), "argv": script, "env": extra}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self._reply.readline()
        status = int(line) if line.strip() else "worker died"
        self._log.flush()
        return _result(status, summary, trace, self.log_path.read_text())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reply.close()
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
