"""The worker's clock and its tie to the caller: a prediction never hangs
and never leaves a worker behind.

- Watchdog: a thread that, when the recording's wall-clock budget runs out,
  reads where the main thread is (sys._current_frames), hands it to the
  worker's callback (which writes the summary with failure kind "timeout")
  and ends the process (os._exit, status 3). Backstop for a main thread
  that holds the GIL (a long C call): faulthandler, from a C thread,
  writes every thread's stack to the stack file BACKSTOP_S later and exits;
  the caller reads that file (stack_file_where) and, BACKSTOP_S more later,
  kills the worker's process group itself (answer/record.py).
- die_with_parent: the kernel kills the worker when the caller dies
  (Linux PR_SET_PDEATHSIG), so a caller killed with SIGKILL leaves none;
  elsewhere a thread polls the parent's pid.
"""
from __future__ import annotations

import faulthandler
import os
import re
import signal
import sys
import threading
import time

BACKSTOP_S = 5.0        # seconds after the budget: faulthandler dumps and exits


class Watchdog:
    def __init__(self):
        self._main = threading.main_thread().ident
        self._cond = threading.Condition()
        self._deadline = None           # time.monotonic() value, or None (disarmed)
        self._on_expiry = None
        self._stack_file = None
        threading.Thread(target=self._run, name="cachealloc-watchdog", daemon=True).start()

    def arm(self, seconds: float, on_expiry, stack_path: str) -> None:
        """on_expiry(frame of the main thread) runs on the watchdog thread
        when `seconds` have passed; then the process exits with status 3."""
        self._stack_file = open(stack_path, "w")
        # The caller picks the main thread's stack out of faulthandler's dump.
        self._stack_file.write(f"main thread 0x{self._main:016x}\n")
        self._stack_file.flush()
        faulthandler.dump_traceback_later(seconds + BACKSTOP_S, exit=True, file=self._stack_file)
        with self._cond:
            self._deadline = time.monotonic() + max(0.0, seconds)
            self._on_expiry = on_expiry
            self._cond.notify()

    def disarm(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        with self._cond:
            self._deadline = None
            self._cond.notify()
        if self._stack_file is not None:
            self._stack_file.close()
            self._stack_file = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._deadline is None or time.monotonic() < self._deadline:
                    self._cond.wait(None if self._deadline is None
                                    else self._deadline - time.monotonic())
                on_expiry = self._on_expiry
            frame = sys._current_frames().get(self._main)
            try:
                on_expiry(frame)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(3)


def die_with_parent(parent_pid: int) -> None:
    """Ends this process when parent_pid is no longer its parent."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:     # the parent died before prctl took effect
        os._exit(1)

    def poll():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(1)
    threading.Thread(target=poll, name="cachealloc-parent-watch", daemon=True).start()


_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def stack_file_where(path: str, skip) -> tuple:
    """From faulthandler's dump (arm's stack file): (where, innermost) for
    the main thread: the innermost frame for which skip(filename) is false
    ("file:line", or None), and the innermost frame at all ("file:line in
    function", or None)."""
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return None, None
    if not lines or not lines[0].startswith("main thread "):
        return None, None
    main = int(lines[0].split()[-1], 16)
    frames, current = [], None
    for line in lines[1:]:
        m = _THREAD.match(line)
        if m:
            current = int(m.group(1), 16)
            continue
        m = _FRAME.match(line)
        if m and current == main:
            frames.append((m.group(1), int(m.group(2)), m.group(3)))
    if not frames:
        return None, None
    where = next((f"{f}:{n}" for f, n, _ in frames if not skip(f)), None)
    f, n, func = frames[0]
    return where, f"{f}:{n} in {func}"
