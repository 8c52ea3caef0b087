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

from .gpus import Gpu
from .recorder import PredictionRefused

WORKER = pathlib.Path(__file__).with_name("worker.py")


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


def record(target: Union[str, Sequence[str]], gpu: Gpu, *, steps: int = 3,
           size: Optional[int] = None, batch_arg: Optional[str] = None,
           batch_env: Optional[str] = None, workdir=None) -> Recorded:
    workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="cachealloc-predict-"))
    tag = f"s{size}" if size is not None else "run"
    trace = workdir / f"predicted-{tag}.pickle"
    summary = workdir / f"predicted-{tag}.json"
    gpu_json = json.dumps({"name": gpu.name, "total_memory": gpu.total_memory,
                           "capability": list(gpu.capability),
                           "multi_processor_count": gpu.multi_processor_count,
                           "context_bytes": gpu.context_bytes, "product": gpu.product})
    cmd = [sys.executable, str(WORKER), "--gpu-json", gpu_json, "--out", str(trace),
           "--summary", str(summary), "--steps", str(steps)]
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if isinstance(target, str):
        if ":" not in target:
            raise ValueError(f"builder {target!r} must be FILE.py:FUNCTION")
        if size is None:
            raise ValueError("a builder needs a size")
        cmd += ["--builder", target, "--size", str(size)]
    else:
        script = _script_of(target)
        if size is not None:
            if batch_arg:
                script = size_argv(script, batch_arg, size)
            elif batch_env:
                env[batch_env] = str(size)
            else:
                raise ValueError("searching a script's size needs --batch-arg or --batch-env")
        cmd += ["--"] + script
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode == 3:
        raise PredictionRefused(json.loads(summary.read_text())["refused"])
    if proc.returncode != 0:
        raise RecordError("the step failed on the fake device (exit %d):\n%s"
                          % (proc.returncode, proc.stderr[-4000:]))
    return Recorded(trace, json.loads(summary.read_text()))
