"""cachealloc.install()'s check that the PyTorch glue was compiled against
the running torch release (the glue overrides virtual functions of
PyTorch's allocator classes; another release's layout could crash)."""
import pathlib
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"))
from cachealloc import torch_glue  # noqa: E402


@pytest.mark.parametrize("version,release", [
    ("2.11.0+cu130", (2, 11, 0)), ("2.11.0", (2, 11, 0)), ("2.12.0a0+git1234", (2, 12, 0)),
    ("2.13.1.post2", (2, 13, 1)), ("2.11", (2, 11, 0)), ("2.6.0rc1", (2, 6, 0)),
    ("2.7.0a0+gitabc", (2, 7, 0))])
def test_release_parses_torch_versions(version, release):
    assert torch_glue.release(version) == release


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
        torch_glue.load(str(old), "2.11.0")


def test_glue_built_for_another_torch_is_refused_naming_both(fake_glue):
    with pytest.raises(RuntimeError, match=r"built against torch 2\.10\.0, but torch 2\.11\.0\+cu130"):
        torch_glue.load(str(fake_glue), "2.11.0+cu130")


def test_glue_built_for_the_running_torch_loads(fake_glue):
    g = torch_glue.load(str(fake_glue), "2.10.0+cu126")
    assert g.cachealloc_torch_built_for().decode() == "2.10.0"


def test_glue_that_cannot_load_is_a_clear_error(tmp_path):
    bad = tmp_path / "libnot_a_library.so"
    bad.write_bytes(b"not an ELF file")
    with pytest.raises(RuntimeError, match="cannot load the PyTorch glue .*torch_glue=False"):
        torch_glue.load(str(bad), "2.11.0")


# ---- a torch built without CUDA ------------------------------------------------

REPO = pathlib.Path(__file__).resolve().parents[2]


def _fresh_python(code: str, **env):
    """Runs code in a new interpreter (install() works once per process)
    with the checkout's package and library."""
    import os

    full = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"), **env)
    full.setdefault("CACHEALLOC_LIBRARY", cachealloc_library())
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full)


def cachealloc_library() -> str:
    from cachealloc import library_path

    return library_path()


@pytest.fixture
def torch_without_cuda():
    torch = pytest.importorskip("torch")
    if hasattr(torch._C, "_cuda_customAllocator"):
        pytest.skip(f"torch {torch.__version__} is built with CUDA")


@pytest.mark.parametrize("glue", [True, False])
def test_simulated_install_on_a_torch_without_cuda_is_plain_mode_through_own_api(torch_without_cuda,
                                                                                  glue):
    r = _fresh_python(f"""
import cachealloc
cachealloc.install(backend="simulated:1073741824", torch_glue={glue})
p = cachealloc._malloc(1 << 20)
print(cachealloc.mode(), cachealloc.backend(), cachealloc.memory_allocated(0))
cachealloc._free(p)
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["plain", "simulated:1073741824", str(1 << 20)]


@pytest.mark.parametrize("args", ["", "backend='cuda'", "backend='async'", "torch_glue=False"])
def test_install_on_a_torch_without_cuda_refuses_up_front_and_sets_nothing_up(torch_without_cuda,
                                                                              args):
    r = _fresh_python(f"""
import cachealloc
try:
    cachealloc.install({args})
except RuntimeError as e:
    print("REFUSED", e)
print("STATE", cachealloc.mode(), repr(cachealloc.backend()), cachealloc.is_installed())
cachealloc.install(backend="simulated")  # nothing was half set up: a later install works
print("THEN", cachealloc.mode(), cachealloc.backend())
""")
    assert r.returncode == 0, r.stderr
    assert "REFUSED" in r.stdout and "was built without CUDA" in r.stdout, r.stdout
    assert "STATE not installed '' False" in r.stdout
    assert "THEN plain simulated" in r.stdout
    assert "AttributeError" not in r.stdout + r.stderr
