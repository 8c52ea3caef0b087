"""cachealloc.install()'s check that the PyTorch glue was compiled against
the running torch release (the glue overrides virtual functions of
PyTorch's allocator classes; another release's layout could crash)."""
import pathlib
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"))
import cachealloc  # noqa: E402


@pytest.mark.parametrize("version,release", [
    ("2.11.0+cu130", (2, 11, 0)), ("2.11.0", (2, 11, 0)), ("2.12.0a0+git1234", (2, 12, 0)),
    ("2.13.1.post2", (2, 13, 1)), ("2.11", (2, 11, 0)), ("2.6.0rc1", (2, 6, 0)),
    ("2.7.0a0+gitabc", (2, 7, 0))])
def test_release_parses_torch_versions(version, release):
    assert cachealloc._release(version) == release


def _shared_library(tmp_path, name, source):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in glue library")
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    lib = tmp_path / f"lib{name}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


@pytest.fixture
def fake_glue(tmp_path):
    """A real shared library that says it was built for torch 2.10.0."""
    return _shared_library(tmp_path, "fake_glue",
                           'const char* cachealloc_torch_built_for(void) { return "2.10.0"; }\n')


def test_glue_from_before_the_version_check_is_a_clear_error(tmp_path):
    old = _shared_library(tmp_path, "old_glue", "int cachealloc_torch_install(void) { return 0; }\n")
    with pytest.raises(RuntimeError, match="predates cachealloc's torch version check"):
        cachealloc._load_torch_glue(str(old), "2.11.0")


def test_glue_built_for_another_torch_is_refused_naming_both(fake_glue):
    with pytest.raises(RuntimeError, match=r"built against torch 2\.10\.0, but torch 2\.11\.0\+cu130"):
        cachealloc._load_torch_glue(str(fake_glue), "2.11.0+cu130")


def test_glue_built_for_the_running_torch_loads(fake_glue):
    g = cachealloc._load_torch_glue(str(fake_glue), "2.10.0+cu126")
    assert g.cachealloc_torch_built_for().decode() == "2.10.0"


def test_glue_that_cannot_load_is_a_clear_error(tmp_path):
    bad = tmp_path / "libnot_a_library.so"
    bad.write_bytes(b"not an ELF file")
    with pytest.raises(RuntimeError, match="cannot load the PyTorch glue .*torch_glue=False"):
        cachealloc._load_torch_glue(str(bad), "2.11.0")
