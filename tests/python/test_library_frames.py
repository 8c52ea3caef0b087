"""Library frames are told from the user's by where torch and cachealloc
are installed, not by a substring of the path (issue 45, 1b): the OOM
diagnosis and the rank report name a user's line even when it lives under
a folder named `cachealloc` or `torch`."""
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CACHEALLOC_BUILD", REPO / "build"))

SCRIPT = textwrap.dedent("""\
    import os, sys
    sys.path.insert(0, os.environ["CACHEALLOC_PY"])
    import cachealloc
    from cachealloc import oom_recorder
    MiB = 1 << 20
    cachealloc.init("", "simulated:8589934592")
    cachealloc.record_memory_history("all", stacks="python")
    oom_recorder.start(sys.argv[1], torch_observer=False)
    cachealloc.set_per_process_memory_fraction(0.125, 0)
    for p in [cachealloc._malloc(100 * MiB) for _ in range(9)]:
        cachealloc._free(p)
    held = [cachealloc._malloc(60 * MiB) for _ in range(9)]  # SITE
    try:
        cachealloc._malloc(200 * MiB)
    except cachealloc.OutOfMemoryError as e:
        print(e)
    """)
SITE_LINE = next(i for i, l in enumerate(SCRIPT.splitlines(), 1) if l.endswith("# SITE"))


@pytest.mark.parametrize("folder", ["cachealloc", "torch"])
def test_oom_site_is_the_users_line_under_a_folder_named_like_a_library(tmp_path, folder):
    lib = os.environ.get("CACHEALLOC_LIBRARY", str(BUILD / "bindings" / "libcachealloc.so"))
    if not os.path.exists(lib):
        pytest.fail(f"{lib} not built")
    home = tmp_path / folder / "work"
    home.mkdir(parents=True)
    script = home / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, CACHEALLOC_LIBRARY=lib, CACHEALLOC_PY=str(REPO / "bindings" / "python"))
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "oom")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"live from work/train.py:{SITE_LINE} (" in out.stdout, out.stdout
    # The written snapshot carries the install folders it was decided by.
    [written] = [p for p in (tmp_path / "oom").iterdir() if p.suffix == ".pickle"]
    snap = pickle.loads(written.read_bytes())
    prefixes = snap["cachealloc_library_prefixes"]
    assert any(p.rstrip("/").endswith("bindings/python/cachealloc") for p in prefixes), prefixes
    assert not any(str(script).startswith(p) for p in prefixes), prefixes


def _native_like_snapshot(frames):
    """A snapshot native could have dumped: one 100 MiB segment, a live
    60 MiB block with `frames`, and 40 MiB free; no cachealloc keys."""
    MiB = 1 << 20
    return {"segments": [{
        "device": 0, "address": 1 << 32, "total_size": 100 * MiB, "allocated_size": 60 * MiB,
        "active_size": 60 * MiB, "requested_size": 60 * MiB, "stream": 0,
        "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
        "frames": [],
        "blocks": [{"address": 1 << 32, "size": 60 * MiB, "requested_size": 60 * MiB,
                    "state": "active_allocated", "frames": frames},
                   {"address": (1 << 32) + 60 * MiB, "size": 40 * MiB, "requested_size": 0,
                    "state": "inactive", "frames": []}]}],
        "device_traces": [[]]}


FRAMES = [
    {"filename": "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", "line": 125,
     "name": "forward"},
    {"filename": "/home/me/torch/train.py", "line": 42, "name": "step"},
    {"filename": "/home/me/cachealloc/run.py", "line": 7, "name": "main"},
]


def test_explain_falls_back_to_site_packages_for_a_snapshot_without_prefixes(ca):
    from cachealloc.oom_recorder import diagnose

    text = diagnose(pickle.dumps(_native_like_snapshot(FRAMES), protocol=4))
    assert "live from torch/train.py:42 (step)" in text, text


def test_explain_uses_the_prefixes_a_snapshot_carries(ca):
    from cachealloc.oom_recorder import diagnose

    snap = _native_like_snapshot(FRAMES)
    # Recorded where torch was installed under /home/me: its train.py is
    # then a library frame, and the user's code is the next one.
    snap["cachealloc_library_prefixes"] = ["/usr/lib/python3/dist-packages/torch/",
                                           "/home/me/torch/"]
    text = diagnose(pickle.dumps(snap, protocol=4))
    assert "live from cachealloc/run.py:7 (main)" in text, text


def test_rank_report_site_uses_the_same_rule():
    from cachealloc.report.rank_peak import allocation_site

    assert allocation_site(FRAMES).startswith("/home/me/torch/train.py:42")
    assert allocation_site(FRAMES, ["/usr/lib/python3/dist-packages/torch/", "/home/me/torch/"]) \
        .startswith("/home/me/cachealloc/run.py:7")
