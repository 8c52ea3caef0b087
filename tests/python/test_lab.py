"""The fragmentation lab: `cachealloc compare`, `cachealloc min-memory`, the
HTML report, snapshots, bad input, and the Python wrapper (cachealloc.lab).

The reference traces were recorded from torch 2.11's native allocator; each
.json beside them holds the final memory_stats of the recording."""
import json
import math
import pickle
import shutil
import subprocess
import sys

import pytest

import reference_data
from reference_data import REPO, TRACES, meta

TRACE_NAMES = list(TRACES)
MiB = 1 << 20
EXPANDABLE = "expandable_segments:True"
# Native recordings under expandable_segments:True (test_replay_parity.py
# says where they come from).
EXPANDABLE_TRACES = {name: path.parent
                     for name, path in reference_data.traces("traces_expandable").items()}


def meta_of(name):
    return meta(TRACES[name])


def recorded_limit(meta):
    """floor(memory_fraction * device_total_memory), or None."""
    if not meta.get("memory_fraction"):
        return None
    return math.floor(meta["memory_fraction"] * meta["device_total_memory"])


def run(cli, *args):
    return subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True)


def compare(cli, trace, *confs, extra=()):
    args = ["compare", "--json", trace]
    for c in confs:
        args += ["--conf", c]
    proc = run(cli, *args, *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def write_trace(path, *devices, settings=None):
    """A snapshot pickle holding the given per-device entry lists."""
    snap = {"segments": [], "device_traces": [list(d) for d in devices]}
    if settings is not None:
        snap["allocator_settings"] = settings
    path.write_bytes(pickle.dumps(snap, protocol=4))
    return path


def entry(action, addr, size, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": 0}


# ---- the trace's own config reproduces the recording -------------------------

@pytest.mark.parametrize("name", TRACE_NAMES)
def test_own_config_reproduces_recorded_peaks_and_counts(cli, name):
    meta = meta_of(name)
    limit = recorded_limit(meta)
    extra = ["--memory-limit", limit, "--recorded-limit", limit] if limit else []
    out = compare(cli, TRACES[name], "trace", extra=extra)
    row = out["configs"][0]
    want = meta["final_memory_stats"]
    got = {
        "reserved_bytes.all.peak": row["peak_reserved"],
        "allocated_bytes.all.peak": row["peak_allocated"],
        "num_device_alloc": row["device_allocs"],
        "num_device_free": row["device_frees"],
        "num_alloc_retries": row["retries"],
        "num_ooms": row["ooms"],
    }
    assert got == {k: want[k] for k in got}


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_empty_cache_inference_agrees_with_lockstep_replayer(cli, name):
    meta = meta_of(name)
    limit = recorded_limit(meta)
    lockstep = ["--memory-limit", limit, "--device-memory", meta["device_total_memory"]] if limit else []
    replayed = json.loads(run(cli, "replay", "--json", TRACES[name], *lockstep).stdout)
    extra = ["--recorded-limit", limit] if limit else []
    out = compare(cli, TRACES[name], "trace", extra=extra)
    assert out["empty_cache_calls"] == replayed["empty_cache_calls"]
    assert out["events"] == meta["n_events"]


@pytest.mark.parametrize("name", sorted(EXPANDABLE_TRACES))
def test_own_config_reproduces_recorded_expandable_runs(cli, name):
    """compare under an expandable recording's own settings: the engine maps
    and unmaps as the recording did, so its peaks and device counts are the
    recorded ones (retries up to the run's empty_cache() calls, which a
    trace cannot tell from OOM retries)."""
    d = EXPANDABLE_TRACES[name]
    meta = reference_data.meta(d / f"{name}.pickle.gz")
    limit = recorded_limit(meta)
    extra = ["--memory-limit", limit, "--recorded-limit", limit] if limit else []
    row = compare(cli, d / f"{name}.pickle.gz", "trace", extra=extra + ["--check-invariants"])["configs"][0]
    want = meta["final_memory_stats"]
    assert row["peak_reserved"] == want["reserved_bytes.all.peak"]
    assert row["peak_allocated"] == want["allocated_bytes.all.peak"]
    assert (row["device_allocs"], row["device_frees"], row["ooms"]) == \
        (want["num_device_alloc"], want["num_device_free"], want["num_ooms"])
    empty_cache_calls = int(meta["losses"][1]) if meta.get("workload") == "fuzz" else 0
    assert abs(row["retries"] - want["num_alloc_retries"]) <= empty_cache_calls


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_every_classic_trace_replays_under_expandable_segments(cli, traces_dir, name):
    out = compare(cli, traces_dir / f"{name}.pickle.gz", "trace", EXPANDABLE,
                  extra=["--check-invariants", "--memory-limit", 4 << 30])
    classic, expandable = out["configs"]
    assert expandable["requests"] == classic["requests"] == out["requests"]
    assert expandable["peak_allocated"] <= expandable["peak_reserved"] <= 4 << 30


def fits(cli, trace, conf, limit):
    """min-memory's rule: no OOM, and never more than the limit reserved."""
    row = compare(cli, trace, conf, extra=["--memory-limit", limit])["configs"][0]
    return row["ooms"] == 0 and row["peak_reserved"] <= limit


def test_min_memory_of_an_expandable_trace_is_exact(cli):
    d = EXPANDABLE_TRACES["x_transformer"]
    trace = d / "x_transformer.pickle.gz"
    row = json.loads(run(cli, "min-memory", "--json", trace).stdout)["configs"][0]
    limit = row["min_memory"]
    assert 0 < limit <= row["peak_reserved_unlimited"]
    assert fits(cli, trace, "trace", limit)
    assert not fits(cli, trace, "trace", limit - 1)


def test_min_memory_does_not_count_native_reserving_past_its_limit_as_fitting(cli):
    # Native with expandable segments checks the limit against a request's
    # whole-segment size, then maps 64 MiB pages: under 860 MiB it runs
    # without an OOM on x_resnet18 but holds 908 MiB. That is not 860 MiB.
    trace = EXPANDABLE_TRACES["x_resnet18"] / "x_resnet18.pickle.gz"
    conf = "expandable_segments:True,large_segment_size_mb:64"
    over = compare(cli, trace, conf, extra=["--memory-limit", 860 * MiB])["configs"][0]
    assert over["ooms"] == 0 and over["peak_reserved"] > 860 * MiB
    row = json.loads(run(cli, "min-memory", "--json", trace, "--conf", conf).stdout)["configs"][0]
    assert row["min_memory"] > 860 * MiB
    assert fits(cli, trace, conf, row["min_memory"])
    assert not fits(cli, trace, conf, row["min_memory"] - 1)


# ---- compare ------------------------------------------------------------------

def test_compare_reports_one_row_per_conf_in_order(cli, traces_dir):
    confs = ["trace", "", "max_split_size_mb:128", "roundup_power2_divisions:[256:1,>:4]",
             EXPANDABLE]
    out = compare(cli, traces_dir / "resnet18.pickle.gz", *confs)
    assert [r["conf"] for r in out["configs"]] == confs
    assert [r["policy"] for r in out["configs"]] == ["native"] * 5
    for r in out["configs"]:
        assert r["peak_allocated"] <= r["peak_reserved"]
        assert 0.0 <= r["fragmentation_at_peak"] < 1.0
        assert r["fragmentation_at_peak"] == pytest.approx(1 - r["allocated_at_peak"] / r["peak_reserved"], abs=1e-6)
        assert r["requests"] == out["requests"]


def test_default_config_is_the_traces_own(cli, traces_dir):
    out = compare(cli, traces_dir / "churn_split128.pickle.gz")
    assert out["configs"][0]["conf"] == "trace"
    assert out["configs"][0]["label"] == "trace (max_split_size_mb:128)"


@pytest.mark.parametrize("conf", ["trace", EXPANDABLE])
def test_limit_below_need_counts_ooms_and_replays_every_request(cli, traces_dir, conf):
    limit = 1 << 30  # churn needs about 1.7 GiB
    out = compare(cli, traces_dir / "churn.pickle.gz", conf, extra=["--memory-limit", limit])
    row = out["configs"][0]
    assert row["ooms"] > 0
    assert row["requests"] == out["requests"]
    # Native checks the limit against the request's classic segment size,
    # then maps whole pages: an expandable growth may pass it by less than
    # one 20 MiB page.
    assert row["peak_reserved"] < limit + (20 * MiB if conf == EXPANDABLE else 1)


def test_garbage_collection_acts_only_under_a_limit(cli, traces_dir):
    trace = traces_dir / "churn.pickle.gz"
    unlimited = compare(cli, trace, "", "garbage_collection_threshold:0.5")["configs"]
    assert unlimited[0]["peak_reserved"] == unlimited[1]["peak_reserved"]
    assert unlimited[1]["device_frees"] == 0
    limited = compare(cli, trace, "garbage_collection_threshold:0.5", extra=["--memory-limit", 2 << 30])
    assert limited["configs"][0]["device_frees"] > 0


def test_expandable_segments_reserve_less_on_transformer(cli, traces_dir):
    native, expandable = compare(cli, traces_dir / "transformer.pickle.gz", "trace", EXPANDABLE)["configs"]
    assert expandable["peak_reserved"] < native["peak_reserved"]
    assert expandable["fragmentation_at_peak"] < native["fragmentation_at_peak"]


def test_expandable_segments_reserve_more_on_mlp_for_page_rounding(cli, traces_dir):
    native, expandable = compare(cli, traces_dir / "mlp.pickle.gz", "trace", EXPANDABLE)["configs"]
    assert expandable["peak_reserved"] > native["peak_reserved"]


@pytest.mark.parametrize("name", ["emptycache", "multistream", "oom_frac", "random"])
def test_engine_invariants_hold_under_both_policies(cli, name):
    out = compare(cli, TRACES[name], "trace", EXPANDABLE,
                  extra=["--check-invariants", "--memory-limit", 3 << 30])
    assert len(out["configs"]) == 2


def test_deferred_free_keeps_memory_until_its_completion(cli, tmp_path):
    x, y = 0x7F0000000000, 0x7F0000C00000
    deferred = write_trace(tmp_path / "deferred.pickle", [
        entry("segment_alloc", x, 12 * MiB), entry("alloc", x, 12 * MiB),
        entry("free_requested", x, 12 * MiB),              # used on another stream
        entry("segment_alloc", y, 12 * MiB), entry("alloc", y, 12 * MiB),
        entry("free_completed", x, 12 * MiB),              # its event completes
        entry("free_requested", y, 12 * MiB), entry("free_completed", y, 12 * MiB),
        entry("alloc", x, 12 * MiB),
    ])
    out = compare(cli, deferred, "trace", EXPANDABLE)
    assert out["deferred_frees"] == 1
    assert [r["peak_reserved"] for r in out["configs"]] == [24 * MiB, 40 * MiB]
    immediate = write_trace(tmp_path / "immediate.pickle", [
        entry("segment_alloc", x, 12 * MiB), entry("alloc", x, 12 * MiB),
        entry("free_requested", x, 12 * MiB), entry("free_completed", x, 12 * MiB),
        entry("alloc", x, 12 * MiB),
    ])
    assert compare(cli, immediate, "trace")["configs"][0]["peak_reserved"] == 12 * MiB


def test_frees_of_blocks_allocated_before_the_trace_are_skipped(cli, tmp_path):
    trace = write_trace(tmp_path / "cut.pickle", [
        entry("free_requested", 0x7F0000000000, 4096), entry("free_completed", 0x7F0000000000, 4096),
        entry("segment_alloc", 0x7F0000200000, 2 * MiB), entry("alloc", 0x7F0000200000, 4096),
    ])
    out = compare(cli, trace, "trace")
    assert out["unmatched_frees"] == 1
    assert out["configs"][0]["peak_reserved"] == 2 * MiB


def test_segment_frees_no_request_explains_are_empty_cache_calls(cli, tmp_path):
    a = 0x7F0000000000
    trace = write_trace(tmp_path / "ec.pickle", [
        entry("segment_alloc", a, 2 * MiB), entry("alloc", a, 4096),
        entry("free_requested", a, 4096), entry("free_completed", a, 4096),
        entry("segment_free", a, 2 * MiB),                 # empty_cache()
        entry("segment_alloc", a, 2 * MiB), entry("alloc", a, 4096),
    ])
    out = compare(cli, trace, "trace")
    assert out["empty_cache_calls"] == 1
    assert out["configs"][0]["device_frees"] == 1


def test_multi_device_trace_needs_a_device_choice(cli, tmp_path):
    a = 0x7F0000000000
    dev = [entry("segment_alloc", a, 2 * MiB), entry("alloc", a, 4096)]
    trace = write_trace(tmp_path / "two.pickle", dev, dev + [entry("alloc", a + 4096, 4096)])
    proc = run(cli, "compare", trace)
    assert proc.returncode == 2 and "--device" in proc.stderr
    out = compare(cli, trace, "trace", extra=["--device", "1"])
    assert out["device"] == 1 and out["requests"] == 2


def test_progress_goes_to_stderr_when_asked(cli, traces_dir):
    proc = run(cli, "compare", traces_dir / "mlp.pickle.gz", "--progress")
    assert proc.returncode == 0
    assert "cachealloc: reading" in proc.stderr and "replaying config 1/1" in proc.stderr
    assert "cachealloc:" not in run(cli, "compare", traces_dir / "mlp.pickle.gz").stderr


# ---- min-memory -----------------------------------------------------------------

@pytest.mark.parametrize("conf", ["trace", EXPANDABLE, "garbage_collection_threshold:0.6"])
def test_min_memory_is_exact(cli, traces_dir, conf):
    trace = traces_dir / "resnet18.pickle.gz"
    proc = run(cli, "min-memory", "--json", trace, "--conf", conf)
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)["configs"][0]
    limit = row["min_memory"]
    assert 0 < limit <= row["peak_reserved_unlimited"]
    assert fits(cli, trace, conf, limit)
    assert not fits(cli, trace, conf, limit - 1)


def test_min_memory_bisects_bytes_when_gc_makes_a_unit_boundary_pass(cli, traces_dir):
    trace = traces_dir / "oom_frac.pickle.gz"
    conf = "garbage_collection_threshold:0.6"
    row = json.loads(run(cli, "min-memory", "--json", trace, "--conf", conf).stdout)["configs"][0]
    limit = row["min_memory"]
    assert row["byte_refined"] and limit % (2 * MiB) != 0
    assert fits(cli, trace, conf, limit)
    assert not fits(cli, trace, conf, limit - 1)


def test_min_memory_of_an_oom_trace_serves_every_recorded_oom(cli, traces_dir):
    trace = traces_dir / "oom_frac.pickle.gz"
    row = json.loads(run(cli, "min-memory", "--json", trace).stdout)["configs"][0]
    at = compare(cli, trace, "trace", extra=["--memory-limit", row["min_memory"]])
    assert at["configs"][0]["ooms"] == 0
    assert at["configs"][0]["recorded_ooms_succeeded"] == at["recorded_ooms"] == 61


# ---- HTML and snapshots ----------------------------------------------------------

def test_html_report_is_self_contained(cli, traces_dir, tmp_path):
    html = tmp_path / "report.html"
    confs = ["trace", "max_split_size_mb:64", EXPANDABLE]
    out = compare(cli, traces_dir / "transformer.pickle.gz", *confs,
                  extra=["--html", html, "--memory-limit", 3 << 30])
    text = html.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "http://" not in text and "https://" not in text and "<script" not in text
    assert text.count("<svg") == 1 + len(confs)  # the chart, one segment map per config
    for row in out["configs"]:
        assert row["label"] in text
        assert len(row["peak_blocks"]) == 10
        assert row["peak_blocks"][0]["size"] >= row["peak_blocks"][-1]["size"]
    assert "memory limit 3.00 GiB" in text


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_html_report_renders_in_headless_chromium(cli, traces_dir, tmp_path):
    html = tmp_path / "report.html"
    compare(cli, traces_dir / "random.pickle.gz", "trace", EXPANDABLE, extra=["--html", html])
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                    f"--screenshot={shot}", "--window-size=1400,1000", html.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20000  # a drawn page, not a blank one


def test_json_series_only_when_asked_and_their_maxima_are_the_peaks(cli, traces_dir):
    trace = traces_dir / "transformer.pickle.gz"
    assert "series" not in compare(cli, trace, "trace")["configs"][0]
    out = compare(cli, trace, "trace", EXPANDABLE, extra=["--series-points", 50])
    for row in out["configs"]:
        starts = [p[0] for p in row["series"]]
        assert starts[0] == 0 and starts == sorted(set(starts)) and starts[-1] < out["requests"]
        assert 25 <= len(starts) <= 50
        assert max(p[1] for p in row["series"]) == row["peak_reserved"]
        assert max(p[2] for p in row["series"]) == row["peak_allocated"]
        assert all(p[2] <= p[1] for p in row["series"])  # allocated within reserved, per bucket
    from cachealloc import lab  # the Python door passes it through
    rows = lab.compare(trace, ["trace"], series_points=20)
    assert rows[0]["series"] and max(p[1] for p in rows[0]["series"]) == rows[0]["peak_reserved"]


def test_snapshots_load_in_python_and_the_native_one_replays_exactly(cli, traces_dir, tmp_path):
    out = compare(cli, traces_dir / "multistream.pickle.gz", "trace", EXPANDABLE,
                  extra=["--snapshot-dir", tmp_path / "snaps"])
    native_path, expandable_path = (row["snapshot"] for row in out["configs"])
    for path in (native_path, expandable_path):
        with open(path, "rb") as f:
            snap = pickle.load(f)
        assert set(snap) >= {"segments", "device_traces", "allocator_settings"}
        assert snap["device_traces"][0]
    with open(expandable_path, "rb") as f:
        assert pickle.load(f)["allocator_settings"]["expandable_segments"] is True
    replayed = json.loads(run(cli, "replay", "--json", native_path).stdout)
    assert replayed["divergence"] is None


# ---- bad input -----------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["compare", "{trace}", "--conf", "max_split_size_mb:abc"], "max_split_size_mb"),
    (["compare", "{trace}", "--conf", "policy:buddy"], "unknown policy 'buddy'"),
    (["compare", "{trace}", "--conf", "policy:expandable"], "retired; use expandable_segments:True"),
    (["compare", "{trace}", "--conf", "per_process_memory_fraction:0.5"], "--memory-limit"),
    (["compare", "{trace}", "--conf", "backend:cudaMallocAsync"], "native backend"),
    (["compare", "{trace}", "--memory-limit", "lots"], "--memory-limit"),
    (["compare", "{trace}", "--bogus"], "unknown option --bogus"),
    (["compare"], "no TRACE given"),
    (["compare", "/no/such/trace.pickle.gz"], "/no/such/trace.pickle.gz"),
    (["min-memory", "{trace}", "--conf", "roundup_power2_divisions:3"], "roundup_power2_divisions"),
    (["min-memory", "{not_a_pickle}"], "pickle"),
])
def test_bad_input_exits_2_with_a_message(cli, traces_dir, tmp_path, args, message):
    not_a_pickle = tmp_path / "notes.txt"
    not_a_pickle.write_text("hello")
    args = [a.format(trace=traces_dir / "mlp.pickle.gz", not_a_pickle=not_a_pickle) for a in args]
    proc = run(cli, *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stdout == ""


def test_device_option_out_of_int_range_is_refused_not_wrapped(cli, traces_dir):
    proc = run(cli, "compare", traces_dir / "mlp.pickle.gz", "--device", "4294967296", "--quiet")
    assert proc.returncode == 2, "--device 4294967296 silently replayed device 0"
    assert "--device value '4294967296' is out of range" in proc.stderr


def test_html_write_failure_exits_2_naming_the_path_and_error(cli, traces_dir):
    # /dev/full: every write fails with ENOSPC (was: exit 0).
    proc = run(cli, "compare", traces_dir / "mlp.pickle.gz", "--html", "/dev/full", "--quiet")
    assert proc.returncode == 2
    assert "HTML report to /dev/full: No space left on device" in proc.stderr, proc.stderr


def test_memory_limit_accepts_binary_suffixes(cli, traces_dir):
    out = compare(cli, traces_dir / "mlp.pickle.gz", "trace", extra=["--memory-limit", "1GiB"])
    assert out["memory_limit"] == 1 << 30


# ---- Python wrapper -------------------------------------------------------------

def test_python_lab_wraps_the_cli(cli, traces_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("CACHEALLOC_CLI", str(cli))
    monkeypatch.syspath_prepend(str(REPO / "bindings" / "python"))
    from cachealloc import lab
    trace = traces_dir / "resnet18.pickle.gz"
    rows = lab.compare(trace, ["trace", EXPANDABLE], memory_limit=4 << 30,
                       html=tmp_path / "r.html")
    assert [r["policy"] for r in rows] == ["native", "native"]
    assert rows[0]["peak_reserved"] == meta_of("resnet18")["final_memory_stats"]["reserved_bytes.all.peak"]
    assert (tmp_path / "r.html").exists()
    minimum = lab.min_memory(trace, ["trace"])
    assert set(minimum) == {"trace"} and 0 < minimum["trace"] <= rows[0]["peak_reserved"]
    with pytest.raises(lab.LabError) as err:
        lab.compare(trace, ["policy:nope"])
    assert err.value.returncode == 2 and "nope" in str(err.value)
    with pytest.raises(TypeError):
        lab.compare(trace, "trace")


def test_min_memory_also_placements_equal_one_run_per_placement(cli):
    """--also-placement: one process, rows per (placement, conf) in order,
    each the figures a run under that placement alone gives (the predictor
    reads its random segment orders so); a bad placement is a usage error."""
    history = REPO / "tests" / "data" / "predict" / "regnet_y_1_6gf_classic_b64_H100_history.pickle.gz"
    confs = ["--conf", "", "--conf", "expandable_segments:True"]
    both = json.loads(run(cli, "min-memory", "--json", history, *confs, "--no-address-hints",
                          "--placement", "top-down", "--also-placement", "shuffled:2",
                          "--also-placement", "shuffled:3").stdout)["configs"]
    assert [(r["placement"], r["conf"]) for r in both] == [
        (p, c) for p in ("top-down", "shuffled:2", "shuffled:3") for c in ("", "expandable_segments:True")]
    for p in ("top-down", "shuffled:2", "shuffled:3"):
        alone = json.loads(run(cli, "min-memory", "--json", history, *confs, "--no-address-hints",
                               "--placement", p).stdout)["configs"]
        mine = [r for r in both if r["placement"] == p]
        assert len(alone) == len(mine) == 2
        for a, b in zip(alone, mine):
            assert (a["min_memory"], a["peak_reserved_unlimited"]) == \
                (b["min_memory"], b["peak_reserved_unlimited"])
    # The H100's order reserved 2,926 MiB; shuffled:2 reaches it, top down does not.
    assert [r["peak_reserved_unlimited"] >> 20 for r in both if r["conf"] == ""] == [2834, 2926, 2834]
    bad = subprocess.run([str(cli), "min-memory", str(history), "--also-placement", "sideways"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--also-placement: unknown segment placement 'sideways'" in bad.stderr
    # One value per option: the trace may follow it.
    after = run(cli, "min-memory", "--json", "--also-placement", "shuffled:2", history, "--conf", "")
    assert after.returncode == 0, after.stderr
    assert [r["placement"] for r in json.loads(after.stdout)["configs"]] == ["first-fit", "shuffled:2"]
