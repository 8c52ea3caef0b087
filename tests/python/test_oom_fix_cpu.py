"""The OOM fix without preparation (issue 46), end to end on the CPU: the
pipeline of tests/gpu/oom_fix_script.py with the step replaced by a
recorded BERT-base run's requests on the simulated device. A program
under `cachealloc run --oom-snapshot DIR` alone (through the installed
switch hook, never importing cachealloc) runs out of memory; the message's
suggestion, applied in a fresh process, runs the same requests to the end
at the peak the what-if predicted for the failed request, to the byte."""
import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    build = pathlib.Path(os.environ.get("CACHEALLOC_BUILD", REPO / "build"))
    lib = build / "bindings" / "libcachealloc.so"
    if not lib.exists():
        pytest.fail(f"{lib} not built: bash scripts/build.sh")
    os.environ.setdefault("CACHEALLOC_LIBRARY", str(lib))
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    import oom_fix_script

    # The what-if's bound at the OOM raised from 500 ms: on a loaded 2-core
    # machine the search of these 3,137 requests takes 300-650 ms (on a GPU
    # host's 16 cores, tens of ms); this test is about the figures.
    args = oom_fix_script.parse_args(["--cpu", "--budget-ms", "30000",
                                      "--out", str(tmp_path_factory.mktemp("oom_fix"))])
    r = oom_fix_script.run_all(args)
    print("\n" + oom_fix_script.summary(r))
    return oom_fix_script, r


def test_every_claim_holds_on_the_simulated_device(results):
    script, r = results
    failed = [f"{name}: {detail}" for name, ok, detail in script.checks(r) if not ok]
    assert not failed, "\n".join(failed) + "\n" + script.summary(r)


def test_the_figures(results):
    # The recorded run (defaults need 10.86 GiB) under 10.5 GiB: expandable
    # segments need 9.82 GiB, and peak at 9.81 GiB up to the request that
    # failed, as the lab's min-memory finds for the whole run (9.82 GiB).
    _, r = results
    w = r["A_whatif"]
    assert w["suggestion"] == "expandable_segments:True", w
    assert w["predicted_peak"] == r["B"]["prefix"]["peak_reserved"] == 10538188800, (w, r["B"])
    assert r["B"]["peak_reserved"] == 10540285952, r["B"]
