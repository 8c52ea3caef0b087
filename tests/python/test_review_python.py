"""Defects found by the independent review of the Python package and tools.
Each test states the expected (native / documented) behaviour and fails today."""
import copy
import gzip
import json
import os
import pickle
import subprocess
import sys

import pytest

from conftest import CLI, REPO

MLP = REPO / "examples" / "traces" / "mlp.pickle.gz"
ENV = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))


def _py(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV)


def _trace(tmp_path, name, mutate):
    d = pickle.load(gzip.open(MLP))
    mutate(d)
    p = tmp_path / name
    p.write_bytes(pickle.dumps(d, protocol=4))
    return p


def test_replay_reports_stats_of_the_device_that_has_events(tmp_path):
    # A trace recorded on cuda:1: device_traces == [[], [...]] as _dump_snapshot writes it.
    def on_device_1(d):
        d["device_traces"] = [[], d["device_traces"][0]]
        for s in d["segments"]:
            s["device"] = 1
    t = _trace(tmp_path, "dev1.pickle", on_device_1)
    out = json.loads(subprocess.run([CLI, "replay", "--json", t], capture_output=True,
                                    text=True, check=True).stdout)
    assert out["events"] == 457 and out["divergence"] is None
    assert out["memory_stats"]["allocated_bytes.all.peak"] == 236818432  # today: 0 (device 0's)


def test_replay_snapshot_write_failure_is_reported(tmp_path):
    d = {"device_traces": [[{"action": "segment_alloc", "addr": 1 << 21, "size": 2 << 20, "stream": 0},
                            {"action": "alloc", "addr": 1 << 21, "size": 512, "stream": 0}]],
         "segments": []}
    t = tmp_path / "tiny.pickle"
    t.write_bytes(pickle.dumps(d, protocol=4))
    r = subprocess.run([CLI, "replay", "--snapshot", "/dev/full", t], capture_output=True, text=True)
    assert r.returncode == 2, "ENOSPC on the snapshot was ignored (exit 0)"


def test_trace_settings_are_validated_like_the_config_string(tmp_path):
    # native refuses max_split_size below 20 MiB; the trace path takes 0 and the
    # engine later fails with an internal error.
    t = _trace(tmp_path, "split0.pickle",
               lambda d: d["allocator_settings"].update(max_split_size=0))
    r = subprocess.run([CLI, "min-memory", t, "--quiet"], capture_output=True, text=True)
    assert "unknown segment" not in r.stderr, r.stderr
    assert "max_split_size" in r.stderr, r.stderr


@pytest.mark.parametrize("field,value", [
    ("roundup_power2_divisions", {"abc": 1}),   # today: "cachealloc: stoull"
    ("expandable_segments", "no"),              # today: "PyValue: expected bool, got str"
    ("garbage_collection_threshold", "x"),      # today: "PyValue: expected float, got str"
])
def test_bad_settings_error_names_the_field(tmp_path, field, value):
    t = _trace(tmp_path, "bad.pickle", lambda d: d["allocator_settings"].update({field: value}))
    r = subprocess.run([CLI, "replay", t], capture_output=True, text=True)
    assert r.returncode == 2
    assert field in r.stderr, r.stderr


def test_lab_device_option_does_not_wrap(tmp_path):
    r = subprocess.run([CLI, "compare", MLP, "--device", "4294967296", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 2, "--device 4294967296 silently replayed device 0"


def test_memory_summary_keeps_native_precision():
    code = """
import cachealloc as ca, torch.cuda.memory as m
ca.init("", "simulated:8589934592")
ca._malloc(1946 << 20)
s = ca.memory_stats()
m.memory_stats = lambda device=None: s
print(ca.memory_summary().splitlines()[7]); print(m.memory_summary(0).splitlines()[7])
"""
    r = _py(code)
    ours, native = r.stdout.splitlines()
    assert "1946 MiB" in native
    assert "1 GiB" not in ours, ours  # today: 1.90 GiB shown as '1 GiB'


def test_find_leaks_does_not_claim_dropped_history():
    code = """
import cachealloc as ca
from cachealloc.profiler import MemoryProfiler
ca.init("", "simulated:8589934592")
prof = MemoryProfiler(device=0, collect_stack_traces=True)
keep = []
for i in range(4):
    with prof.profile_context("it"):
        keep.append(ca._malloc(1 << 20))
print(repr(prof.find_leaks()[0].note))
"""
    r = _py(code)
    assert "dropped" not in r.stdout, r.stdout  # 4 entries in a 200,000-entry ring


def test_malloc_size_overflow_is_refused():
    r = _py("import cachealloc as ca\nca.init('', 'simulated:8589934592')\n"
            "p = ca._malloc(2**64 + 1000)\nprint(ca.memory_allocated())")
    assert r.returncode != 0, f"allocated {r.stdout.strip()} bytes for a 2**64+1000 request"


def test_uninitialized_device_error_names_the_cause():
    r = _py("import cachealloc as ca\nca.memory_stats(0)")
    assert "-1 devices" not in r.stderr, r.stderr
