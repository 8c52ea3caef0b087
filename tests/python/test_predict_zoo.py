"""The zoo (issue 46, benchmarks/zoo/): its split, and the validation half
predicted on this CPU against the GPU truth committed in tests/data/predict.

- The split is by family, was committed before any truth, puts the setups
  the issue had already tried in the tuning half, and has every regime and
  both classes in both halves (always runs: no torch model is built).
- The largest-batch probe search of the GPU recorder closes on synthetic
  answers (always runs).
- Each VALIDATION row of tests/data/predict/zoo_truth.json (record.py's
  output on the GPU) is predicted here at its measured batch, and peak
  allocated and peak reserved under both native configs must lie within
  the error band of its class, made from the TUNING half only
  (tests/data/predict/zoo_tuning_errors.json, compare.py's output: band =
  max(1.25 x the class's largest tuning |error|, 0.5 %) of the prediction,
  plus the GPU's own spread between processes in bytes, gpu_noise). Skipped, saying
  why, while either file is absent, or for a row whose model library is
  missing or at another version than the truth's (the model code, and so
  its memory, can differ). A hang fails the row (killed at ROW_TIMEOUT).

The rows are predicted two at a time, once per session, peaks only (one
recording per row, replayed under both configs): about 3 minutes on 2 cores
for the 15 validation rows, measured as 6-43 s of recording per row on a
loaded 2-core machine, plus 180 s while a row still hangs."""
import json
import os
import pathlib
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
# The committed files; the variables point at others (a fresh truth, before committing it).
TRUTH = pathlib.Path(os.environ.get("CACHEALLOC_ZOO_TRUTH") or
                     REPO / "tests" / "data" / "predict" / "zoo_truth.json")
TUNING_ERRORS = pathlib.Path(os.environ.get("CACHEALLOC_ZOO_TUNING_ERRORS") or
                             REPO / "tests" / "data" / "predict" / "zoo_tuning_errors.json")
ROW_TIMEOUT = 180  # seconds per prediction (a hang is a failure, not a wait)

sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH / "predict"))

from zoo import probes, setups  # noqa: E402

VALIDATION = sorted(n for n, half in setups.split().items() if half == "validation")


def test_split_is_by_family_and_covers_every_regime_in_both_halves():
    assert setups.check_split() == []
    halves = setups.split()
    fam = {}
    for n, s in setups.SETUPS.items():
        fam.setdefault(s.family, set()).add(halves[n])
    assert all(len(h) == 1 for h in fam.values()), fam
    assert len(setups.SETUPS) >= 24


def test_probe_search_closes_on_a_monotone_step():
    """record.py's rounds: a step that fits up to 11 under the fraction,
    searched from 8, closes at 11 in three rounds; one that fits nowhere
    at 0; a crashed probe stops the search."""
    def fits(b):
        return {"ok": b <= 11}
    got, rounds = {}, 0
    while probes.next_batches(got, 8):
        for b in probes.next_batches(got, 8):
            got[b] = fits(b)
        rounds += 1
    assert probes.largest(got) == 11 and rounds <= 3
    got = {}
    while probes.next_batches(got, 8):
        for b in probes.next_batches(got, 8):
            got[b] = {"ok": False}
    assert probes.largest(got) == 0
    assert probes.next_batches({8: {"ok": True}, "errors": {"9": "crash"}}, 8) == []


def test_truth_covers_the_validation_half():
    """A committed truth is complete (record.py closed every search) and
    holds every validation setup: a row cannot drop out unseen."""
    if not TRUTH.exists():
        pytest.skip(f"no GPU truth of the zoo yet ({TRUTH})")
    truth = json.loads(TRUTH.read_text())
    assert truth.get("complete") is True, f"{TRUTH.name} is partial: run record.py again to finish it"
    missing = [n for n in VALIDATION if n not in truth["setups"]]
    assert not missing, f"{TRUTH.name} lacks validation setups {missing}"
    halves = setups.split()
    wrong = {n: R["half"] for n, R in truth["setups"].items() if R["half"] != halves.get(n)}
    assert not wrong, f"{TRUTH.name}'s halves differ from split.json: {wrong}"


def _skip_reason(truth: dict, name: str):
    if name not in truth["setups"]:
        return f"{name} is not in {TRUTH.name}"
    from record_truth import library_versions
    src = setups.SETUPS[name].source
    libs = ["torchvision"] if src == "torchvision" else [src, "torchvision"] if src == "timm" else [src]
    mine, theirs = library_versions(), truth.get("libraries") or {}
    for lib in libs:
        if mine.get(lib) is None:
            return f"{lib} is not installed (scripts/install_deps.sh installs the zoo's libraries)"
        if theirs.get(lib) and mine[lib] != theirs[lib]:
            return (f"the truth ran {lib} {theirs[lib]}, this machine has {mine[lib]}: "
                    "the model's code may differ (install the truth's version)")
    return None


@pytest.fixture(scope="module")
def predicted():
    """{setup: (truth row, prediction or skip reason)}, predicted two at a time."""
    if not TRUTH.exists():
        pytest.skip(f"no GPU truth of the zoo yet ({TRUTH}): record it with "
                    "benchmarks/zoo/record.py on the GPU (docs/prediction.md, 'The zoo')")
    if not TUNING_ERRORS.exists():
        pytest.skip(f"no tuning-half errors yet ({TUNING_ERRORS}): made by "
                    "benchmarks/zoo/compare.py --tuning-errors from the tuning half's predictions")
    from zoo.predict import run_task
    truth = json.loads(TRUTH.read_text())
    out, todo = {}, []
    for n in VALIDATION:
        why = _skip_reason(truth, n)
        if why:
            out[n] = (None, why)
        else:
            todo.append(n)
    # The child imports cachealloc from this checkout, as the tests do.
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO / "bindings" / "python")] + ([path] if path else [])))
    with ThreadPoolExecutor(2) as ex:
        futs = {n: ex.submit(run_task, str(TRUTH), n, "peaks", truth["setups"][n]["batch"],
                             None, ROW_TIMEOUT, env) for n in todo}
        for n, f in futs.items():
            out[n] = (truth["setups"][n], f.result())
    return out


@pytest.mark.parametrize("name", VALIDATION)
def test_validation_row_within_the_band(predicted, name):
    row, pred = predicted[name]
    if row is None:
        pytest.skip(pred)
    errors = json.loads(TUNING_ERRORS.read_text())
    bands, noise = errors["classes"], errors.get("gpu_noise") or {}
    cls = row["class"]
    assert cls in bands and bands[cls]["band_pct"] is not None, \
        f"no band for class {cls} in {TUNING_ERRORS.name}"
    band = bands[cls]["band_pct"]
    assert "error" not in pred, f"{name}: the prediction failed: {pred['error']}\n{pred.get('tail', '')}"
    b = str(row["batch"])
    misses = []
    for conf in ("classic", "expandable"):
        t = row["peaks"][conf][b]
        assert t.get("ok"), f"{name} {conf}: the GPU run did not complete: {t.get('error') or t.get('oom')}"
        p = pred["configs"][conf]
        for key, gpu_key, q in (("peak_allocated", "max_memory_allocated", "allocated"),
                                ("peak_reserved", "max_memory_reserved", "reserved")):
            # The band, as widen() makes it: a share of the prediction (plus,
            # with gpu_noise, the GPU's own spread in bytes).
            err = 100.0 * (p[key] - t[gpu_key]) / p[key]
            if abs(p[key] - t[gpu_key]) > band / 100.0 * p[key] + noise.get(f"{q}_bytes", 0):
                misses.append(f"{conf} {key}: predicted {p[key]:,} B, GPU {t[gpu_key]:,} B, "
                              f"{err:+.2f} % of the prediction, outside the {cls} band of "
                              f"{band:.2f} % + {noise.get(f'{q}_bytes', 0):,} B")
    assert not misses, f"{name} (batch {b}):\n" + "\n".join(misses)


def test_truth_runs_until_the_optimizer_steps_the_prediction_assumes():
    """record_truth's builder loop counts optimizer steps that really ran, as
    the predictor does: a step whose GradScaler skipped optimizer.step()
    (inf gradients at the initial scale) is called again, up to a cap."""
    import torch
    from record_truth import MAX_EXTRA_CALLS, until_optimizer_steps
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    calls = []

    def step(skips=2):
        calls.append(1)
        (w * 2).sum().backward()
        if len(calls) > skips:   # the first calls "found inf": no optimizer step
            opt.step()
        opt.zero_grad(set_to_none=True)
    assert until_optimizer_steps(step, 3) == (5, 3)
    assert "momentum_buffer" in opt.state[w]
    calls.clear()
    # Never stepping stops at the cap, and says so.
    assert until_optimizer_steps(lambda: step(skips=10 ** 6), 3) == (3 + MAX_EXTRA_CALLS, 0)
