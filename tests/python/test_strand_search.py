"""The strand driver's searches and verdicts (benchmarks/strand/search.py,
report.py, measure.ratios) on functions whose answers are known."""
import math
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "strand"))

import measure  # noqa: E402
import report  # noqa: E402
import search  # noqa: E402

GIB = 1 << 30


def brute(peak, grain, limit, top=10**6):
    best = None
    for k in range(1, top // grain + 1):
        if peak(k * grain) <= limit:
            best = k * grain
    return best


@pytest.mark.parametrize("base,slope,start,grain", [
    (1e9, 2e5, 16384, 128), (5e8, 1e6, 64, 8), (1e9, 3e5, 900_000, 8), (2e9, 4e5, 8, 8)])
def test_physical_finds_the_largest_fitting_size(base, slope, start, grain):
    limit = 6 * GIB
    peak = lambda s: base + slope * s
    rounds = []

    def probe(sizes):
        rounds.append(list(sizes))
        assert all(s % grain == 0 and s > 0 for s in sizes) and len(sizes) <= 3
        return [peak(s) if peak(s) <= 1.25 * limit else None for s in sizes]

    r = search.physical(probe, start, grain, limit, rel_res=0.0)
    assert r.value == brute(peak, grain, limit) and r.converged
    assert r.fails_at == r.value + grain
    assert len(rounds) <= 6  # interpolation, not bisection


def test_physical_nonlinear_and_resolution():
    limit = 6 * GIB
    peak = lambda s: 1e8 + 3.0 * s * s + (1e7 if s % 16 else 0)
    r = search.physical(lambda ss: [peak(s) for s in ss], 1000, 8, limit, rel_res=0.005, max_rounds=12)
    true = brute(peak, 8, limit, 50_000)
    assert r.converged and r.value <= true and peak(r.value) <= limit
    assert r.fails_at - r.value <= max(8, 0.005 * r.value + 8)


def test_physical_nothing_fits_and_errors():
    r = search.physical(lambda ss: [None] * len(ss), 64, 8, GIB)
    assert r.value is None and r.converged and r.fails_at == 8
    # Errors count as not fitting: the search still ends, below them.
    r = search.physical(lambda ss: [search.ERROR if s > 400 else s * 1e6 for s in ss], 64, 8, GIB)
    assert r.value is not None and r.value <= 400


def test_physical_out_of_time_is_not_a_failure():
    r = search.physical(lambda ss: [search.SKIP] * len(ss), 64, 8, GIB, stop=lambda: True)
    assert r.value is None and r.fails_at is None and not r.converged


@pytest.mark.parametrize("threshold", [5000, 4990, 4700, 2000, 8, 0])
def test_largest(threshold):
    calls = []

    def probe(sizes):
        calls.append(sizes)
        return [s <= threshold for s in sizes]

    r = search.largest(probe, 5000, 8, rel_res=0.005)
    assert calls[0] == [5000]  # the physical size first, alone
    if threshold >= 5000:
        assert r.value == 5000 and len(calls) == 1
    elif threshold < 8:
        assert r.value is None and r.converged
    else:
        assert r.value <= threshold < r.fails_at
        assert r.fails_at - r.value <= max(8, 0.005 * r.value + 8)
        assert r.converged and len(calls) <= 8


def test_a_fit_above_a_failure_is_ignored():
    # Probes that fit above one that failed (noise) do not move the bracket up.
    assert search._bracket({500: True, 562: False, 600: True}) == (500, 562)
    assert search._bracket({500: True, 600: True}) == (600, None)
    assert search._bracket({500: False}) == (None, 500)


def test_largest_skipped_first_probe():
    r = search.largest(lambda ss: [search.SKIP] * len(ss), 4000, 8, stop=lambda: True)
    assert r.value is None and not r.converged and "out of time" in r.note


def workload(phys, sizes, reserved):
    kinds = {}
    for k, v in sizes.items():
        kinds[k] = {"largest": {"value": v, "converged": True},
                    "at_largest": {"outcome": "ok", "peak_allocated": 100, "peak_reserved": reserved.get(k, 100)}}
    W = {"physical": {"value": phys, "converged": True}, "kinds": kinds, "unit": "tokens"}
    W["native_best"] = measure.native_best(W)
    return W


def test_native_best_and_verdicts():
    W = workload(1000, {"classic": 900, "expandable": 960, "advised": 960, "policy:stitch": 990},
                 {"expandable": 104, "advised": 101})
    assert W["native_best"] == "advised"  # same size as expandable, less reserved
    strands, why = report.verdict(W)
    assert strands and "960 < physical 1,000" in why
    assert report.closes_half(W, "policy:stitch") is True
    W["kinds"]["policy:stitch"]["largest"]["value"] = 970
    assert report.closes_half(W, "policy:stitch") is False
    # At the physical size, but reserving 6 % over allocated: stranded too.
    W = workload(1000, {"classic": 1000, "expandable": 1000}, {"classic": 106, "expandable": 107})
    assert W["native_best"] == "classic"
    strands, why = report.verdict(W)
    assert strands and "1.060x" in why
    W = workload(1000, {"classic": 1000}, {"classic": 104})
    assert report.verdict(W)[0] is False
    assert "strands" in report.markdown({"meta": {"policies": ["stitch"]}, "workloads": {"w": W}})


def test_ratios_per_round():
    rounds = {"classic": [1.0, 2.0, 1.0, 1.0, 1.0], "expandable": [1.1, 2.0, 0.9, 1.0, 1.2],
              "policy:stitch": [1.5, 3.0, 1.5, 1.5, 1.5]}
    r = measure.ratios(rounds, "expandable")
    assert r["classic"]["vs_classic"]["median"] == 1.0
    assert math.isclose(r["expandable"]["vs_classic"]["median"], 1.0)
    assert math.isclose(r["expandable"]["vs_classic"]["max"], 1.2)
    assert math.isclose(r["policy:stitch"]["vs_classic"]["median"], 1.5)
    assert math.isclose(r["policy:stitch"]["vs_native_best"]["min"], 1.25)
    assert r["policy:stitch"]["vs_native_best"]["n"] == 5
