"""Exceptions that went through the user's own code during a recording,
caught or not: what a script that swallows its failure (`try: ... except
Exception as e: print(e)`) hid from the run's outcome.

Why a trace function: an exception the script catches leaves no trace
after the fact, and Python 3.11 has no cheap exception event
(sys.monitoring is 3.12+). sys.settrace sees every frame entry, so a run
traced this way is about twice as slow: the worker turns it on only to
re-run a recording that saw no optimizer step or no allocation, to say why.

"The user's code": a frame whose file is not under the standard library,
site-packages / dist-packages, torch or cachealloc (so a library catching
its own ImportError is not listed). Listed once per (type, message),
bounded (LIMIT exceptions, messages cut at MESSAGE_CHARS), in the order
first seen, with the user's line where each passed and the innermost line
it was raised at. StopIteration and friends (normal control flow) and
non-Exception BaseExceptions (the worker's own stop signal, SystemExit)
are not listed.
"""
from __future__ import annotations

import os
import sys
import threading

from .failure import installed_prefixes

LIMIT = 10
MESSAGE_CHARS = 500
_FLOW = (StopIteration, StopAsyncIteration, GeneratorExit)


class CaughtExceptions:
    """A context manager: while active, records exceptions seen in user frames."""

    def __init__(self):
        self.found = []              # dicts: type, message, raised_at, seen_at
        self._keys = set()
        self._user = {}              # code object -> is the user's
        # failure.py's folders: the resolved ones match a resolved file name.
        self._skip = installed_prefixes()

    def _is_user(self, code) -> bool:
        r = self._user.get(code)
        if r is None:
            f = code.co_filename
            if f.startswith("<"):
                r = False
            else:
                real = os.path.realpath(f)
                r = not real.startswith(self._skip) and "site-packages" not in real \
                    and "dist-packages" not in real
            self._user[code] = r
        return r

    def _global(self, frame, event, arg):
        if event != "call" or not self._is_user(frame.f_code):
            return None
        frame.f_trace_lines = False   # exception events only: lines would cost more
        return self._local

    def _local(self, frame, event, arg):
        if event == "exception":
            self._note(frame, *arg)
        return self._local

    def _note(self, frame, etype, value, tb) -> None:
        if not isinstance(value, Exception) or isinstance(value, _FLOW) or len(self.found) >= LIMIT:
            return
        message = str(value)[:MESSAGE_CHARS]
        key = (etype.__name__, message)
        if key in self._keys:
            return
        self._keys.add(key)
        raised = tb
        while raised is not None and raised.tb_next is not None:
            raised = raised.tb_next
        where = (f"{raised.tb_frame.f_code.co_filename}:{raised.tb_lineno}" if raised is not None
                 else "?")
        self.found.append({"type": etype.__name__, "message": message, "raised_at": where,
                           "seen_at": f"{frame.f_code.co_filename}:{frame.f_lineno}"})

    def __enter__(self):
        sys.settrace(self._global)
        threading.settrace(self._global)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)
        threading.settrace(None)
        return False
