"""The sleep-mode example (examples/sleep_mode): a training run that sleeps
half way gives the device its pool's memory back, wakes with its weights
and optimizer state intact, and goes on with the losses of a run that did
not sleep; the same under native and under cachealloc."""
import json
import os
import subprocess
import sys

import pytest

from native_vs_cachealloc import HERE
from sleep_library import ROOT, build_sleep_library


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    library = build_sleep_library(tmp_path_factory.mktemp("sleep"))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bindings" / "python"))
    out = {}
    for mode in ("native", "cachealloc"):
        proc = subprocess.run([sys.executable, str(ROOT / "examples" / "sleep_mode" / "sleep_mode.py"),
                               str(library), mode], capture_output=True, text=True, env=env,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-5000:]
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("mode", ["native", "cachealloc"])
def test_sleep_gives_the_pools_memory_back_and_wake_restores_it(runs, mode):
    r = runs[mode]
    print(mode, {k: v for k, v in r.items() if "losses" not in k})
    assert r["pool_bytes"] > 0 and r["bytes_asleep"] == 0
    assert r["free_asleep"] - r["free_before_sleep"] >= 0.9 * r["pool_bytes"]
    assert r["free_after_wake"] <= r["free_before_sleep"] + 16 * 2**20
    assert r["kept_values_back"]


@pytest.mark.parametrize("mode", ["native", "cachealloc"])
def test_training_goes_on_with_the_losses_of_a_run_that_did_not_sleep(runs, mode):
    r = runs[mode]
    print(mode, r["losses"], r["losses_without_sleep"])
    assert r["losses"] == r["losses_without_sleep"]


def test_the_example_runs_the_same_under_both_allocators(runs):
    assert runs["cachealloc"]["losses"] == runs["native"]["losses"]
    assert runs["cachealloc"]["pool_bytes"] == runs["native"]["pool_bytes"]
