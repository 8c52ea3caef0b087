"""`cachealloc advise` and cachealloc.lab.advise (issue 24): the answer is a
PYTORCH_CUDA_ALLOC_CONF line native accepts, ranked by the smallest memory
without an OOM, then OOMs under the limit; the HTML page leads with it; and
min-memory writes a page too."""
import json
import math
import re
import subprocess

import pytest

from reference_data import meta

MiB = 1 << 20


def run(cli, *args):
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True)


def advise(cli, trace, *extra):
    proc = run(cli, "advise", "--json", "--quiet", trace, *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def limit_args(traces_dir, name):
    m = meta(traces_dir / f"{name}.pickle.gz")
    total = m["device_total_memory"]
    limit = math.floor(m["memory_fraction"] * total)
    return limit, ["--memory-limit", limit, "--recorded-limit", limit, "--device-memory", total]


def test_the_recommendation_is_a_line_the_lab_and_native_parse(cli, traces_dir):
    out = advise(cli, traces_dir / "random.pickle.gz")
    line = out["recommendation"]
    assert not out["nothing_helps"] and line
    check = run(cli, "compare", "--json", traces_dir / "random.pickle.gz", "--conf", line)
    assert check.returncode == 0, check.stderr
    rec = out["configs"][out["recommended"]]
    assert json.loads(check.stdout)["configs"][0]["peak_reserved"] == rec["peak_reserved"]


def test_every_min_memory_is_min_memorys_own_answer(cli, traces_dir):
    out = advise(cli, traces_dir / "multistream.pickle.gz")
    args = ["min-memory", "--json", "--quiet", traces_dir / "multistream.pickle.gz"]
    for row in out["configs"]:
        args += ["--conf", row["line"]]
    mm = json.loads(run(cli, *args).stdout)["configs"]
    assert [r["min_memory"] for r in mm] == [r["min_memory"] for r in out["configs"]]


def test_on_the_oom_trace_fewer_ooms_rank_above_the_trace_own_config(cli, traces_dir):
    limit, extra = limit_args(traces_dir, "oom_frac")
    out = advise(cli, traces_dir / "oom_frac.pickle.gz", *extra)
    rows = out["configs"]
    base, rec = rows[out["baseline"]], rows[out["recommended"]]
    assert out["recommended"] == 0 and out["baseline"] != 0
    assert rec["ooms"] < base["ooms"] and rec["min_memory"] < base["min_memory"]
    best = min(r["min_memory"] for r in rows)
    tier = [r for r in rows if r["min_memory"] <= best * 1.01]
    assert rows[: len(tier)] == tier  # the 1 % tier first ...
    keys = [(r["ooms"], r["device_allocs"] + r["device_frees"]) for r in tier]
    assert keys == sorted(keys)  # ... fewest OOMs, then fewest device calls
    rest = [r["min_memory"] for r in rows[len(tier):]]
    assert rest == sorted(rest)  # then by minimum memory
    # Garbage collection under a fraction comes with the fraction (0.05 recorded).
    if "garbage_collection_threshold" in out["recommendation"]:
        assert out["recommendation"].endswith("per_process_memory_fraction:0.050000")


def test_identical_configs_are_one_row(cli, traces_dir):
    out = advise(cli, traces_dir / "churn.pickle.gz")
    labels = [r["label"] for r in out["configs"]]
    assert any(l.startswith("trace = defaults") for l in labels), labels
    lines = [r["line"] for r in out["configs"]]
    assert len(set(lines)) == len(lines)


def test_a_working_set_peak_is_said_plainly(cli, traces_dir):
    out = advise(cli, traces_dir / "mlp.pickle.gz")
    if out["nothing_helps"]:
        assert "this run's peak is its working set, not fragmentation: no setting saves more than" \
            in out["headline"]
        assert out["recommended"] == out["baseline"]
    else:  # then it saves at least 1 %
        assert out["saving"] >= 0.01


def test_the_page_leads_with_the_answer_in_one_unit(cli, traces_dir, tmp_path):
    html = tmp_path / "advise.html"
    limit, extra = limit_args(traces_dir, "oom_frac")
    out = advise(cli, traces_dir / "oom_frac.pickle.gz", *extra, "--html", html)
    text = html.read_text()
    assert "<script" not in text and "http" not in text.replace("http://www.w3.org", "")
    answer = text.index("PYTORCH_CUDA_ALLOC_CONF=" + out["recommendation"])
    assert answer < text.index("<table")
    for row in out["configs"]:  # every config's minimum is on the page
        assert row["label"].replace(">", "&gt;") in text
    units = set(re.findall(r"\d (MiB|GiB|KiB)\b", re.sub(r"<style>.*?</style>", "", text)))
    assert units == {"GiB"}, units
    assert text.count("<svg") == 1 + 2  # the chart, the trace's own and the recommendation's peaks


def test_the_page_shows_recorded_stack_frames(cli, traces_dir, tmp_path):
    html = tmp_path / "mlp.html"
    advise(cli, traces_dir / "mlp.pickle.gz", "--html", html)
    text = html.read_text()
    assert "allocated at" in text and re.search(r"\.py:\d+", text)


def test_segment_bars_are_drawn_to_one_scale(cli, traces_dir, tmp_path):
    html = tmp_path / "t.html"
    advise(cli, traces_dir / "transformer.pickle.gz", "--html", html)
    text = html.read_text()
    widths = [float(w) for w in re.findall(r'<rect x="0" y="[\d.]+" width="([\d.]+)" height="11"', text)]
    assert widths and max(widths) == pytest.approx(420) and min(widths) < 420


def test_min_memory_writes_a_page_of_every_minimum(cli, traces_dir, tmp_path):
    html = tmp_path / "mm.html"
    proc = run(cli, "min-memory", "--json", "--quiet", traces_dir / "churn.pickle.gz",
               "--conf", "trace", "--conf", "expandable_segments:True", "--html", html)
    assert proc.returncode == 0, proc.stderr
    text = html.read_text()
    for row in json.loads(proc.stdout)["configs"]:
        assert str(row["min_memory"]) in text


def test_conf_is_refused_with_a_reason(cli, traces_dir):
    proc = run(cli, "advise", traces_dir / "mlp.pickle.gz", "--conf", "max_split_size_mb:64")
    assert proc.returncode == 2 and "advise chooses the configs itself" in proc.stderr


def test_python_advise_returns_the_tool_json(cli, traces_dir, monkeypatch):
    from cachealloc import lab

    monkeypatch.setenv("CACHEALLOC_CLI", str(cli))
    limit, _ = limit_args(traces_dir, "churn_gc")
    out = lab.advise(traces_dir / "churn_gc.pickle.gz", memory_limit=limit, recorded_limit=limit,
                     threads=1)
    assert out["memory_limit"] == limit and out["threads"] == 1
    assert out["configs"] and "recommendation" in out


def test_compare_page_draws_identical_configs_once(cli, traces_dir, tmp_path):
    html = tmp_path / "cmp.html"
    proc = run(cli, "compare", "--quiet", traces_dir / "churn.pickle.gz", "--conf", "trace",
               "--conf", "", "--conf", "expandable_segments:True", "--html", html)
    assert proc.returncode == 0, proc.stderr
    text = html.read_text()
    assert "trace (defaults) = defaults" in text
    assert text.count("<svg") == 1 + 2  # the chart, one peak map per distinct replay


def test_compare_page_marks_fewest_ooms_best_under_a_limit(cli, traces_dir, tmp_path):
    html = tmp_path / "oom.html"
    limit, _ = limit_args(traces_dir, "oom_frac")
    proc = run(cli, "compare", "--json", "--quiet", traces_dir / "oom_frac.pickle.gz", "--conf", "trace",
               "--conf", "max_split_size_mb:128", "--memory-limit", limit, "--recorded-limit", limit,
               "--html", html)
    rows = json.loads(proc.stdout)["configs"]
    assert rows[1]["ooms"] < rows[0]["ooms"]
    best_row = re.search(r"<tr>(?:(?!</tr>).)*class=\"best\"(?:(?!</tr>).)*</tr>", html.read_text(), re.S)
    assert best_row and "max_split_size_mb:128" in best_row.group(0)
