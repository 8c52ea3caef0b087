"""Which PyTorch glue install() loads (torch_glue.py): the one prebuilt for
the running torch release (the wheel's compile matrix) first; a torch
release with none is compiled for, or refused naming the releases there is
glue for. Uses stand-in files and torch modules: nothing is loaded."""
import pathlib
import sys
import types

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"))
from cachealloc import glue_build, torch_glue  # noqa: E402


def fake_torch(version, abi=True):
    return types.SimpleNamespace(__version__=version,
                                 _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=abi),
                                 version=types.SimpleNamespace(cuda="13.0"))


@pytest.fixture
def package(tmp_path, monkeypatch):
    for v in ("2.11.0", "2.12.0", "2.13.0", "2.14.1"):
        (tmp_path / f"libcachealloc_torch-{v}.so").write_bytes(b"")
    monkeypatch.setattr(torch_glue, "_folders", lambda: [tmp_path])
    monkeypatch.setattr(glue_build, "cached", lambda torch_module: None)
    monkeypatch.delenv("CACHEALLOC_TORCH_LIBRARY", raising=False)
    return tmp_path


def test_prebuilt_releases_are_listed_oldest_first(package):
    assert list(torch_glue.prebuilt_releases()) == ["2.11.0", "2.12.0", "2.13.0", "2.14.1"]


def test_the_glue_of_the_running_release_comes_first(package):
    found = torch_glue.candidates(fake_torch("2.13.0+cu130"))
    assert found == [(str(package / "libcachealloc_torch-2.13.0.so"), "prebuilt for torch 2.13.0")]


def test_another_patch_release_gets_no_prebuilt_glue(package):
    # The glue overrides torch's virtual functions: only the exact release.
    assert torch_glue.candidates(fake_torch("2.14.0")) == []


def test_a_torch_without_the_cxx11_abi_gets_no_prebuilt_glue(package):
    assert torch_glue.candidates(fake_torch("2.13.0", abi=False)) == []


def test_an_unknown_torch_that_cannot_be_compiled_for_is_refused_naming_the_releases(
        package, monkeypatch):
    def no_compiler(torch_module, quiet=False):
        raise glue_build.GlueBuildError("cachealloc: no C++ compiler found")

    monkeypatch.setattr(glue_build, "build", no_compiler)
    with pytest.raises(glue_build.GlueBuildError) as err:
        torch_glue.find_and_load(fake_torch("2.15.0"))
    text = str(err.value)
    assert "no C++ compiler found" in text
    assert "no prebuilt PyTorch glue fits torch 2.15.0" in text
    assert "2.11.0, 2.12.0, 2.13.0, 2.14.1" in text
