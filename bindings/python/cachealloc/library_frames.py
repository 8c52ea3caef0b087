"""Which stack frames belong to the libraries rather than the user's code.

A site ("where did this memory come from?") is the innermost Python frame
that is not torch's or cachealloc's own code. That is decided by where
those two packages are installed, never by a substring of the path: a
user's checkout named `cachealloc` or a script at `~/work/torch/train.py`
is the user's code.

- In the process that records (the OOM recorder, the snapshot folder, the
  profiler), `library_prefixes()` gives the installed package folders; the
  files cachealloc writes carry them under the snapshot's top-level key
  LIBRARY_PREFIXES_KEY, so a reader on another machine decides the same way.
- For a snapshot without that key (native's own dumps), the fallback is
  FALLBACK_DIRS: a frame whose path has a `site-packages` or
  `dist-packages` folder is a library frame. lab/oom_state.cc applies the
  same two rules.
"""
from __future__ import annotations

import os
from typing import Iterable, List, Optional, Sequence

LIBRARY_PREFIXES_KEY = "cachealloc_library_prefixes"
FALLBACK_DIRS = ("/site-packages/", "/dist-packages/")


def library_prefixes() -> List[str]:
    """The folders (each ending in os.sep) of cachealloc and, when it is
    importable, torch, as given and with links resolved."""
    dirs = [os.path.dirname(os.path.abspath(__file__))]
    try:
        import torch

        dirs.append(os.path.dirname(os.path.abspath(torch.__file__)))
    except ImportError:
        pass
    out: List[str] = []
    for d in dirs:
        for v in (d, os.path.realpath(d)):
            p = v.rstrip(os.sep) + os.sep
            if p not in out:
                out.append(p)
    return out


def prefixes_of(snapshot: dict) -> Optional[List[str]]:
    """The prefixes a snapshot carries, or None when it carries none (or
    something that is not a list of strings)."""
    got = snapshot.get(LIBRARY_PREFIXES_KEY) if isinstance(snapshot, dict) else None
    if not isinstance(got, (list, tuple)) or not got or not all(isinstance(p, str) for p in got):
        return None
    return list(got)


def is_library_file(filename: str, prefixes: Optional[Sequence[str]]) -> bool:
    """True for a frame of torch or cachealloc: under one of `prefixes`
    when given, else under a site-packages/dist-packages folder."""
    if prefixes:
        return filename.startswith(tuple(prefixes))
    return any(d in filename for d in FALLBACK_DIRS)


def with_prefixes(snapshot: dict, prefixes: Optional[Iterable[str]] = None) -> dict:
    """`snapshot` with this process's prefixes added (in place; returned)."""
    snapshot[LIBRARY_PREFIXES_KEY] = list(prefixes) if prefixes is not None else library_prefixes()
    return snapshot
