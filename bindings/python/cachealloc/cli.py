"""The `cachealloc` command that `pip install` puts on PATH.

    cachealloc [--help | -h]
        the commands, one line each (COMMANDS), and how to get each one's
        help; with no command the same text, exit 2. `cachealloc help
        COMMAND` is `cachealloc COMMAND --help`.

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
import sys
from typing import List, Optional

from .tool import ToolNotFound, tool_path

# Every command, in the order the help lists them, by group: (word, one
# line). The compiled tool's commands carry the summaries its own help
# gives (tools/cachealloc_main.cc; test_command.py checks they agree).
COMMANDS = (
    ("will it fit, and running with cachealloc", (
        ("predict", "will it fit? a training step predicted on a CPU, no GPU needed"),
        ("run", "run a command with cachealloc as PyTorch's CUDA allocator"),
        ("doctor", "check this machine for cachealloc: ready, or what to fix"),
    )),
    ("after a run", (
        ("report", "every rank's peaks in a run directory, and a config for the worst"),
        ("explain", "why a snapshot ran out of memory, and what would avoid it"),
    )),
    ("the fragmentation lab (a recorded trace replayed on the engine)", (
        ("replay", "replay a trace on the engine, checked event by event"),
        ("compare", "what-if replays of a trace under several configs"),
        ("min-memory", "the smallest memory limit a trace runs in without OOM"),
        ("advise", "which allocator settings to use for a trace"),
    )),
)
PYTHON_COMMANDS = ("predict", "run", "doctor", "report")  # the rest is the compiled tool's


def usage() -> str:
    """The top-level help: the commands first, one line each."""
    lines = ["usage: cachealloc COMMAND [ARGS...]", "",
             "A caching CUDA memory allocator for PyTorch, bit-exact with PyTorch's own, with",
             "a memory predictor, an OOM flight recorder and a what-if lab.", ""]
    for group, commands in COMMANDS:
        lines.append(group + ":")
        lines += [f"  {word:<12}{summary}" for word, summary in commands]
        lines.append("")
    lines += ["`cachealloc COMMAND --help` (or `cachealloc help COMMAND`) shows a command's options.",
              "Exit status: the command's; 2 for no command or an unknown one."]
    return "\n".join(lines) + "\n"


def _unknown(word: str) -> int:
    import difflib

    words = [w for _, commands in COMMANDS for w, _ in commands]
    near = difflib.get_close_matches(word, words, n=1, cutoff=0.6)
    print(f"cachealloc: unknown command {word!r}" + (f" (did you mean {near[0]}?)" if near else "")
          + "\n`cachealloc --help` lists the commands.", file=sys.stderr)
    return 2

RUN_USAGE = """\
cachealloc run [--conf STR] [--backend NAME] [--policy NAME] [--snapshot-dir DIR] [--oom-snapshot DIR] [--] COMMAND [ARGS...]
    Runs COMMAND with cachealloc as PyTorch's CUDA allocator in every Python
    process it starts (e.g. cachealloc run -- torchrun --nproc-per-node 8 train.py).
    --conf: PYTORCH_CUDA_ALLOC_CONF syntax (default: that variable);
    --backend: cuda (default), async, simulated[:BYTES[:DEVICES]];
    --policy: placement policy, native (default), stitch, rescue or unmap_on_free
    (docs/policies.md; sets CACHEALLOC_POLICY);
    --snapshot-dir: run directory; every rank records history and writes its
    snapshot into DIR/rank-NNNNN/ at exit (read it with cachealloc report DIR);
    --oom-snapshot DIR: at each out-of-memory error, write a snapshot into DIR
    and follow PyTorch's message with why it failed and what would avoid it
    (no history needed: a 4 MiB ring of requests per device, CACHEALLOC_OOM_RING_MB).
"""


def run(args: List[str]) -> int:
    """`cachealloc run`: execs the command with the switch set; returns an
    exit status only when it cannot (2 bad usage, 127 command not found)."""
    parser = argparse.ArgumentParser(prog="cachealloc run", usage=RUN_USAGE,
                                     description="Run a command with cachealloc switched on.")
    parser.add_argument("--conf", help="allocator config, PYTORCH_CUDA_ALLOC_CONF syntax")
    parser.add_argument("--backend", help="cuda, async or simulated[:BYTES[:DEVICES]]")
    parser.add_argument("--policy", help="placement policy: native, stitch, rescue or unmap_on_free")
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
    # No command, -h and --help print the same list (no command is a usage
    # error all the same); none of them needs the compiled tool.
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 2 if not args else 0
    if args[0] == "help":
        if len(args) == 1:
            sys.stdout.write(usage())
            return 0
        return main([args[1], "--help"])
    if not any(args[0] == w for _, commands in COMMANDS for w, _ in commands):
        return _unknown(args[0])
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

        return doctor.main(args[1:])
    try:
        tool = str(tool_path())
    except ToolNotFound as e:
        print(f"cachealloc: {e}", file=sys.stderr)
        return 2
    os.execv(tool, [tool, *args])


if __name__ == "__main__":
    sys.exit(main())
