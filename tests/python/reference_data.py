"""Where the tests' recorded data are: the repository's copy under
tests/data, plus any trace the reference folder (../shared beside the
checkout, or $CACHEALLOC_SHARED) holds that the copy lacks. The copy is
enough; the reference folder only ever adds traces.

Imported by name (not through conftest.py: tests/gpu has a conftest too)."""
import json
import os
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
SHARED = pathlib.Path(os.environ.get("CACHEALLOC_SHARED", REPO.parent / "shared"))
SUFFIX = ".pickle.gz"


def traces(folder: str = "traces") -> dict:
    """{name: path of name.pickle.gz} of one trace folder ("traces" or
    "traces_expandable"): the repository's, then the reference folder's
    extra names. Each pickle has its .json beside it (meta())."""
    found = {}
    for root in (DATA, SHARED):
        for p in sorted((root / folder).glob("*" + SUFFIX)):
            found.setdefault(p.name[: -len(SUFFIX)], p)
    return dict(sorted(found.items()))


def meta(trace: pathlib.Path) -> dict:
    """The .json recorded beside a trace (settings, n_events, final memory_stats)."""
    return json.loads(trace.with_name(trace.name[: -len(SUFFIX)] + ".json").read_text())


TRACES = traces()
# torch 2.11's memory_stats keys, in the order the file lists them.
STATS_KEYS = (DATA / "reference" / "memory_stats_keys-torch-2.11.txt").read_text().split()
