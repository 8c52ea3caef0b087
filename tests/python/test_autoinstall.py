"""Switching cachealloc on without code changes: the start-up hook
(bindings/python/_cachealloc_autoinstall.py, read through
cachealloc-autoinstall.pth as pip installs it) and `cachealloc run`.

Each child process here never imports cachealloc itself. The .pth file is
put in a user site-packages folder of its own (PYTHONUSERBASE), which
Python reads at start-up like the site-packages pip installs into."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "bindings" / "python"
sys.path.insert(0, str(PYTHON_DIR))

# Reads the child's state from sys.modules: it never imports cachealloc.
CHILD = """
import sys
print("BEFORE_TORCH", "cachealloc" in sys.modules)
import torch
ca = sys.modules.get("cachealloc")
print("AFTER_TORCH", ca is not None)
if ca is not None:
    p = ca._malloc(1 << 20)
    print("STATE", ca.mode(), ca.backend(), ca.memory_allocated(0))
"""


@pytest.fixture
def site_env(tmp_path):
    """Environment whose interpreters read the hook's .pth at start-up."""
    from cachealloc import library_path

    env = dict(os.environ, PYTHONUSERBASE=str(tmp_path / "userbase"), PYTHONPATH=str(PYTHON_DIR),
               CACHEALLOC_LIBRARY=library_path())
    for name in ("CACHEALLOC_AUTO", "CACHEALLOC_CONF", "CACHEALLOC_BACKEND", "CACHEALLOC_POLICY",
                 "PYTHONNOUSERSITE"):
        env.pop(name, None)
    probe = subprocess.run([sys.executable, "-c", "import site; print(site.ENABLE_USER_SITE, "
                            "site.getusersitepackages())"], capture_output=True, text=True, env=env)
    enabled, user_site = probe.stdout.split()
    if enabled != "True":
        pytest.skip("this interpreter does not read a user site-packages folder")
    pathlib.Path(user_site).mkdir(parents=True)
    shutil.copy(PYTHON_DIR / "cachealloc-autoinstall.pth", user_site)
    shutil.copy(PYTHON_DIR / "_cachealloc_autoinstall.py", user_site)
    return env


def _run(env, *args, **extra):
    return subprocess.run(list(args), capture_output=True, text=True, env=dict(env, **extra))


@pytest.fixture
def torch_installed():
    pytest.importorskip("torch")


def simulated_backend():
    """The backend a CPU-only torch accepts (install() refuses others there)."""
    return "simulated:1073741824"


def test_hook_installs_cachealloc_right_after_the_programs_import_torch(site_env, torch_installed):
    r = _run(site_env, sys.executable, "-c", CHILD, CACHEALLOC_AUTO="1",
             CACHEALLOC_BACKEND=simulated_backend(), CACHEALLOC_CONF="max_split_size_mb:64")
    assert r.returncode == 0, r.stderr
    assert "BEFORE_TORCH False" in r.stdout and "AFTER_TORCH True" in r.stdout, r.stdout
    assert f"STATE plain {simulated_backend()} {1 << 20}" in r.stdout, r.stdout + r.stderr


def test_cachealloc_run_switches_it_on_for_the_command(site_env, torch_installed):
    r = _run(site_env, sys.executable, "-m", "cachealloc.cli", "run", "--backend",
             simulated_backend(), "--", sys.executable, "-c", CHILD)
    assert r.returncode == 0, r.stderr
    assert f"STATE plain {simulated_backend()} {1 << 20}" in r.stdout, r.stdout + r.stderr


def test_cachealloc_run_sets_the_placement_policy(site_env, torch_installed):
    child = CHILD + "\nprint('POLICY', ca.policy())\n"
    r = _run(site_env, sys.executable, "-m", "cachealloc.cli", "run", "--backend",
             simulated_backend(), "--policy", "stitch", "--", sys.executable, "-c", child)
    assert r.returncode == 0, r.stderr
    assert "POLICY stitch" in r.stdout, r.stdout + r.stderr
    r = _run(site_env, sys.executable, "-m", "cachealloc.cli", "run", "--policy", "gmlake", "--",
             sys.executable, "-c", "pass")
    assert r.returncode == 2
    assert "known policies are native, stitch, rescue, unmap_on_free" in r.stderr


def test_without_the_switch_the_hook_does_nothing(site_env, torch_installed):
    r = _run(site_env, sys.executable, "-c", CHILD)
    assert r.returncode == 0 and "AFTER_TORCH False" in r.stdout, r.stdout + r.stderr
    assert r.stderr == ""


def test_a_process_that_never_imports_torch_never_imports_cachealloc(site_env):
    r = _run(site_env, sys.executable, "-c", "import sys; print('_cachealloc_autoinstall' in "
             "sys.modules, sorted(m for m in sys.modules if m.startswith(('cachealloc', 'torch'))))",
             CACHEALLOC_AUTO="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True []"  # the hook ran, and loaded neither


def test_a_failing_install_warns_and_the_program_runs_on(site_env, torch_installed):
    # A backend cachealloc refuses (any torch: a CPU-only one refuses every
    # backend but the simulated one): the program still runs, on torch's allocator.
    r = _run(site_env, sys.executable, "-c", "import torch\nprint('RAN ON', torch.ones(2).sum().item())",
             CACHEALLOC_AUTO="1", CACHEALLOC_BACKEND="no-such-backend")
    assert r.returncode == 0 and "RAN ON 2.0" in r.stdout, r.stdout + r.stderr
    assert "cachealloc: CACHEALLOC_AUTO=1 but cachealloc.install() failed" in r.stderr


def test_a_switch_value_other_than_0_or_1_is_refused_naming_the_variable(site_env):
    r = _run(site_env, sys.executable, "-c", "print('RAN')", CACHEALLOC_AUTO="yes")
    assert r.returncode == 0 and r.stdout.strip() == "RAN"
    assert "CACHEALLOC_AUTO='yes' is neither 1 (on) nor 0 (off)" in r.stderr


def test_run_without_a_command_is_a_usage_error(site_env):
    r = _run(site_env, sys.executable, "-m", "cachealloc.cli", "run", "--conf", "x")
    assert r.returncode == 2 and "no COMMAND given" in r.stderr


def test_run_of_a_missing_command_exits_127_naming_it(site_env):
    r = _run(site_env, sys.executable, "-m", "cachealloc.cli", "run", "--", "no-such-program-xyz")
    assert r.returncode == 127 and "no-such-program-xyz" in r.stderr
