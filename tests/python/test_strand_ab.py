"""benchmarks/gpu/policy_gpu.py ab --serve (the A/B half of
scripts/gpu_strand.sh, issue 48) on the CPU: persistent worker processes,
alternating rounds, the per-round ratio of the policy to native's best,
the JSON. On the CPU every kind runs the same small CPU step; what is
checked is the plumbing, not a speed."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("CACHEALLOC_BUILD", REPO / "build"))
SCRIPT = REPO / "benchmarks" / "gpu" / "policy_gpu.py"

pytest.importorskip("torch")


def env():
    e = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))
    lib = BUILD / "bindings" / "libcachealloc.so"
    if lib.exists():
        e.setdefault("CACHEALLOC_LIBRARY", str(lib))
    return e


def test_ab_serve_alternates_rounds_and_writes_the_ratios(tmp_path):
    out = tmp_path / "ab.json"
    p = subprocess.run([sys.executable, str(SCRIPT), "ab", "--serve", "--device", "cpu", "--policy", "rescue",
                        "--workloads", "gpt2,multistream", "--rounds", "3", "--steps", "2", "--warmup", "1",
                        "--timeout", "120", "--json", str(out)],
                       capture_output=True, text=True, timeout=600, env=env())
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["kinds"] == ["native", "native_expandable", "policy"] and res["policy"] == "rescue"
    for w in ("gpt2", "multistream"):
        R = res["workloads"][w]
        assert R["errors"] == {}
        assert all(len(R["rounds"][k]) == 3 and all(t > 0 for t in R["rounds"][k]) for k in res["kinds"])
        assert R["native_best"] in ("native", "native_expandable")
        assert R["ratio"]["n"] == 3 and R["ratio"]["min"] <= R["ratio"]["median"] <= R["ratio"]["max"]
        assert f"{w} (batch" in p.stdout
    # One worker log per workload and kind, beside the JSON.
    assert sorted(x.name for x in tmp_path.glob("ab_*.log")) == sorted(
        f"ab_{w}_{k}.log" for w in ("gpt2", "multistream") for k in res["kinds"])


def test_ab_serve_refuses_an_unknown_kind(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "ab", "--serve", "--device", "cpu", "--policy", "rescue",
                        "--kinds", "native,policy,nope", "--workloads", "gpt2"],
                       capture_output=True, text=True, timeout=120, env=env())
    assert p.returncode != 0 and "unknown kind 'nope'" in p.stderr
