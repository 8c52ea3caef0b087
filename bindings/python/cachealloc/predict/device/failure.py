"""How a fake-device recording fails: the exception that carries the
failure (its kind, where, and why) and the user's line it names. The
worker writes `failure` into its summary (worker.py); answer/record.py
raises it again in the caller's process."""
from __future__ import annotations


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


_PREFIXES = {}     # "library" / "installed" -> tuple of folder prefixes


def _prefixes(kind: str) -> tuple:
    """library: torch's and cachealloc's install folders; installed: those,
    the standard library and the site-packages folders (everything that is
    not the user's own code)."""
    got = _PREFIXES.get(kind)
    if got is None:
        import os
        import sysconfig
        from ...library_frames import library_prefixes
        dirs = list(library_prefixes())
        if kind == "installed":
            paths = sysconfig.get_paths()
            for key in ("stdlib", "platstdlib", "purelib", "platlib"):
                for d in {paths[key], os.path.realpath(paths[key])}:
                    dirs.append(d.rstrip(os.sep) + os.sep)
        got = _PREFIXES[kind] = tuple(dirs) + (("<",) if kind == "installed" else ("<frozen",))
    return got


def installed_prefixes() -> tuple:
    """The folders (as given and with links resolved) of the standard
    library, the site-packages folders, torch and cachealloc, plus "<"
    (no file): what is not the user's own code."""
    return _prefixes("installed")


def is_installed_file(filename: str) -> bool:
    """Not the user's own code: the standard library, an installed package,
    or no file at all ("<string>", "<frozen ...>")."""
    return filename.startswith(_prefixes("installed")) or filename.startswith("<")


def user_frame(frame=None, own: bool = False):
    """(file, line) of the innermost frame outside torch and cachealloc
    (own: outside every installed package and the standard library too),
    from frame outward (default: the caller's stack), or None."""
    import sys
    skip = _prefixes("installed" if own else "library")
    f = frame if frame is not None else sys._getframe(1)
    while f is not None:
        if not f.f_code.co_filename.startswith(skip):
            return f.f_code.co_filename, f.f_lineno
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
