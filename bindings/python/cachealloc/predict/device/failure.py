"""How a fake-device recording fails: the exception that carries the
failure (its kind, where, and why) and the user's line it names. The
worker writes `failure` into its summary (worker.py); answer/record.py
raises it again in the caller's process."""
from __future__ import annotations

import torch


class PredictionRefused(RuntimeError):
    """The step does something the fake device cannot predict, or could not
    be recorded; the message names the line of the user's code.

    failure: {"kind", "where", "detail"} (worker.py writes it into the
    summary): kind "refused" (an op or API the fake device cannot model),
    "loop" (a data-dependent loop spinning on a placeholder,
    loop_guard.py) or "timeout" (the prediction's wall-clock budget ran
    out, watchdog.py); where "file:line" (or None), detail a sentence."""

    KINDS = ("refused", "loop", "timeout")

    def __init__(self, message: str, kind: str = "refused", where=None, detail=None):
        super().__init__(message)
        if kind not in self.KINDS:
            raise ValueError(f"failure kind {kind!r} is none of {self.KINDS}")
        if where is None:           # raised inside the step: the user's line now
            import sys
            at = user_frame(sys._getframe(1))
            where = f"{at[0]}:{at[1]}" if at else None
        self.failure = {"kind": kind, "where": where, "detail": detail or message}

    @classmethod
    def from_failure(cls, message: str, failure: dict) -> "PredictionRefused":
        """Raised again in the caller's process from a worker's summary."""
        e = cls(message, failure.get("kind", "refused"), failure.get("where") or "", failure.get("detail"))
        e.failure["where"] = failure.get("where")
        return e


class StopRecording(BaseException):
    """Carries a PredictionRefused out of the user's script: a BaseException,
    so that the script's own `except Exception` cannot swallow a caught loop
    (the recorder would otherwise go on from a wrong state)."""

    def __init__(self, refused: PredictionRefused):
        super().__init__(str(refused))
        self.refused = refused


def _library_dirs():
    import os
    torch_dir = os.path.dirname(torch.__file__)
    here = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))  # cachealloc/
    return torch_dir, here


def user_frame(frame=None):
    """(file, line) of the innermost frame outside torch and cachealloc,
    from frame outward (default: the caller's stack), or None."""
    import sys
    torch_dir, here = _library_dirs()
    f = frame if frame is not None else sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not (name.startswith(torch_dir) or name.startswith(here) or name.startswith("<frozen")):
            return name, f.f_lineno
        f = f.f_back
    return None


def user_line(frame=None) -> str:
    """file:line: source of the innermost frame outside torch and cachealloc."""
    import linecache
    import sys
    at = user_frame(frame if frame is not None else sys._getframe(1))
    if at is None:
        return "(unknown line)"
    return f"{at[0]}:{at[1]}: {linecache.getline(at[0], at[1]).strip()}".strip()
