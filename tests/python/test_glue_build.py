"""Compiling the PyTorch glue for the running torch (glue_build.py), as the
first cachealloc.install() does when the package came without a glue for
this torch (an isolated `pip install .` cannot see torch)."""
import os
import pathlib
import stat
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"))
from cachealloc import glue_build  # noqa: E402


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CACHEALLOC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_glue_is_compiled_once_for_the_running_torch_and_cached(torch, cache):
    try:
        path = pathlib.Path(glue_build.build(torch, quiet=True))
    except glue_build.GlueBuildError as e:
        if "not found" in str(e):
            pytest.skip(str(e))  # no compiler or CUDA headers here: nothing to compile with
        raise
    assert path.is_file() and cache in path.parents
    assert torch.__version__ in path.parent.name
    # It says which torch it was compiled against (install() checks it).
    assert torch.__version__.encode() in path.read_bytes()
    assert sorted(p.name for p in path.parent.iterdir()) == ["libcachealloc_torch.so", "lock"]
    mtime = path.stat().st_mtime_ns
    assert glue_build.build(torch, quiet=True) == str(path)  # from the cache, not recompiled
    assert path.stat().st_mtime_ns == mtime


def test_without_a_compiler_the_error_says_so_and_how_to_go_on(torch, cache, monkeypatch):
    monkeypatch.setenv("CXX", "")
    monkeypatch.setenv("PATH", str(cache / "empty"))
    with pytest.raises(glue_build.GlueBuildError, match=r"no C\+\+ compiler found.*torch_glue=False"):
        glue_build.build(torch, quiet=True)


def test_a_failed_compile_shows_the_compilers_message_and_leaves_no_library(torch, cache, tmp_path,
                                                                            monkeypatch):
    fake = tmp_path / "fake-c++"
    fake.write_text("#!/bin/sh\necho 'error: the compiler refused this' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CXX", str(fake))
    try:
        glue_build.command(torch, "out.so")
    except glue_build.GlueBuildError as e:
        pytest.skip(str(e))  # no CUDA headers here
    with pytest.raises(glue_build.GlueBuildError,
                       match=r"(?s)compiling the PyTorch glue failed \(exit 3\).*refused this"):
        glue_build.build(torch, quiet=True)
    assert not any(p.suffix == ".so" or p.name.endswith(".partial")
                   for p in cache.rglob("*")), list(cache.rglob("*"))
