"""`cachealloc predict --html PAGE` (predict/answer/page.py): a page to
decide a size from, checked as a reader gets it: self-contained, numbers
for people, the three charts there, and in a headless browser no wider than
a 1280 px window with every chart drawn. Also the breakdown of the peak it
draws (device/peak_makeup.py). One fake-device recording per prediction
(a few seconds each)."""
import copy
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
STEPS = pathlib.Path(__file__).with_name("predict_steps")
torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _tool(cli, monkeypatch):
    monkeypatch.setenv("CACHEALLOC_CLI", str(cli))


@pytest.fixture(scope="module")
def fits_page(tmp_path_factory, cli):
    """One size of an unmodified script under an odd memory fraction."""
    out = tmp_path_factory.mktemp("fits")
    page = out / "answer.html"
    env = dict(os.environ, CACHEALLOC_CLI=str(cli))
    proc = subprocess.run(
        [sys.executable, "-m", "cachealloc.cli", "predict", "--gpu", "A100-40GB",
         "--memory-fraction", "0.17167293532620678", "--steps", "3", "--size", "64",
         "--batch-arg=--batch-size", "--json", "--html", str(page), "--no-advise", "--",
         "python", str(STEPS / "tiny_train.py"), "--steps", "1000"],
        capture_output=True, text=True, env=dict(env, PYTHONPATH=str(REPO / "bindings" / "python")))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), page


@pytest.fixture(scope="module")
def largest_answer(tmp_path_factory, cli):
    """A --largest search of a known step (peak allocated = 2 * size MiB)."""
    from cachealloc import predict
    gpu = predict.resolve_gpu(None, memory=64 << 20, context_bytes=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CACHEALLOC_CLI", str(cli))
        return predict.largest(f"{STEPS / 'steps.py'}:blocks", gpu, steps=2, start=8, max_size=64,
                               workdir=tmp_path_factory.mktemp("largest"))


def _render(answer):
    from cachealloc.predict.answer import page, report
    text = report.largest_text(answer) if "largest" in answer else report.fits_text(answer)
    return page.render(answer, text, page.over_time(answer))


def _with_band(answer, fraction=0.03):
    """The answer with a band on every row, as the band's helper will give it
    (page.BAND_FIELD)."""
    from cachealloc.predict.answer import page
    a = copy.deepcopy(answer)
    rows = (list(a["configs"].values()) if "configs" in a else
            [r for per_size in a["probes"].values() for r in per_size.values()])
    for r in rows:
        r[page.BAND_FIELD] = {"peak_allocated": int(r["peak_allocated"] * fraction),
                              "peak_reserved": int(r["peak_reserved"] * fraction)}
    return a


def test_breakdown_of_the_peak_adds_up_and_names_the_optimizer_state(fits_page):
    answer, _ = fits_page
    rec = answer["recording"]
    m = rec["peak_makeup"]
    kinds = ["parameters", "gradients", "optimizer_state", "activations", "workspaces"]
    assert sum(m[k] for k in kinds) == m["total"]
    # Rounded requests at the request where they peak: the replay's peak allocated.
    assert m["total"] == answer["configs"]["classic"]["peak_allocated"]
    held = rec["at_optimizer_step"]
    # The peak is in a later step's backward or optimizer step: the whole model is held.
    assert m["parameters"] == held["parameters"] == (256 * 1024 + 1024 + 1024 * 256 + 256) * 4
    assert m["optimizer_state"] == held["optimizer_state"] == 2 * held["parameters"]  # AdamW
    assert m["workspaces"] > 0 and m["activations"] > 0          # cuBLAS workspaces, saved tensors
    assert len(rec["step_ends"]) == 3 and rec["step_ends"] == sorted(rec["step_ends"])
    assert rec["step_ends"][-1] <= rec["allocations"] + rec["frees"]


def test_page_is_self_contained_with_numbers_for_people(fits_page):
    answer, page = fits_page
    text = page.read_text()
    assert text.startswith("<!doctype html>") and text.rstrip().endswith("</html>")
    assert "<script" not in text and "http://" not in text and "https://" not in text
    assert "@font-face" not in text and "<link" not in text and "<img" not in text
    assert "0.17167293532620678" not in text and "memory fraction 17.2%" in text
    assert re.search(r"<h1[^>]*>FITS on A100-40GB at size 64</h1>", text)
    # Sizes: GiB with two decimals, MiB with one; no raw byte counts in the tables.
    for number, unit in re.findall(r"(-?[\d.]+) (GiB|MiB)", text):
        assert re.fullmatch(r"-?\d+\.\d\d" if unit == "GiB" else r"-?\d+\.\d", number), number
    assert str(answer["configs"]["classic"]["peak_reserved"]) not in text.split("<details>")[0]
    # Three charts: peaks at the size, memory over the steps, what the peak is made of.
    assert text.count("<svg") == 3
    for heading in ("Peak memory against the size", "Memory over the recorded steps at size 64",
                    "What the peak is made of at size 64"):
        assert heading in text
    assert "step 3" in text and "optimizer state" in text and "workspaces (cuBLAS, cuDNN)" in text
    assert "<polygon" not in text and "±" not in text      # no band in this answer: none drawn


def test_band_is_drawn_when_the_answer_carries_one(fits_page, largest_answer):
    answer, _ = fits_page
    banded = _render(_with_band(answer))
    assert banded.count("± ") >= 3                      # table cells and whiskers
    assert "band:" in banded                             # a whisker's hover text
    page = _render(_with_band(largest_answer))
    assert page.count("<polygon") >= 3                   # reserved per config, and allocated
    assert "<polygon" not in _render(largest_answer)


def test_largest_page_draws_every_probed_size(largest_answer):
    page = _render(largest_answer)
    assert "LARGEST SIZE THAT FITS" in page and "largest that fits: 32" in page
    for size in largest_answer["probes"]:
        assert f"size {size}, classic:" in page and f"size {size}, expandable:" in page
    assert largest_answer["shown_size"] == 32 and "Memory over the recorded steps at size 32" in page
    assert page.count("<svg") == 3


_MEASURE = """<script>
(function () {
  var svgs = document.querySelectorAll('svg'), drawn = [];
  for (var i = 0; i < svgs.length; i++) {
    var r = svgs[i].getBoundingClientRect();
    drawn.push([Math.round(r.width), Math.round(r.height),
                svgs[i].querySelectorAll('polyline,rect,circle,line').length].join('x'));
  }
  document.body.setAttribute('data-scroll-width', document.documentElement.scrollWidth);
  document.body.setAttribute('data-window-width', window.innerWidth);
  document.body.setAttribute('data-svgs', drawn.join(' '));
})();
</script></body>"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_page_fits_a_1280_px_window_with_every_chart_drawn(fits_page, largest_answer, tmp_path):
    _, fits = fits_page
    pages = {"fits": fits.read_text(), "largest": _render(_with_band(largest_answer))}
    for name, text in pages.items():
        # The page has no script of its own: a copy gets one that measures it.
        probe = tmp_path / f"{name}-measured.html"
        probe.write_text(text.replace("</body>", _MEASURE))
        dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                              "--window-size=1280,900", "--dump-dom", probe.as_uri()],
                             capture_output=True, text=True, timeout=120).stdout
        attrs = dict(re.findall(r'data-([\w-]+)="([^"]*)"', dom))
        assert int(attrs["window-width"]) == 1280, attrs
        assert int(attrs["scroll-width"]) <= 1280, f"{name} page is wider than the window"
        charts = [tuple(map(int, c.split("x"))) for c in attrs["svgs"].split()]
        assert len(charts) == 3
        for width, height, shapes in charts:
            assert 600 <= width <= 1280 and height >= 100 and shapes >= 5, (name, charts)
        page = tmp_path / f"{name}.html"
        page.write_text(text)
        shot = tmp_path / f"{name}.png"
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--screenshot={shot}", "--window-size=1280,1800",
                        page.as_uri()], capture_output=True, timeout=120)
        assert shot.exists() and shot.stat().st_size > 50000  # a drawn page, not a blank one
