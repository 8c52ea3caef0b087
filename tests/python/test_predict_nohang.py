"""cachealloc predict never hangs, and answers the models whose init loops
(issue 46): data-dependent loops on placeholders are caught (loop_guard.py),
a wall-clock budget ends a step that does not (watchdog.py) naming its
line and leaving no worker behind, and the cpu-init mode (cpu_side.py)
runs CPU-side code for real, so that torch 2.13's rejection-sampling
trunc_normal_ (ViT, Swin, ConvNeXt, timm) initialises as on the user's
machine. Each recording is a fresh worker process (a few seconds)."""
import json
import os
import pathlib
import subprocess
import sys
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
STEPS = pathlib.Path(__file__).with_name("predict_steps")

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _tool(cli, monkeypatch):
    monkeypatch.setenv("CACHEALLOC_CLI", str(cli))


def _gpu():
    from cachealloc import predict
    return predict.resolve_gpu("H100-80GB")


def _workers_running(marker: str) -> list:
    """Processes whose command line holds marker (the test's own workers)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and "worker.py" in cmdline:
            found.append(pid)
    return found


# -- the loop rule, both ways -------------------------------------------

def test_loop_rule_counts_branch_reads_of_one_line():
    from cachealloc.predict.device.loop_guard import LOOP_READS, PlaceholderReads
    from cachealloc.predict.device.failure import StopRecording
    reads = PlaceholderReads()
    line = None
    with pytest.raises(StopRecording) as caught:
        for _ in range(LOOP_READS + 5):
            line = sys._getframe().f_lineno + 1
            if not reads.answer(True):
                break
    failure = caught.value.refused.failure
    assert failure["kind"] == "loop"
    assert failure["where"] == f"{__file__}:{line}"
    assert "True" in failure["detail"] and f"{LOOP_READS} times" in failure["detail"]


def test_loop_rule_ignores_reads_that_decide_nothing_and_resets_at_each_step():
    from cachealloc.predict.device.loop_guard import LOOP_READS, PlaceholderReads
    reads = PlaceholderReads()
    total = 0.0
    for _ in range(5 * LOOP_READS):          # logging and accumulation: no branch
        total += reads.answer(1.0)
        value = reads.answer(1)
        print(value, end="" if value else "\n", file=open(os.devnull, "w"))
    for _ in range(5):                       # branches, an optimizer step between windows
        for _ in range(LOOP_READS - 1):
            if reads.answer(True):
                pass
        reads.step()
    assert total == 5 * LOOP_READS


def test_rejection_loop_is_caught_naming_its_line(tmp_path):
    from cachealloc import predict
    script = STEPS / "rejection_loop.py"
    # The budget turns a regression into a "timeout" failure, not a hang.
    with pytest.raises(predict.PredictionRefused) as caught:
        predict.record(["python", str(script)], _gpu(), steps=3, workdir=tmp_path, timeout=300)
    failure = caught.value.failure
    assert failure["kind"] == "loop", failure
    assert failure["where"] == f"{script}:10"
    assert "placeholder value True" in failure["detail"]


def test_reads_of_a_normal_script_are_not_a_loop(tmp_path):
    from cachealloc import predict
    rec = predict.record(["python", str(STEPS / "many_reads.py")], _gpu(), steps=3,
                         workdir=tmp_path, timeout=300)
    assert rec.summary["steps"] == 3 and rec.summary["failure"] is None
    assert rec.summary["item_placeholders"] >= 1200 + 3 * 400


# -- the wall-clock budget ----------------------------------------------

def test_timeout_names_the_line_and_leaves_no_worker(tmp_path):
    marker = f"--marker={uuid.uuid4().hex}"
    script = STEPS / "sleeps_forever.py"
    env = dict(os.environ, PYTHONPATH=str(REPO / "bindings" / "python"))
    proc = subprocess.run([sys.executable, "-m", "cachealloc.predict.answer.cli", "--gpu",
                           "H100-80GB", "--no-advise", "--timeout", "15", "--json", "--mode", "fake",
                           "--", "python", str(script), marker],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 4, proc.stderr      # not predicted (answer/schema.py)
    assert f"timed out (--timeout 15 s) at {script}:12" in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "error" and doc["exit_code"] == 4 and doc["mode"] == "fake"
    err = doc["error"]
    assert err["kind"] == "timeout" and err["where"] == f"{script}:12"
    assert "time budget ran out" in err["detail"]
    assert not _workers_running(marker)


def test_timeout_in_a_size_search(tmp_path):
    from cachealloc import predict
    marker = f"--marker={uuid.uuid4().hex}"
    script = STEPS / "sleeps_forever.py"
    with pytest.raises(predict.PredictionRefused) as caught:
        predict.largest(["python", str(script), marker], _gpu(), batch_env="B", steps=1,
                        workdir=tmp_path, timeout=15)
    assert caught.value.failure["kind"] == "timeout"
    assert caught.value.failure["where"] == f"{script}:12"
    assert not _workers_running(marker)


def test_timeout_while_the_step_holds_the_gil(tmp_path):
    """The watchdog thread cannot run while a C call holds the GIL:
    faulthandler's dump names the line instead."""
    from cachealloc import predict
    script = STEPS / "holds_gil.py"
    with pytest.raises(predict.PredictionRefused) as caught:
        predict.record(["python", str(script)], _gpu(), workdir=tmp_path, timeout=10)
    assert caught.value.failure["kind"] == "timeout"
    assert caught.value.failure["where"] == f"{script}:9"


# -- cpu-init mode ------------------------------------------------------

def test_cpu_side_is_real_and_moves_become_fakes(tmp_path):
    from cachealloc import predict
    rec = predict.record(f"{STEPS / 'steps.py'}:cpu_side", _gpu(), size=64, steps=1,
                         workdir=tmp_path)
    assert rec.summary["mode"] == "cpu-init" and rec.summary["host_bytes_peak"] > 0


def test_host_memory_guard_falls_back_to_fake(tmp_path):
    from cachealloc import predict
    from cachealloc.predict.device import host_memory
    rows = 2 * host_memory.available_bytes() // (4096 * 4) + 1   # twice what the host has
    rec = predict.record(["python", str(STEPS / "huge_on_cpu.py")], _gpu(), steps=1,
                         workdir=tmp_path, batch_env="ROWS", size=rows, timeout=300)
    assert rec.summary["mode"] == "fake"
    assert "host memory" in rec.summary["mode_note"] and "huge_on_cpu.py:10" in rec.summary["mode_note"]
    assert rec.summary["steps"] == 1
    weights = rows * 4096 * 4
    assert rec.summary["at_optimizer_step"]["parameters"] == weights


def _zoo(monkeypatch, tmp_path, mode, **env):
    import importlib.util
    if importlib.util.find_spec("torchvision") is None:   # imported only by the worker's script
        pytest.skip("torchvision is not installed")
    from cachealloc import predict
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return predict.fits(["python", str(STEPS / "zoo_train.py")], _gpu(), size=2, batch_env="B",
                        steps=2, workdir=tmp_path / mode, advise=False, mode=mode, timeout=600)


def test_vit_predicts_in_cpu_init_mode_as_the_all_fake_run(monkeypatch, tmp_path):
    """torchvision's ViT-B/16: cpu-init runs torch's own trunc_normal_ (a
    rejection loop on torch >= 2.13) for real; its peaks equal an all-fake
    run's with a loop-free trunc_normal_ patched in (only here)."""
    from cachealloc.predict.request_stream import load_device_trace, request_stream
    real = _zoo(monkeypatch, tmp_path, "cpu-init", MODEL="vit_b_16")
    fake = _zoo(monkeypatch, tmp_path, "fake", MODEL="vit_b_16", LOOP_FREE_INIT="1")
    assert real["mode"] == "cpu-init" and fake["mode"] == "fake"
    assert real["steps"] == fake["steps"] == 2
    for name in ("classic", "expandable"):
        for peak in ("peak_allocated", "peak_reserved"):
            assert real["configs"][name][peak] == fake["configs"][name][peak], (name, peak)
    assert request_stream(load_device_trace(real["trace"])) == \
        request_stream(load_device_trace(fake["trace"]))


def test_vit_built_on_cuda_does_not_hang(monkeypatch, tmp_path):
    """Built under `with torch.device("cuda")`, the init runs on fake
    tensors: torch.nn.init's redraw checks answer False (loop_guard.py)."""
    ans = _zoo(monkeypatch, tmp_path, "cpu-init", MODEL="vit_b_16", BUILD="cuda")
    assert ans["steps"] == 2
    trunc_loops = "if not mask.any()" in open(torch.nn.init.__file__).read()
    assert (ans["recording"]["init_redraw_checks"] >= 1) == trunc_loops


def test_cpu_init_defers_random_fills_and_keeps_every_value(monkeypatch, tmp_path):
    """deferred_fills.py: a fill that nothing reads is never computed, and
    every value and generator draw the script does read is the eager run's,
    bit for bit (whichever of the triggers made the fills run)."""
    import importlib.util
    from cachealloc import predict
    out = tmp_path / "values.json"
    monkeypatch.setenv("OUT", str(out))
    rec = predict.record(["python", str(STEPS / "rng_fills.py")], _gpu(), steps=1,
                         workdir=tmp_path, batch_env="B", size=4, timeout=300)
    assert rec.summary["mode"] == "cpu-init" and rec.summary["steps"] == 1
    spec = importlib.util.spec_from_file_location("rng_fills", STEPS / "rng_fills.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    eager, _ = mod.values("cpu")
    assert json.loads(out.read_text()) == json.loads(json.dumps(eager))
    s = rec.summary
    # The last model's two weights and biases, moved to the device with no
    # CPU draw after them, were never filled; every earlier fill ran late.
    assert s["cpu_fills_never_run"] == 4
    assert s["cpu_fills_run_late"] >= 12
    assert s["cpu_fills_deferred"] == s["cpu_fills_run_late"] + s["cpu_fills_never_run"]
