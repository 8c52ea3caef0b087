"""The OOM fix without preparation on a GPU (issue 46;
tests/gpu/oom_fix_script.py): a BERT-base step at batch 62 under a 24 GiB
limit, run under `cachealloc run --oom-snapshot DIR` alone until it runs
out of memory; the suggested setting then trains in a fresh process at the
predicted peak. Needs transformers (BertConfig is built locally, no
download). With CACHEALLOC_OOM_FIX_OUT=DIR the results (oom_fix.json, the
snapshots) are kept there."""
import importlib.util
import os

import pytest

if importlib.util.find_spec("transformers") is None:
    pytest.skip("GPU test skipped: transformers is not installed", allow_module_level=True)

import oom_fix_script  # tests/gpu (conftest puts it on sys.path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = os.environ.get("CACHEALLOC_OOM_FIX_OUT") or str(tmp_path_factory.mktemp("oom_fix"))
    args = oom_fix_script.parse_args(["--out", out])
    r = oom_fix_script.run_all(args)
    print("\n" + oom_fix_script.summary(r))
    return r


CLAIMS = [name for name, _, _ in oom_fix_script.checks({"limit": 1})]


@pytest.mark.parametrize("claim", CLAIMS)
def test_claim(results, claim):
    found = {name: (ok, detail) for name, ok, detail in oom_fix_script.checks(results)}
    ok, detail = found[claim]
    assert ok, f"{claim}: {detail}"
