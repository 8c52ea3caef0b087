"""The strand driver (benchmarks/strand/measure.py) end to end on the CPU:
real child processes running a real workload at tiny sizes, the physical
search on their measured peaks (resident memory on the CPU), each kind's
largest size, timing rounds in persistent processes, the JSON and the
markdown. Allocators do not differ on the CPU; what is checked is the
driver's logic and plumbing."""
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
STRAND = REPO / "benchmarks" / "strand"

pytest.importorskip("torch")


def peak(size):
    p = subprocess.run([sys.executable, str(STRAND / "child.py"), "--workload", "kv_generation",
                        "--kind", "classic", "--size", str(size), "--steps", "2", "--device", "cpu"],
                       capture_output=True, text=True, check=True)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["outcome"] == "ok" and out["memory_source"] == "rss"
    return out["peak_allocated"]


def test_driver_on_cpu(tmp_path):
    # A limit between the peaks of two sizes, so the answer lies inside.
    lo, hi = peak(48), peak(1536)
    assert hi > lo
    limit = (lo + hi) / 2
    out = tmp_path / "res"
    cmd = [sys.executable, str(STRAND / "measure.py"), "--device", "cpu", "--out", str(out),
           "--workloads", "kv_generation", "--policies", "stitch", "--limit-gib", repr(limit / 2**30),
           "--jobs", "2", "--steps", "2", "--rounds", "2", "--round-steps", "1", "--warmup", "1",
           "--rel-res", "0.2", "--no-open", "--budget", "300", "--timing-share", "0.3"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads((out / "strand.json").read_text())
    assert res["meta"]["done"] and res["meta"]["policies"] == ["stitch"]
    W = res["workloads"]["kv_generation"]
    phys = W["physical"]
    assert phys["converged"], phys
    probes = {pr["size"]: pr for pr in W["probes"]["physical"]}
    # The answer was measured to fit; the bracket's other end was measured not to.
    assert probes[phys["value"]]["peak_allocated"] <= res["meta"]["limit"]
    over = probes[phys["fails_at"]]
    assert over["outcome"] == "oom" or over["peak_allocated"] > res["meta"]["limit"]
    assert W["advise"] == {"skipped": "traces are recorded on CUDA only"}
    for kind in ("classic", "expandable", "policy:stitch"):
        k = W["kinds"][kind]
        assert k["largest"]["probes"][0][0] == phys["value"]  # tried at the physical size first
        assert k["largest"]["value"] is None or k["largest"]["value"] <= phys["value"]
        assert k["at_physical"]["size"] == phys["value"]
    assert W["native_best"] in ("classic", "expandable")
    T = res["timing"]["kv_generation"]
    assert T["kinds"] == [k for k in ("classic", "expandable", "policy:stitch")
                          if W["kinds"][k]["largest"]["value"]]
    assert all(len(v) == 2 for v in T["rounds"].values()), T
    assert 0 < T["size"] <= min(W["kinds"][k]["largest"]["value"] for k in T["kinds"])
    assert T["ratios"]["classic"]["vs_classic"]["median"] == 1.0
    md = (out / "strand.md").read_text()
    assert "| kv_generation | KV tokens |" in md and "## Step time" in md

    # A second run reusing this one's native measurements (--reuse): only the
    # policy is searched; native's kinds are copied, yet timed again here.
    out2 = tmp_path / "res2"
    cmd2 = [c if c != str(out) else str(out2) for c in cmd]
    cmd2[cmd2.index("--policies") + 1] = "rescue"
    p = subprocess.run(cmd2 + ["--reuse", str(out / "strand.json")], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    res2 = json.loads((out2 / "strand.json").read_text())
    W2 = res2["workloads"]["kv_generation"]
    assert W2["reused_from"] == str(out / "strand.json")
    assert W2["physical"] == W["physical"] and W2["probes"]["physical"] == W["probes"]["physical"]
    for kind in ("classic", "expandable"):
        assert W2["kinds"][kind] == W["kinds"][kind] and W2["probes"][kind] == W["probes"][kind]
    assert "policy:stitch" not in W2["kinds"]
    k = W2["kinds"]["policy:rescue"]
    assert k["largest"]["probes"][0][0] == phys["value"] and k["at_physical"]["size"] == phys["value"]
    assert W2["native_best"] == W["native_best"]
    T2 = res2["timing"]["kv_generation"]
    assert T2["kinds"] == [k for k in ("classic", "expandable", "policy:rescue")
                           if W2["kinds"][k]["largest"]["value"]]
    assert all(len(v) == 2 for v in T2["rounds"].values()), T2
    # Native's open peaks that the reused run skipped (--no-open there) are
    # measured by a reusing run, even with no policy of ours to search.
    out4 = tmp_path / "res4"
    cmd4 = [c if c != str(out) else str(out4) for c in cmd if c != "--no-open"]
    cmd4[cmd4.index("--policies") + 1] = "native"
    cmd4[cmd4.index("--timing-share") + 1] = "0"
    p = subprocess.run(cmd4 + ["--reuse", str(out / "strand.json")], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    W4 = json.loads((out4 / "strand.json").read_text())["workloads"]["kv_generation"]
    assert not [k for k in W4["kinds"] if k.startswith("policy:")]
    for kind in ("classic", "expandable"):
        assert "open" not in W["kinds"][kind]
        assert W4["kinds"][kind]["open"]["outcome"] == "ok", W4["kinds"][kind]
        assert W4["kinds"][kind]["open"]["size"] == phys["value"]
        assert W4["kinds"][kind]["largest"] == W["kinds"][kind]["largest"]
    # Measurements of another limit are refused, naming the file.
    cmd3 = list(cmd2)
    cmd3[cmd3.index("--limit-gib") + 1] = repr(2 * limit / 2**30)
    p = subprocess.run(cmd3 + ["--reuse", str(out / "strand.json")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "was measured under limit" in p.stderr, p.stderr[-2000:]


def test_driver_refuses_unknown_workload(tmp_path):
    p = subprocess.run([sys.executable, str(STRAND / "measure.py"), "--device", "cpu", "--out",
                        str(tmp_path), "--workloads", "nope", "--policies", ""],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "unknown workload 'nope'" in p.stderr
