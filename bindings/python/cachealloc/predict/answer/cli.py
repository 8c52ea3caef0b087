"""`cachealloc predict`: will it fit, answered on a CPU. It lives in the
Python `cachealloc` command (bindings/python/cachealloc/cli.py sends
`predict` here, as it does `run`; every other command is the C++ tool).

    cachealloc predict --gpu H100-80GB [--memory-fraction F] [--steps N]
        [--size N | --largest [--start N] [--max N]]
        [--batch-arg ARG | --batch-env VAR] [--no-optimizer-step] [--json] [--html PAGE]
        [--cudnn-table FILE|none] [--cudnn-keys KEYS] [--tuning-errors FILE] [--timeout SECONDS]
        [--mode cpu-init|fake] -- python train.py ARGS...
    cachealloc predict --gpu-memory 24GiB --builder step.py:make --size 8

The script runs unmodified on the fake device for N optimizer steps (default
3). A size under search reaches it as --batch-arg's argument (rewritten,
e.g. `--batch-size 32`, or appended if absent) or as --batch-env's
environment variable. Byte sizes as the other commands read them
(1073741824, 2e8, 1.5GiB, 40GB). Every figure carries an error band
(band.py); "fits" and "does not fit" are said only outside it. Exit status:
schema.EXIT_HELP (0 fits, 1 does not fit, 2 bad input, 3 too close to
call, 4 the step could not be predicted: among others a step the fake
device refused, caught in a data-dependent loop, or that ran past
--timeout, the message naming the kind and the line); --json is
schema.py's document, also on failure.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import List, Optional

from ..kernels import cudnn_workspace, key_probe
from . import band, page, report, schema
from .band_text import failure_text
from ..gpus import KNOWN_GPUS, UnknownGpu, resolve
from .largest import Progress, SizeNotReaching, largest
from .record import RecordError
from ..device.failure import PredictionRefused
from .budget import DEFAULT_TIMEOUT
from .search import fits

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
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="known GPUs: " + ", ".join(KNOWN_GPUS) + "\n\n" + schema.EXIT_HELP)
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
    p.add_argument("--no-optimizer-step", action="store_true",
                   help="the script has no optimizer.step() (inference, evaluation): its whole run "
                   "is the step (without it, a run with no optimizer step is an error)")
    p.add_argument("--json", action="store_true",
                   help=f"the answer as JSON (schema version {schema.SCHEMA_VERSION}, "
                   "docs/prediction.md), also on failure")
    p.add_argument("--tuning-errors", help="the per-class tuning errors the band is made from "
                   "(default: the bundled answer/data/tuning_errors.json)")
    p.add_argument("--html", metavar="PAGE", help="also write a page to decide from: the answer, "
                   "peaks against the size with the limit, memory over the step, what the peak "
                   "is made of (self-contained HTML)")
    p.add_argument("--cudnn-table", help="cuDNN workspace table (JSON from key_probe or benchmarks/predict/cudnn_probe.py; "
                   "used first, the bundled tables for the keys it lacks); 'none' models no cuDNN "
                   "workspace")
    p.add_argument("--cudnn-keys", metavar="KEYS",
                   help="also write the convolutions the cuDNN table lacks, per size recorded, to "
                        "KEYS (JSON); measure them on a GPU with `python -m "
                        "cachealloc.predict.kernels.key_probe KEYS --out TABLE` and predict again "
                        "with --cudnn-table TABLE")
    p.add_argument("--no-advise", action="store_true", help="skip the advisor's settings search")
    p.add_argument("--progress", action="store_true", help="progress bar even when stderr is not a terminal")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
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


def _wants_json(argv) -> bool:
    """--json among the options (not the script's arguments after --)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return "--json" in (args[:args.index("--")] if "--" in args else args)


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
        if e.code == 0:
            return 0
        if _wants_json(argv):
            _emit_failure("fits", {"kind": "bad_input", "message": "invalid arguments (see stderr)"},
                          True, text=False)
        return schema.EXIT_BAD_INPUT
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    kind = "largest" if ns.largest else "fits"

    def bad(msg: str) -> int:
        return _emit_failure(kind, {"kind": "bad_input", "message": msg, "mode": ns.mode}, ns.json)

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
        band.load(ns.tuning_errors)
    except (UnknownGpu, band.BandDataError) as e:
        return bad(str(e))
    if ns.cudnn_table:
        if ns.cudnn_table.lower() != "none":
            try:
                cudnn_workspace.load_table(ns.cudnn_table)
            except cudnn_workspace.TableError as e:
                return bad(str(e))
        # The worker processes read it; a file goes first, the bundled
        # tables give the keys it lacks ("+": cudnn_workspace.choose_table).
        os.environ[cudnn_workspace.ENV] = (ns.cudnn_table if ns.cudnn_table.lower() == "none"
                                           else "+" + ns.cudnn_table)
    target = ns.builder or command
    common = dict(memory_fraction=ns.memory_fraction, steps=ns.steps, batch_arg=ns.batch_arg,
                  batch_env=ns.batch_env, no_optimizer_step=ns.no_optimizer_step,
                  tuning=ns.tuning_errors, mode=ns.mode, timeout=ns.timeout)
    try:
        if ns.largest:
            answer = largest(target, gpu, start=ns.start, max_size=ns.max,
                             progress=Progress(True if ns.progress else None), **common)
            text = report.largest_text(answer)
        else:
            answer = fits(target, gpu, size=ns.size, advise=not ns.no_advise, **common)
            text = report.fits_text(answer)
    except PredictionRefused as e:
        # The failure's kind leads: refused, loop (caught in a data-dependent
        # loop) or timeout; the message names the line. Exit 4 (schema.py).
        f = e.failure
        head = {"refused": "refused", "loop": "caught in a loop",
                "timeout": f"timed out (--timeout {ns.timeout:g} s)"}.get(f["kind"], f["kind"])
        return _emit_failure(kind, {
            "kind": f["kind"], "message": f"{head} at {f['where'] or 'an unknown line'}: "
            f"{f['detail']}", "where": f["where"], "detail": f["detail"],
            "mode": getattr(e, "mode", None) or ns.mode}, ns.json, gpu=gpu.name)
    except (RecordError, SizeNotReaching) as e:
        f = e.failure
        return _emit_failure(kind, {
            "kind": f.get("kind") or "failed", "message": f.get("detail") or str(e),
            "where": f.get("where"), "detail": f.get("detail") or str(e),
            "output_tail": getattr(e, "output_tail", ""),
            "exceptions": getattr(e, "exceptions", []),
            "mode": getattr(e, "mode", None) or ns.mode}, ns.json, gpu=gpu.name)
    except ValueError as e:
        return bad(str(e))
    if ns.html:
        page.write(ns.html, answer, text)
    if ns.cudnn_keys:
        try:
            n = write_keys(ns.cudnn_keys, answer)
        except OSError as e:
            return bad(f"--cudnn-keys {ns.cudnn_keys}: {e}")
        print(f"cachealloc predict: {n} convolution key(s) the cuDNN table lacks written to "
              f"{ns.cudnn_keys}", file=sys.stderr)
    doc = schema.document(answer, kind)
    if ns.json:
        json.dump(doc, sys.stdout, indent=1, default=str)
        print()
    else:
        sys.stdout.write(text)
    return doc["exit_code"]


def write_keys(path: str, answer: dict) -> int:
    """The keys file key_probe.py reads: per size recorded, the missing
    keys in the order the step first called them. Returns how many."""
    sizes = answer.get("cudnn_missing")
    if sizes is None:       # one size (fits): its recording's keys
        size = answer.get("size")
        sizes = {str(size if size is not None else 0):
                 list((answer.get("recording") or {}).get("cudnn_missing_keys") or ())}
    doc = {"format": key_probe.KEYS_FORMAT, "gpu": answer.get("gpu"),
           "sizes": {s: k for s, k in sizes.items() if k}}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    missing = ((answer.get("recording") or {}).get("cudnn") or {}).get("not_modelled_keys") or 0
    written = len(doc["sizes"].get(str(answer.get("size")), ())) if answer.get("size") is not None else None
    if written is not None and missing > written:
        print(f"cachealloc predict: warning: {missing} keys were missing, the recording kept "
              f"{written}: probe them, then predict again for the rest", file=sys.stderr)
    return sum(len(k) for k in doc["sizes"].values())


def _emit_failure(command: str, error: dict, as_json: bool, gpu: Optional[str] = None,
                  text: bool = True) -> int:
    """The error in words on stderr, and as the --json document on stdout."""
    error = {"where": None, "detail": error.get("message"), "output_tail": "", "exceptions": [],
             **error}
    mode = error.pop("mode", None)      # the mode that ran (its summary's), or the one asked for
    if text:
        if error["kind"] == "bad_input":
            print(f"cachealloc predict: {error['message']}", file=sys.stderr)
        else:
            sys.stderr.write(failure_text(error))
    doc = schema.failure_document(command, error, gpu=gpu, assumed_torch=_assumed_torch(),
                                  mode=mode)
    if as_json:
        json.dump(doc, sys.stdout, indent=1, default=str)
        print()
    return doc["exit_code"]


def _assumed_torch() -> Optional[str]:
    try:
        return band.load().get("kernel_models_torch")
    except band.BandDataError:
        return None


if __name__ == "__main__":
    sys.exit(main())
