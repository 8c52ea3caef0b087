"""The `cachealloc` command (cachealloc/cli.py, what `pip install` puts on
PATH) and where it and the lab find the compiled tool (cachealloc/tool.py)."""
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
MLP = REPO / "tests" / "data" / "traces" / "mlp.pickle.gz"


def _python(*args, **env_changes):
    env = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))
    env.pop("CACHEALLOC_CLI", None)
    env.update(env_changes)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env)


def test_command_hands_the_tools_commands_to_the_tool(cli):
    r = _python("-m", "cachealloc.cli", "replay", str(MLP), CACHEALLOC_BUILD=str(cli.parents[1]))
    assert r.returncode == 0, r.stderr
    assert "no divergence" in r.stdout
    bad = _python("-m", "cachealloc.cli", "replay", "/nonexistent.pickle",
                  CACHEALLOC_BUILD=str(cli.parents[1]))
    assert bad.returncode == 2  # the tool's own exit status comes through


def test_help_shows_the_tools_commands_and_run(cli):
    r = _python("-m", "cachealloc.cli", "--help", CACHEALLOC_BUILD=str(cli.parents[1]))
    assert r.returncode == 0, r.stderr
    assert "cachealloc replay" in r.stdout and "cachealloc run [--conf STR]" in r.stdout


def test_lab_uses_the_checkouts_tool_when_the_package_is_not_installed(cli):
    r = _python("-c", "from cachealloc import lab; print(lab.cli_path())",
                CACHEALLOC_BUILD=str(cli.parents[1]))
    assert r.returncode == 0, r.stderr
    assert pathlib.Path(r.stdout.strip()) == cli


def test_missing_tool_is_a_clear_error_naming_where_it_looked(tmp_path):
    r = _python("-c", "from cachealloc import lab\ntry:\n    lab.cli_path()\n"
                "except lab.LabError as e:\n    print('LABERROR', e)", CACHEALLOC_BUILD=str(tmp_path))
    assert f"LABERROR {tmp_path}/tools/cachealloc is not built" in r.stdout, r.stdout + r.stderr
    r = _python("-m", "cachealloc.cli", "replay", str(MLP), CACHEALLOC_BUILD=str(tmp_path))
    assert r.returncode == 2 and "is not built" in r.stderr
