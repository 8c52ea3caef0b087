"""The GPU tests' way of comparing allocators: a script runs once in a fresh
process per allocator ("native", then "cachealloc", passed as its first
argument) and prints one JSON line of what it saw."""
import json
import os
import pathlib
import subprocess
import sys


HERE = pathlib.Path(__file__).resolve().parent


def run_script(script, mode, *args):
    """The JSON object `script` (a file in tests/gpu) printed last under
    allocator `mode`; fails the test, with its stderr, if it failed."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "bindings" / "python"))
    proc = subprocess.run([sys.executable, str(HERE / script), mode, *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_script_pair(script, *args):
    """(native's, cachealloc's) results of `script`, the two fresh processes
    running at the same time (for checks that time nothing: halves the wait
    for process start-up); fails the test with the stderr of one that failed."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1] / "bindings" / "python"))
    procs = [subprocess.Popen([sys.executable, str(HERE / script), mode, *map(str, args)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for mode in ("native", "cachealloc")]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-5000:]
    return tuple(json.loads(out.strip().splitlines()[-1]) for out, _ in outs)


def run_both(script, *args):
    """(native's, cachealloc's) results of `script`. The cachealloc run
    installs the PyTorch glue, compiling it for the running torch when no
    prebuilt one fits (torch_glue.py); where none can be had, that run
    fails saying why."""
    return run_script(script, "native", *args), run_script(script, "cachealloc", *args)
