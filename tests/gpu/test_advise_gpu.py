"""The advisor on a real OOM (benchmarks/gpt2_advise.py): GPT-2 small at
the smallest batch from 28 up that runs out of memory under native defaults at memory fraction 0.5 (or the fraction giving half an 80 GB H100 on a bigger card);
the PYTORCH_CUDA_ALLOC_CONF that `cachealloc advise` recommends for it (from
a recording of the same run) trains clean under native PyTorch and under
cachealloc. Needs transformers (GPT2Config is built locally, no download)."""
import importlib.util
import json
import os
import pathlib

import pytest

if importlib.util.find_spec("transformers") is None:
    pytest.skip("GPU test skipped: transformers is not installed", allow_module_level=True)

import gpt2_advise  # benchmarks/ (conftest puts it on sys.path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The whole run, once; with CACHEALLOC_ADVISE_OUT=DIR its numbers
    (gpt2_advise.json) and advise's page (gpt2_advise.html) are kept there."""
    work = tmp_path_factory.mktemp("gpt2_advise")
    keep = pathlib.Path(os.environ.get("CACHEALLOC_ADVISE_OUT") or work)
    keep.mkdir(parents=True, exist_ok=True)
    r = gpt2_advise.run(batch=None, steps=3, html=keep / "gpt2_advise.html", workdir=work)
    (keep / "gpt2_advise.json").write_text(json.dumps(r, indent=1) + "\n")
    print("\n" + gpt2_advise.report(r))
    return r


def test_the_batch_runs_out_of_memory_under_defaults_at_fraction_half(results):
    assert not results["defaults_at_fraction"]["ok"], results["defaults_at_fraction"]


def test_advise_recommends_a_setting_that_fits_the_limit(results):
    a = results["advice"]
    assert not a["nothing_helps"], a["headline"]
    assert a["recommended_min_memory"] <= a["memory_limit"], a


def test_the_recommendation_trains_clean_under_native(results):
    assert results["native_recommended"]["ok"], results["native_recommended"]


def test_the_recommendation_trains_clean_under_cachealloc(results):
    assert results["cachealloc_recommended"]["ok"], results["cachealloc_recommended"]
