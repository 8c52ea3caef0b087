"""The command line: replay, compare and min-memory read byte sizes and
`--opt=value` alike, suggest the option a typo meant, never cut a label,
and warn when garbage_collection_threshold has no limit to work under."""
import json
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TRACE = REPO / "examples" / "traces" / "mlp.pickle.gz"
GiB = 1 << 30


def run(cli, *args):
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True)


def compare_json(cli, *args):
    proc = run(cli, "compare", "--json", TRACE, *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("text, expected", [
    ("1073741824", GiB), ("40GiB", 40 * GiB), ("1.5GiB", 3 * GiB // 2), ("40GB", 40 * GiB),
    ("512M", 512 << 20), ("2e9", 2_000_000_000), ("1.5e9", 1_500_000_000), ("4kib", 4096),
    ("1.8GiB", 1932735283), ("0.1KiB", 102),  # fractions of a byte round down
])
def test_byte_sizes_read_the_same_everywhere(cli, text, expected):
    assert compare_json(cli, "--memory-limit", text)["memory_limit"] == expected
    assert compare_json(cli, f"--memory-limit={text}")["memory_limit"] == expected
    # replay and min-memory take the same forms (their byte options).
    assert run(cli, "replay", TRACE, f"--device-memory={text}", "--memory-limit", text).returncode in (0, 1)
    assert run(cli, "min-memory", TRACE, "--json", f"--recorded-limit={text}").returncode == 0


@pytest.mark.parametrize("text, problem", [
    ("lots", "is not a byte count"), ("1.5.GiB", "has an unknown unit"),
    ("40PB", "has an unknown unit"), ("1e30", "is too large"),
])
@pytest.mark.parametrize("command, option", [
    ("replay", "--memory-limit"), ("compare", "--memory-limit"), ("min-memory", "--recorded-limit"),
])
def test_a_bad_byte_size_is_refused_alike_by_every_command(cli, command, option, text, problem):
    proc = run(cli, command, TRACE, option, text)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"{option} value '{text}' {problem}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("command, typo, meant", [
    ("compare", "--memry-limit", "--memory-limit"),
    ("compare", "--snapshotdir", "--snapshot-dir"),
    ("min-memory", "--recorded-limt", "--recorded-limit"),
    ("replay", "--check-invariant", "--check-invariants"),
    ("replay", "--device-mem", "--device-memory"),
])
def test_a_mistyped_option_gets_a_suggestion(cli, command, typo, meant):
    proc = run(cli, command, TRACE, typo, "1")
    assert proc.returncode == 2
    assert f"unknown option {typo} (did you mean {meant}?)" in proc.stderr, proc.stderr


def test_a_mistyped_command_gets_a_suggestion(cli):
    proc = run(cli, "compre", TRACE)
    assert proc.returncode == 2
    assert "unknown command 'compre' (did you mean compare?)" in proc.stderr, proc.stderr


def test_an_option_far_from_any_gets_no_suggestion(cli):
    proc = run(cli, "compare", TRACE, "--bogus")
    assert proc.returncode == 2
    assert "unknown option --bogus" in proc.stderr and "did you mean" not in proc.stderr


@pytest.mark.parametrize("command", ["replay", "compare", "min-memory"])
def test_an_option_without_its_value_is_named(cli, command):
    proc = run(cli, command, TRACE, "--conf")
    assert proc.returncode == 2 and "--conf needs a value" in proc.stderr, proc.stderr


def test_equals_and_space_forms_give_the_same_result(cli):
    a = compare_json(cli, "--conf", "max_split_size_mb:64", "--device", "0")
    b = compare_json(cli, "--conf=max_split_size_mb:64", "--device=0")
    for row in (a, b):
        for r in row["configs"]:
            r.pop("seconds"), r.pop("requests_per_s"), r.pop("events_per_s")
    assert a == b


def test_compare_table_never_cuts_a_label(cli):
    long_conf = ("max_split_size_mb:128,roundup_power2_divisions:4,"
                 "max_non_split_rounding_mb:64,garbage_collection_threshold:0.6")
    proc = run(cli, "compare", TRACE, "--conf", long_conf, "--conf", "", "--memory-limit", "8GiB")
    assert proc.returncode == 0, proc.stderr
    assert long_conf in proc.stdout
    proc = run(cli, "min-memory", TRACE, "--conf", long_conf)
    assert proc.returncode == 0, proc.stderr
    assert long_conf in proc.stdout


@pytest.mark.parametrize("command", ["compare", "replay"])
def test_gc_threshold_without_a_limit_warns(cli, command):
    conf = "garbage_collection_threshold:0.8"
    proc = run(cli, command, TRACE, "--conf", conf)
    assert proc.returncode in (0, 1), proc.stderr
    assert f"warning: '{conf}' sets garbage_collection_threshold" in proc.stderr
    assert "--memory-limit" in proc.stderr
    limited = run(cli, command, TRACE, "--conf", conf, "--memory-limit", "40GiB")
    assert "warning" not in limited.stderr


def test_min_memory_never_warns_about_gc_it_always_runs_limited(cli):
    proc = run(cli, "min-memory", TRACE, "--conf", "garbage_collection_threshold:0.8")
    assert proc.returncode == 0 and "warning" not in proc.stderr
