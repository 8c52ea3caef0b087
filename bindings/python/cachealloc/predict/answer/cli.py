"""`cachealloc predict`: will it fit, answered on a CPU. It lives in the
Python `cachealloc` command (bindings/python/cachealloc/cli.py sends
`predict` here, as it does `run`; every other command is the C++ tool).

    cachealloc predict --gpu H100-80GB [--memory-fraction F] [--steps N]
        [--size N | --largest [--start N] [--max N]]
        [--batch-arg ARG | --batch-env VAR] [--json] [--html PAGE] [--cudnn-table FILE|none]
        [--timeout SECONDS] [--mode cpu-init|fake] -- python train.py ARGS...
    cachealloc predict --gpu-memory 24GiB --builder step.py:make --size 8

The script runs unmodified on the fake device for N optimizer steps (default
3). A size under search reaches it as --batch-arg's argument (rewritten,
e.g. `--batch-size 32`, or appended if absent) or as --batch-env's
environment variable. Byte sizes as the other commands read them
(1073741824, 2e8, 1.5GiB, 40GB). Exit status: 0 fits, 1 does not fit,
2 bad input, or a step the fake device refused, caught in a data-dependent
loop, or that ran past --timeout (the message names the kind and the line).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import List, Optional

from ..kernels import cudnn_workspace
from . import report
from ..gpus import KNOWN_GPUS, UnknownGpu, resolve
from .record import RecordError
from ..device.failure import PredictionRefused
from .budget import DEFAULT_TIMEOUT
from .search import Progress, fits, largest

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str, allow_zero: bool = False) -> int:
    """As the C++ tool reads sizes: a number with an optional K/M/G/T unit,
    'iB' or 'B' optional, binary either way (40GB is 40 GiB)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(
            f"not a byte size: {text!r} (such as 1073741824, 2e8, 1.5GiB or 40GB)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value < 0 or (value == 0 and not allow_zero):
        raise argparse.ArgumentTypeError(f"byte size must be positive: {text!r}")
    return value


def _context_bytes(text: str) -> int:
    """--context-memory may be 0: a card whose whole memory the allocator gets."""
    return parse_bytes(text, allow_zero=True)


def _fraction(text: str) -> float:
    try:
        f = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < f <= 1:
        raise argparse.ArgumentTypeError(f"--memory-fraction must be in (0, 1], got {text}")
    return f


def _seconds(text: str) -> float:
    try:
        f = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--timeout: not a number of seconds: {text!r}") from None
    if f < 0:
        raise argparse.ArgumentTypeError(f"--timeout must be >= 0 seconds (0: no limit), got {text}")
    return f


def _capability(text: str):
    m = re.fullmatch(r"(\d+)\.(\d+)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"--capability must look like 9.0, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cachealloc predict", description="Will it fit? A training step predicted on a CPU "
        "(fake CUDA device), replayed on cachealloc's exact copy of PyTorch's allocator.",
        epilog="known GPUs: " + ", ".join(KNOWN_GPUS))
    p.add_argument("--gpu", help="target GPU name (see the list below)")
    p.add_argument("--gpu-memory", type=parse_bytes, help="any other GPU: its total memory")
    p.add_argument("--capability", type=_capability, help="compute capability, e.g. 8.0 (default: the GPU's, or 9.0)")
    p.add_argument("--context-memory", type=_context_bytes, help="memory outside the allocator (default: the GPU table's assumption)")
    p.add_argument("--memory-fraction", type=_fraction)
    p.add_argument("--steps", type=int, default=3, help="optimizer steps to record (default 3)")
    p.add_argument("--size", type=int, help="the batch (or other) size to predict")
    p.add_argument("--largest", action="store_true", help="search the largest size that fits")
    p.add_argument("--start", type=int, default=1, help="first size of --largest's search")
    p.add_argument("--max", type=int, default=1 << 16, help="largest size --largest tries")
    p.add_argument("--batch-arg", help="the script argument that carries the size, e.g. --batch-size")
    p.add_argument("--batch-env", help="the environment variable that carries the size")
    p.add_argument("--builder", help="FILE.py:FUNCTION; FUNCTION(size) returns the step")
    p.add_argument("--json", action="store_true")
    p.add_argument("--html", help="also write a page leading with the answer")
    p.add_argument("--cudnn-table", help="cuDNN workspace table (JSON from benchmarks/predict/cudnn_probe.py) "
                   "instead of the bundled one for the GPU; 'none' models no cuDNN workspace")
    p.add_argument("--no-advise", action="store_true", help="skip the advisor's settings search")
    p.add_argument("--progress", action="store_true", help="progress bar even when stderr is not a terminal")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT,
                   help=f"wall-clock seconds for the whole prediction, every recording and replay "
                   f"(default {DEFAULT_TIMEOUT:.0f}; 0: no limit); past it the answer names the "
                   f"step's line")
    p.add_argument("--mode", choices=("cpu-init", "fake"), default="cpu-init",
                   help="cpu-init (default): CPU tensors are real, so a model built on the CPU "
                   "initialises as on your machine, and only what is on the CUDA device is fake "
                   "(falls back to fake, saying so, when host memory is short); fake: every "
                   "tensor is fake")
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def _terminate(signum, frame):
    """SIGTERM (e.g. from `timeout`): unwind, so that the workers are killed
    (answer/record.py's finally blocks) before this process ends."""
    raise SystemExit(128 + signum)


def main(argv: Optional[List[str]] = None) -> int:
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    before = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, before)


def _main(argv: Optional[List[str]]) -> int:
    p = _parser()
    try:
        ns = p.parse_args(argv)
    except SystemExit as e:
        return 0 if e.code == 0 else 2
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command

    def bad(msg: str) -> int:
        print(f"cachealloc predict: {msg}", file=sys.stderr)
        return 2

    if bool(command) == bool(ns.builder):
        return bad("give either -- COMMAND (a script to run) or --builder FILE:FUNCTION")
    if ns.steps < 1:
        return bad("--steps must be at least 1")
    if ns.builder and ns.size is None and not ns.largest:
        return bad("--builder needs --size or --largest")
    if ns.largest and command and not (ns.batch_arg or ns.batch_env):
        return bad("--largest on a script needs --batch-arg or --batch-env (how the size reaches it)")
    try:
        gpu = resolve(ns.gpu, ns.gpu_memory, ns.capability, ns.context_memory)
    except UnknownGpu as e:
        return bad(str(e))
    if ns.cudnn_table:
        if ns.cudnn_table.lower() != "none":
            try:
                cudnn_workspace.load_table(ns.cudnn_table)
            except cudnn_workspace.TableError as e:
                return bad(str(e))
        os.environ[cudnn_workspace.ENV] = ns.cudnn_table   # the worker processes read it
    target = ns.builder or command
    try:
        if ns.largest:
            answer = largest(target, gpu, memory_fraction=ns.memory_fraction, steps=ns.steps,
                             start=ns.start, max_size=ns.max, batch_arg=ns.batch_arg,
                             batch_env=ns.batch_env, progress=Progress(True if ns.progress else None),
                             mode=ns.mode, timeout=ns.timeout)
            text = report.largest_text(answer)
            status = 0 if answer["largest_fitting"] > 0 else 1
        else:
            answer = fits(target, gpu, memory_fraction=ns.memory_fraction, steps=ns.steps,
                          size=ns.size, batch_arg=ns.batch_arg, batch_env=ns.batch_env,
                          advise=not ns.no_advise, mode=ns.mode, timeout=ns.timeout)
            text = report.fits_text(answer)
            status = 0 if answer["fits"] else 1
    except PredictionRefused as e:
        # The failure's kind leads: refused, loop (caught in a data-dependent
        # loop) or timeout; the message names the line.
        f = e.failure
        head = {"refused": "refused", "loop": "caught in a loop",
                "timeout": f"timed out (--timeout {ns.timeout:g} s)"}[f["kind"]]
        return bad(f"{head} at {f['where'] or 'an unknown line'}: {f['detail']}")
    except (RecordError, ValueError) as e:
        return bad(str(e))
    if ns.html:
        with open(ns.html, "w") as f:
            f.write(report.page(answer, text))
    if ns.json:
        json.dump(answer, sys.stdout, indent=1, default=str)
        print()
    else:
        sys.stdout.write(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
