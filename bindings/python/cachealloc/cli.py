"""The `cachealloc` command that `pip install` puts on PATH.

    cachealloc run [--conf STR] [--backend NAME] [--policy NAME] [--snapshot-dir DIR] [--oom-snapshot DIR] [--] COMMAND [ARGS...]
        runs COMMAND with cachealloc as PyTorch's CUDA allocator in every
        Python process it starts (torchrun's workers too), with no change to
        the program: it sets CACHEALLOC_AUTO=1 (and CACHEALLOC_CONF,
        CACHEALLOC_BACKEND, CACHEALLOC_POLICY, CACHEALLOC_OOM_SNAPSHOT), which the start-up hook of the installed
        package honours (_cachealloc_autoinstall.py). --snapshot-dir: each
        rank writes its snapshot into DIR/rank-NNNNN/ (snapshot_dir.py);
        --oom-snapshot: a snapshot and a diagnosis at each OOM (oom_recorder.py).
    cachealloc predict [...] -- python train.py ...
        will it fit: the step run on a fake CUDA device, in Python
        (predict/answer/cli.py; see `cachealloc predict --help`).
    cachealloc report RUN_DIR [--html PAGE] [--json FILE] [--advise-ranks N]
        every rank's peaks, the live blocks at each peak by allocation
        site, and one advised config for the worst ranks (report/).
    cachealloc doctor
        what this machine gives cachealloc (torch, glue, CUDA backends,
        driver, GPUs), ending in one line: ready, or what to fix
        (doctor.py); exit 0 when ready for GPU use.
    cachealloc replay|compare|min-memory ...
        the compiled tool (tool.tool_path()), run in this process's place.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import List, Optional

from .tool import ToolNotFound, tool_path

RUN_USAGE = """\
cachealloc run [--conf STR] [--backend NAME] [--policy NAME] [--snapshot-dir DIR] [--oom-snapshot DIR] [--] COMMAND [ARGS...]
    Runs COMMAND with cachealloc as PyTorch's CUDA allocator in every Python
    process it starts (e.g. cachealloc run -- torchrun --nproc-per-node 8 train.py).
    --conf: PYTORCH_CUDA_ALLOC_CONF syntax (default: that variable);
    --backend: cuda (default), async, simulated[:BYTES[:DEVICES]];
    --policy: placement policy, native (default), stitch or unmap_on_free
    (docs/policies.md; sets CACHEALLOC_POLICY);
    --snapshot-dir: run directory; every rank records history and writes its
    snapshot into DIR/rank-NNNNN/ at exit (read it with cachealloc report DIR);
    --oom-snapshot DIR: at each out-of-memory error, write a snapshot into DIR
    and follow PyTorch's message with why it failed and what would avoid it
    (no history needed: a 4 MiB ring of requests per device, CACHEALLOC_OOM_RING_MB).
cachealloc doctor
    Checks this machine for cachealloc (torch, glue, CUDA, driver, GPUs) and
    ends with one line: ready, or what to fix.
"""


def run(args: List[str]) -> int:
    """`cachealloc run`: execs the command with the switch set; returns an
    exit status only when it cannot (2 bad usage, 127 command not found)."""
    parser = argparse.ArgumentParser(prog="cachealloc run", usage=RUN_USAGE,
                                     description="Run a command with cachealloc switched on.")
    parser.add_argument("--conf", help="allocator config, PYTORCH_CUDA_ALLOC_CONF syntax")
    parser.add_argument("--backend", help="cuda, async or simulated[:BYTES[:DEVICES]]")
    parser.add_argument("--policy", help="placement policy: native, stitch or unmap_on_free")
    parser.add_argument("--snapshot-dir", help="run directory for every rank's snapshot")
    parser.add_argument("--oom-snapshot", metavar="DIR",
                        help="directory for a snapshot and a diagnosis at each OOM")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(args)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("no COMMAND given")
    if ns.policy is not None:
        from .lifecycle import _check_policy_name
        from ._native import CacheallocError

        try:
            _check_policy_name(ns.policy)
        except CacheallocError as e:
            parser.error(str(e))
        except OSError:  # no library to ask: the program's install() checks the name
            pass
    env = dict(os.environ, CACHEALLOC_AUTO="1")
    if ns.snapshot_dir is not None:
        if not ns.snapshot_dir:
            parser.error("--snapshot-dir needs a directory")
        ns.snapshot_dir = os.path.abspath(ns.snapshot_dir)  # workers may change directory
    for name, value in (("CACHEALLOC_CONF", ns.conf), ("CACHEALLOC_BACKEND", ns.backend),
                        ("CACHEALLOC_POLICY", ns.policy),
                        ("CACHEALLOC_SNAPSHOT_DIR", ns.snapshot_dir),
                        ("CACHEALLOC_OOM_SNAPSHOT", ns.oom_snapshot)):
        if value is not None:
            env[name] = value
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        print(f"cachealloc run: cannot run {command[0]!r}: {e.strerror}", file=sys.stderr)
        return 127


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["run"]:
        return run(args[1:])
    if args[:1] == ["predict"]:
        from .predict.answer.cli import main as predict_main

        return predict_main(args[1:])
    if args[:1] == ["report"]:
        from .report.command import main as report_main

        return report_main(args[1:])
    if args[:1] == ["doctor"]:
        from . import doctor

        return doctor.main()
    try:
        tool = str(tool_path())
    except ToolNotFound as e:
        print(f"cachealloc: {e}", file=sys.stderr)
        return 2
    if not args or args[0] in ("-h", "--help"):
        status = subprocess.run([tool, *args]).returncode
        print("\nswitching cachealloc on without code changes:\n" + RUN_USAGE, end="")
        print("\nwill it fit, predicted on a CPU: cachealloc predict --help")
        return status
    os.execv(tool, [tool, *args])


if __name__ == "__main__":
    sys.exit(main())
