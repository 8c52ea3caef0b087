"""Shared fixtures: where the built tool and the reference traces are, and
the package on a simulated device. (Traces beyond the repository's own:
reference_data.py.)"""
import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CACHEALLOC_BUILD", REPO / "build"))
CLI = BUILD / "tools" / "cachealloc"
sys.path.insert(0, str(REPO / "bindings" / "python"))


@pytest.fixture(scope="session")
def cli():
    if not CLI.exists():
        pytest.fail(f"{CLI} not built: run cmake --build {BUILD} first")
    return CLI


@pytest.fixture(scope="session")
def traces_dir():
    """The repository's reference traces (tests/data/traces), always there."""
    return REPO / "tests" / "data" / "traces"


@pytest.fixture
def ca():
    """cachealloc on a fresh simulated 8 GiB device (one per test)."""
    if "CACHEALLOC_LIBRARY" not in os.environ:
        lib = BUILD / "bindings" / "libcachealloc.so"
        if not lib.exists():
            pytest.fail(f"{lib} not built: ninja -C {BUILD} cachealloc_shared")
        os.environ["CACHEALLOC_LIBRARY"] = str(lib)
    import cachealloc

    cachealloc.init("", "simulated:8589934592")
    yield cachealloc
    cachealloc.record_memory_history(None)
