"""Bounded input: the tool reads a pickle as a stream, counts decompressed
bytes against CACHEALLOC_PICKLE_MEMORY_LIMIT, names running out of memory,
and refuses a budget variable it cannot read.

The bombs are built on the fly as concatenated gzip members (one gzip file
per RFC 1952): one member of 1 MiB compressed once and repeated, so a file
of about 2 MB inflates to 2 GiB in microseconds of test time."""
import gzip
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MiB = 1 << 20
GiB = 1 << 30

# Runs argv[1:] and prints the child's peak RSS in kB: this helper's only
# child is the tool, so the figure is the tool's alone (pytest's own
# RUSAGE_CHILDREN would hold every earlier test's children).
PEAK_RSS = ("import resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stderr.write(p.stderr)\n"
            "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def gzip_bomb(path, head, fill, inflated=2 * GiB):
    """`head`, then `fill` bytes up to `inflated` bytes in all, gzipped."""
    block = gzip.compress(fill * MiB, compresslevel=9, mtime=0)
    first = gzip.compress(head, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(first)
        for _ in range((inflated - len(head)) // MiB):
            f.write(block)
    return path


def replay_peak_rss(cli, trace, budget="200000000"):
    env = dict(os.environ, CACHEALLOC_PICKLE_MEMORY_LIMIT=budget)
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, str(cli), "replay", str(trace)],
                          capture_output=True, text=True, env=env, timeout=60)
    code, rss_kb = map(int, proc.stdout.split())
    return code, rss_kb * 1024, proc.stderr


BOMBS = {
    # The bomb: 2 GiB of zeros (took 2.1 GB before it was refused).
    "zeros": (b"", b"\0", "no PROTO header"),
    # A 2 GB string announced in front of the zeros (took 4.2 GB): refused
    # by the cap on one value (here the budget) before any of it is read.
    "string_header": (b"\x80\x04\x8d" + (2 * GiB).to_bytes(8, "little"), b"\0",
                      "over the cap of 200000000 bytes for one value"),
    # A list of Nones: every byte a value, 48 bytes each by the estimate.
    "list_of_nones": (b"\x80\x04](", b"N", "loading needs more than 200000000 bytes of memory"),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_2gib_gzip_bomb_is_refused_under_400mb_with_a_200mb_budget(cli, tmp_path, name):
    head, fill, message = BOMBS[name]
    bomb = gzip_bomb(tmp_path / f"{name}.pickle.gz", head, fill)
    assert bomb.stat().st_size < 8 * MiB
    code, peak, stderr = replay_peak_rss(cli, bomb)
    assert code == 2, stderr
    assert message in stderr
    if "budget" in message or "loading needs" in message:
        assert "CACHEALLOC_PICKLE_MEMORY_LIMIT=200000000" in stderr
    assert peak <= 400 * MiB, f"peak RSS {peak / MiB:.0f} MiB"


def test_the_budget_variable_takes_the_tools_byte_sizes(cli, tmp_path):
    bomb = gzip_bomb(tmp_path / "nones.pickle.gz", b"\x80\x04](", b"N", inflated=64 * MiB)
    code, _, stderr = replay_peak_rss(cli, bomb, budget="2e8")
    assert code == 2 and "CACHEALLOC_PICKLE_MEMORY_LIMIT=2e8" in stderr, stderr


@pytest.mark.parametrize("value", ["abc", "0", "-5", "12abc", "1.5e-3"])
def test_an_invalid_budget_variable_is_refused_naming_it(cli, value):
    env = dict(os.environ, CACHEALLOC_PICKLE_MEMORY_LIMIT=value)
    proc = subprocess.run([str(cli), "replay", str(REPO / "examples/traces/mlp.pickle.gz")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert f"CACHEALLOC_PICKLE_MEMORY_LIMIT='{value}'" in proc.stderr, proc.stderr


def test_running_out_of_memory_under_ulimit_is_named_not_a_bare_bad_alloc(cli, tmp_path):
    # A budget far above what `ulimit -v` lets the process have: the reader
    # itself runs out, and says where, instead of dying with std::bad_alloc.
    bomb = gzip_bomb(tmp_path / "nones.pickle.gz", b"\x80\x04](", b"N", inflated=256 * MiB)
    env = dict(os.environ, CACHEALLOC_PICKLE_MEMORY_LIMIT="1TiB")
    proc = subprocess.run(["bash", "-c", f'ulimit -v 300000 && exec "{cli}" replay "{bomb}"'],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "std::bad_alloc" not in proc.stderr
    assert "out of memory at offset" in proc.stderr and "NONE" in proc.stderr, proc.stderr
    assert "CACHEALLOC_PICKLE_MEMORY_LIMIT" in proc.stderr


def default_budget_env():
    """The environment without CACHEALLOC_PICKLE_MEMORY_LIMIT: the default."""
    return {k: v for k, v in os.environ.items() if k != "CACHEALLOC_PICKLE_MEMORY_LIMIT"}


def test_the_default_refuses_a_2gib_string_in_a_9mb_file_at_once(cli, tmp_path):
    # The file: 9.4 MB of .pickle.gz (level-1 gzip of "a"s) holding
    # one 2 GiB string. With the budget alone (3/4 of RAM) it took 4.2 GB
    # and 17 s; the cap on one value (16 x the stored size, at least 64 MiB)
    # refuses its length before a byte of it is read.
    head = b"\x80\x04\x8d" + (2 * GiB).to_bytes(8, "little")
    block = gzip.compress(b"a" * MiB, compresslevel=1, mtime=0)
    path = tmp_path / "one_string.pickle.gz"
    with open(path, "wb") as f:
        f.write(gzip.compress(head, compresslevel=1, mtime=0))
        for _ in range(2048):
            f.write(block)
    size = path.stat().st_size
    assert 8_000_000 < size < 10_000_000, size
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, str(cli), "replay", str(path)],
                          capture_output=True, text=True, env=default_budget_env(), timeout=60)
    code, rss_kb = map(int, proc.stdout.split())
    assert code == 2, proc.stderr
    assert f"a value of {2 * GiB} bytes is over the cap of {16 * size} bytes" in proc.stderr
    assert "CACHEALLOC_PICKLE_MEMORY_LIMIT to raise it" in proc.stderr, proc.stderr
    assert rss_kb * 1024 < 100 * MiB, rss_kb


def test_the_budget_variable_raises_the_cap_on_one_value(cli, tmp_path):
    # A 100 MiB string in a ~100 kB file: over the default cap (64 MiB),
    # read whole under CACHEALLOC_PICKLE_MEMORY_LIMIT=1GB (then refused for
    # what it is: not a snapshot).
    n = 100 * MiB
    path = tmp_path / "long_string.pickle.gz"
    with open(path, "wb") as f:
        f.write(gzip.compress(b"\x80\x04\x8d" + n.to_bytes(8, "little"), mtime=0))
        block = gzip.compress(b"a" * MiB, mtime=0)
        for _ in range(n // MiB):
            f.write(block)
        f.write(gzip.compress(b".", mtime=0))
    default = subprocess.run([str(cli), "replay", str(path)], capture_output=True, text=True,
                             env=default_budget_env(), timeout=60)
    assert default.returncode == 2
    assert f"over the cap of {64 * MiB} bytes" in default.stderr, default.stderr
    raised = subprocess.run([str(cli), "replay", str(path)], capture_output=True, text=True,
                            env=dict(os.environ, CACHEALLOC_PICKLE_MEMORY_LIMIT="1GB"), timeout=60)
    assert "cap" not in raised.stderr, raised.stderr
