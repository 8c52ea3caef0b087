"""The OOM flight recorder on a GPU (tests/gpu/oom_recorder_script.py):
GPT-2 small under a 38 GiB limit, native and cachealloc side by side.
Needs transformers (GPT2Config is built locally, no download). With
CACHEALLOC_OOM_OUT=DIR the results (oom_recorder.json, the snapshots)
are kept there."""
import importlib.util
import os

import pytest

if importlib.util.find_spec("transformers") is None:
    pytest.skip("GPU test skipped: transformers is not installed", allow_module_level=True)

import oom_recorder_script  # tests/gpu (conftest puts it on sys.path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = os.environ.get("CACHEALLOC_OOM_OUT") or str(tmp_path_factory.mktemp("oom_recorder"))
    r = oom_recorder_script.run_all(out)
    print("\n" + oom_recorder_script.summary(r))
    return r


CLAIMS = [name for name, _, _ in oom_recorder_script.checks({})]


@pytest.mark.parametrize("claim", CLAIMS)
def test_claim(results, claim):
    found = {name: (ok, detail) for name, ok, detail in oom_recorder_script.checks(results)}
    ok, detail = found[claim]
    assert ok, f"{claim}: {detail}"
