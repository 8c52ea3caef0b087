"""Shared fixtures: where the built tool and the reference traces are."""
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED = pathlib.Path(os.environ.get("CACHEALLOC_SHARED", REPO.parent / "shared"))
BUILD = pathlib.Path(os.environ.get("CACHEALLOC_BUILD", REPO / "build"))
CLI = BUILD / "tools" / "cachealloc"


@pytest.fixture(scope="session")
def cli():
    if not CLI.exists():
        pytest.fail(f"{CLI} not built: run cmake --build {BUILD} first")
    return CLI


@pytest.fixture(scope="session")
def traces_dir():
    d = SHARED / "traces"
    if not d.is_dir():
        pytest.skip(f"reference traces not found at {d} (set CACHEALLOC_SHARED)")
    return d
