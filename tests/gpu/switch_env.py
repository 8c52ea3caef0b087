"""An interpreter whose start-up reads cachealloc's switch hook
(cachealloc-autoinstall.pth), as `pip install` puts it in site-packages,
for tests that run a program under `cachealloc run` from this checkout:
the hook goes into a user site-packages folder of its own or, where the
interpreter reads none (a virtual environment's, as on the GPU host), into
a throwaway virtual environment's site-packages that also sees this
interpreter's packages (torch)."""
import os
import pathlib
import shutil
import site
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON_DIR = ROOT / "bindings" / "python"


def switch_env(folder, **extra):
    """(environment, interpreter) for `interpreter -m cachealloc.cli run ...`
    under `folder` (a fresh directory of the caller's)."""
    sys.path.insert(0, str(PYTHON_DIR))
    import cachealloc

    folder = pathlib.Path(folder)
    env = dict(os.environ, PYTHONUSERBASE=str(folder / "userbase"), PYTHONPATH=str(PYTHON_DIR),
               CACHEALLOC_LIBRARY=cachealloc.library_path(), **extra)
    probe = subprocess.run([sys.executable, "-c", "import site; print(site.ENABLE_USER_SITE, "
                            "site.getusersitepackages())"], capture_output=True, text=True, env=env,
                           check=True)
    enabled, user_site = probe.stdout.split()
    python = sys.executable
    if enabled == "True":
        hook_dir = pathlib.Path(user_site)
        hook_dir.mkdir(parents=True)
    else:
        venv = folder / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        hook_dir = pathlib.Path(subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip())
        (hook_dir / "parent-site.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    shutil.copy(PYTHON_DIR / "cachealloc-autoinstall.pth", hook_dir)
    shutil.copy(PYTHON_DIR / "_cachealloc_autoinstall.py", hook_dir)
    return env, python
