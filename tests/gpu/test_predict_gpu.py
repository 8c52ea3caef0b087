"""The predictor against this GPU (issue 33): a small transformer training
step (benchmarks/predict/workloads.py:encoder_small) is predicted on the CPU
(no GPU visible, fake CUDA device) and then run for real in fresh
processes under native classic and expandable segments.

- peak allocated within 1 % and peak reserved within 2 % of the GPU's;
- under a memory fraction, the predicted largest batch trains and one more
  runs out of memory, under each policy.

Needs the cachealloc CLI (tools/cachealloc) for the replay; libcachealloc is
not used (the truth is native PyTorch)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRED = ROOT / "benchmarks" / "predict"
BUILDER = f"{PRED / 'workloads.py'}:encoder_small"
CONFS = {"classic": "", "expandable": "expandable_segments:True"}
BATCH = 4
LIMIT_BYTES = 400 << 20   # the fraction is chosen so this much is allowed


def _truth(batch, conf, fraction=None):
    """One fresh native process (record_truth.py's worker): its peaks, or ok=False on OOM."""
    spec = dict(workload="encoder_small", batch=batch, conf=conf, fraction=fraction, steps=3)
    env = dict(os.environ, PYTORCH_ALLOC_CONF=CONFS[conf])
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    p = subprocess.run([sys.executable, str(PRED / "record_truth.py"), "worker", "--spec", json.dumps(spec)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("RESULT ")][-1][7:])


def _predict(code):
    """Runs `code` (which prints JSON) with no GPU visible, so the predictor is
    what a CPU machine would run."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join([str(ROOT / "bindings" / "python"), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def total():
    import torch
    return torch.cuda.get_device_properties(0).total_memory


def _gpu_code(total):
    return ("from cachealloc import predict; import json; "
            f"b = predict.resolve_gpu(memory={total}); "
            f"g = predict.Gpu('this GPU', {total}, b.capability, b.multi_processor_count, b.context_bytes); ")


def test_peaks_match_the_gpu(total):
    pred = _predict(_gpu_code(total) +
                    f"r = predict.fits({BUILDER!r}, g, size={BATCH}, steps=3, advise=False); "
                    "print(json.dumps(r['configs']))")
    for conf in CONFS:
        t = _truth(BATCH, conf)
        assert t["ok"], t
        p = pred[conf]
        alloc_err = (p["peak_allocated"] - t["max_memory_allocated"]) / t["max_memory_allocated"]
        res_err = (p["peak_reserved"] - t["max_memory_reserved"]) / t["max_memory_reserved"]
        print(f"{conf}: allocated {p['peak_allocated']} vs {t['max_memory_allocated']} ({alloc_err:+.2%}), "
              f"reserved {p['peak_reserved']} vs {t['max_memory_reserved']} ({res_err:+.2%})")
        assert abs(alloc_err) <= 0.01, (conf, p, t["max_memory_allocated"])
        assert abs(res_err) <= 0.02, (conf, p, t["max_memory_reserved"])


def test_largest_batch_fits_and_one_more_does_not(total):
    fraction = round(LIMIT_BYTES / total, 6)
    pred = _predict(_gpu_code(total) +
                    f"r = predict.largest({BUILDER!r}, g, memory_fraction={fraction}, steps=3, start=8); "
                    "print(json.dumps(r['largest']))")
    for conf in CONFS:
        n = pred[conf]
        assert n >= 1, pred
        at = _truth(n, conf, fraction)
        above = _truth(n + 1, conf, fraction)
        print(f"{conf}: predicted largest {n} at fraction {fraction}: "
              f"{n} {'fits' if at['ok'] else 'OOM'}, {n + 1} {'fits' if above['ok'] else 'OOM'}")
        assert at["ok"], (conf, n, at.get("oom"))
        assert not above["ok"], (conf, n + 1, above["max_memory_reserved"])
