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


def _listed(text):
    """{word: summary} of the '  word  summary' lines of a help text."""
    rows = [line.split(None, 1) for line in text.splitlines() if line.startswith("  ")]
    return {row[0]: row[1] for row in rows if len(row) == 2}


def test_help_leads_with_every_command_one_line_each(tmp_path):
    # No tool on purpose (an empty build folder): the list needs none.
    outs = {args: _python("-m", "cachealloc.cli", *args, CACHEALLOC_BUILD=str(tmp_path))
            for args in [("--help",), ("-h",), (), ("help",)]}
    assert {args: r.returncode for args, r in outs.items()} == \
        {("--help",): 0, ("-h",): 0, (): 2, ("help",): 0}
    assert len({r.stdout for r in outs.values()}) == 1, "--help, -h and no command differ"
    text = outs[("--help",)].stdout
    assert text.startswith("usage: cachealloc COMMAND")
    from cachealloc.cli import COMMANDS
    words = [w for _, commands in COMMANDS for w, _ in commands]
    assert set(words) == {"predict", "run", "report", "doctor", "replay", "compare",
                          "min-memory", "advise", "explain"}
    assert list(_listed(text)) == words
    assert len(text.splitlines()) < 30 and max(map(len, text.splitlines())) <= 100
    assert "`cachealloc COMMAND --help`" in text


def test_each_commands_own_help_still_works(cli):
    for word in ["predict", "run", "report", "doctor", "replay", "compare", "min-memory",
                 "advise", "explain"]:
        for args in ([word, "--help"], ["help", word]):
            r = _python("-m", "cachealloc.cli", *args, CACHEALLOC_BUILD=str(cli.parents[1]))
            assert r.returncode == 0, (args, r.stderr)
            assert r.stdout.startswith(f"usage: cachealloc {word}"), (args, r.stdout[:200])


def test_the_tools_own_list_matches_the_commands(cli):
    from cachealloc.cli import COMMANDS, PYTHON_COMMANDS
    r = subprocess.run([str(cli), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("usage: cachealloc COMMAND")
    ours = {w: s for _, commands in COMMANDS for w, s in commands if w not in PYTHON_COMMANDS}
    assert _listed(r.stdout) == ours
    bare = subprocess.run([str(cli)], capture_output=True, text=True)
    assert bare.returncode == 2 and bare.stdout == r.stdout


def test_unknown_command_names_the_nearest_and_exits_2(cli):
    r = _python("-m", "cachealloc.cli", "predcit", CACHEALLOC_BUILD=str(cli.parents[1]))
    assert r.returncode == 2 and r.stdout == ""
    assert "unknown command 'predcit' (did you mean predict?)" in r.stderr
    r = subprocess.run([str(cli), "compair"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown command 'compair' (did you mean compare?)" in r.stderr


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
