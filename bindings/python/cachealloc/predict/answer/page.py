"""`cachealloc predict --html PAGE`: one self-contained page (inline SVG,
no script, no external file or font) to decide a size by looking:

1. the answer and the settings line to copy, and a table of the peaks;
2. peak reserved and allocated against the size, per native config, with
   the allocator's limit and the error band (--largest: every probed size;
   one size: that size's bars);
3. the step's memory over time at the size the answer is about (--largest:
   the largest that fits, else the smallest tried), peaks and optimizer
   steps marked: the engine's replay series (`cachealloc compare
   --series-points`, lab.compare);
4. what the peak allocated is made of (parameters, gradients, optimizer
   state, activations, workspaces: device/peak_makeup.py), beside each
   config's peak reserved split into allocated and cached-but-free;
5. the text answer, as printed.

Sizes in GiB with two decimals (MiB below one GiB), fractions as
percentages. Charts scale to the window's width (svg_chart.py).
"""
from __future__ import annotations

import html
from typing import List, Optional

from ... import lab
from ..device.peak_makeup import KINDS
from . import svg_chart as sc
from .report import size_text
from .search import NATIVE_CONFIGS, PLACEMENT

# The error band, read here only. Each config row -- answer["configs"][name]
# for one size, answer["probes"][str(size)][name] for --largest -- may carry
# BAND_FIELD: {"peak_allocated": [LOW, HIGH], "peak_reserved": [LOW, HIGH]},
# bytes below and above that peak (band.py; HIGH None: no bound), drawn
# with its wider side as the half-width (a single BYTES is taken as both).
# A row without it, or with no bound: no band drawn.
BAND_FIELD = "band"
SERIES_POINTS = 600   # buckets of the over-time chart (each its largest value)

CONFIG_COLOURS = {"classic": sc.BLUE, "expandable": sc.ORANGE}
KIND_NAMES = {"parameters": "parameters", "gradients": "gradients",
              "optimizer_state": "optimizer state", "activations": "activations and temporaries",
              "workspaces": "workspaces (cuBLAS, cuDNN)"}
KIND_COLOURS = {"parameters": sc.BLUE, "gradients": sc.SKY, "optimizer_state": sc.PINK,
                "activations": sc.ORANGE, "workspaces": sc.GREY}

_STYLE = """
body{font-family:sans-serif;margin:0;padding:1em 1.5em;color:#1b1b1b;line-height:1.4}
main{max-width:1100px;margin:0 auto}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.2em;margin:1.6em 0 .3em}
.sub,.note{color:#555;font-size:.92em}
.settings{background:#f4f6f8;border:1px solid #d0d7de;border-radius:6px;padding:.6em .9em;margin:1em 0}
code{font-size:1.05em;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.5em 0}
td,th{border-bottom:1px solid #ddd;padding:3px 10px;text-align:right}
td{white-space:nowrap}td.l{white-space:normal}
td.l,th.l{text-align:left}
.yes{color:#1a7f37;font-weight:bold}.no{color:#cf222e;font-weight:bold}
.legend span{display:inline-block;margin-right:1.2em;white-space:nowrap}
.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f8fa;padding:.8em;font-size:.85em}
svg{display:block;max-width:100%;height:auto}
"""


def percent(fraction: float) -> str:
    """17.2%, 100.0%, and two significant digits under 1% (0.45%)."""
    value = 100 * fraction
    return f"{value:.1f}%" if abs(value) >= 1 or value == 0 else f"{value:.2g}%"


def band_of(row: dict, peak: str) -> Optional[int]:
    """The ± bytes of the band around row[peak], or None (BAND_FIELD)."""
    band = (row or {}).get(BAND_FIELD)
    value = band.get(peak) if isinstance(band, dict) else None
    if isinstance(value, (list, tuple)):
        value = None if None in value else max(value)
    return int(value) if value else None


def _verdict_colour(answer: dict, headline: str) -> str:
    if headline.upper().startswith("TOO CLOSE"):
        return "#9a6700"
    ok = answer["fits"] if "fits" in answer else answer.get("largest_fitting", 0) > 0
    return "#1a7f37" if ok else "#cf222e"


def _limit_line(a: dict) -> str:
    parts = [f"the allocator can get {size_text(a['limit'])}"]
    if a.get("total_memory"):
        parts.append(f"of {size_text(a['total_memory'])} on {a['gpu']}")
    else:
        parts.append(f"on {a['gpu']}")
    parts.append(f"after {size_text(a['context_bytes_assumed'])} assumed CUDA context")
    if a.get("memory_fraction"):
        parts.append(f"under memory fraction {percent(a['memory_fraction'])}")
    return " ".join(parts)


def _settings(a: dict) -> str:
    line = a.get("settings")
    if line is None:
        return ('<div class="settings">No allocator setting makes this fit: a smaller size, '
                'or a larger GPU.</div>')
    if line == "":
        return ('<div class="settings">Use the defaults: <code>unset PYTORCH_CUDA_ALLOC_CONF'
                '</code></div>')
    return (f'<div class="settings">Settings to use: <code>PYTORCH_CUDA_ALLOC_CONF='
            f'{html.escape(line)}</code></div>')


def _with_band(value, band) -> str:
    return size_text(value) + (f" ± {size_text(band)}" if band else "")


def _fits_table(a: dict) -> str:
    rows = ['<table><tr><th class="l">config</th><th>peak allocated</th>'
            '<th>peak reserved (no limit)</th><th>needs at least</th>'
            '<th>headroom (limit &minus; needs)</th><th class="l">fits</th></tr>']
    limit = a["limit"]

    def room(needs) -> str:
        if needs is None:
            return "-"
        return f"{size_text(limit - needs)} ({percent((limit - needs) / limit)})"

    for name, c in a["configs"].items():
        rows.append(f'<tr><td class="l">{name}</td>'
                    f'<td>{_with_band(c["peak_allocated"], band_of(c, "peak_allocated"))}</td>'
                    f'<td>{_with_band(c["peak_reserved"], band_of(c, "peak_reserved"))}</td>'
                    f'<td>{size_text(c["min_memory"])}</td><td>{room(c["min_memory"])}</td>'
                    f'<td class="l {"yes" if c["fits"] else "no"}">{"yes" if c["fits"] else "no"}'
                    '</td></tr>')
    b = a.get("best")
    if b and b.get("min_memory") is not None:
        ok = b["min_memory"] <= limit
        rows.append(f'<tr><td class="l">advisor: {html.escape(b["line"] or "defaults")}</td>'
                    f'<td></td><td></td><td>{size_text(b["min_memory"])}</td>'
                    f'<td>{room(b["min_memory"])}</td>'
                    f'<td class="l {"yes" if ok else "no"}">{"yes" if ok else "no"}</td></tr>')
    return "".join(rows) + "</table>"


def _largest_table(a: dict) -> str:
    rows = ['<table><tr><th class="l">config</th><th>largest size that fits</th>'
            '<th>peak reserved there (no limit)</th><th>needs at least</th>'
            '<th>peak allocated there</th>'
            '</tr>']
    for name in NATIVE_CONFIGS:
        n = a["largest"][name]
        row = a["probes"].get(str(n), {}).get(name) if n else None
        rows.append(f'<tr><td class="l">{name}</td><td>{n or "none"}</td>'
                    f'<td>{_with_band(row["peak_reserved"], band_of(row, "peak_reserved")) if row else "-"}</td>'
                    f'<td>{size_text(row["min_memory"]) if row else "-"}</td>'
                    f'<td>{_with_band(row["peak_allocated"], band_of(row, "peak_allocated")) if row else "-"}'
                    '</td></tr>')
    rows.append(f'<tr><td class="l">physical limit (peak allocated fits)</td>'
                f'<td>{a["largest"]["physical"] or "none"}</td><td></td><td></td><td></td></tr>')
    return "".join(rows) + "</table>"


def _same_allocated(rows: List[dict]) -> bool:
    return len({r["peak_allocated"] for r in rows}) == 1


# The lines of the peaks-against-size chart: (row key, name, dash, width).
# Reserved is without a limit (what the step asks of a large enough GPU);
# "needs" is the smallest limit the step runs in without an OOM, found by
# replay: near the limit the allocator frees its cache and retries, so a
# config fits while "needs" is under the limit, even where reserved is not.
_PEAK_LINES = (("peak_reserved", "reserved", None, 2.0), ("min_memory", "needs", "2,3", 1.6))


def _peaks_by_size(a: dict) -> str:
    """--largest: lines per config through the probed sizes."""
    sizes = sorted(int(s) for s in a["probes"])
    limit = a["limit"]
    rows_at = {s: a["probes"][str(s)] for s in sizes}
    top = max([limit] + [r["peak_reserved"] + (band_of(r, "peak_reserved") or 0)
                         for s in sizes for r in rows_at[s].values()])
    plot = sc.Plot(max(sizes) * 1.04, top * 1.05, height=340, x_label="size",
                   title="peak memory against the size")
    plot.axes(_ticks(max(sizes)))
    for name in NATIVE_CONFIGS:
        colour = CONFIG_COLOURS[name]
        rows = [(s, rows_at[s][name]) for s in sizes]
        for key, what, dash, width in _PEAK_LINES:
            label = f"{name} {what}"
            band = [(s, r[key] - band_of(r, key), r[key] + band_of(r, key))
                    for s, r in rows if band_of(r, key)]
            if band and len(band) == len(rows):
                plot.band(band, colour, f"{label}: error band")
            points = [(s, r[key]) for s, r in rows if r.get(key) is not None]
            if points:
                plot.line(points, colour, dash=dash, width=width, tip=label)
                plot.label_right(points[-1][1], label, colour)
        for s, r in rows:
            plot.dot(s, r["peak_reserved"], colour,
                     f"size {s}, {name}: reserved {_with_band(r['peak_reserved'], band_of(r, 'peak_reserved'))}"
                     f", needs {size_text(r['min_memory'])}, allocated "
                     f"{_with_band(r['peak_allocated'], band_of(r, 'peak_allocated'))}: "
                     + ("fits" if r["fits"] else "does not fit"), r=3.5, ring=not r["fits"])
    one_allocated = all(_same_allocated(list(rows_at[s].values())) for s in sizes)
    for name in NATIVE_CONFIGS if not one_allocated else ["classic"]:
        colour = "#444" if one_allocated else CONFIG_COLOURS[name]
        label = "allocated" if one_allocated else f"{name} allocated"
        rows = [(s, rows_at[s][name]) for s in sizes]
        band = [(s, r["peak_allocated"] - band_of(r, "peak_allocated"),
                 r["peak_allocated"] + band_of(r, "peak_allocated"))
                for s, r in rows if band_of(r, "peak_allocated")]
        if band and len(band) == len(rows):
            plot.band(band, colour, f"{label}: error band")
        plot.line([(s, r["peak_allocated"]) for s, r in rows], colour, dash="7,4", width=1.6,
                  tip=label)
        plot.label_right(rows[-1][1]["peak_allocated"], label, colour)
    plot.hline(limit, sc.VERMILLION, f"limit {size_text(limit)}")
    best = a.get("largest_fitting") or 0
    if best:
        plot.vline(best, sc.GREEN, f"largest that fits: {best}")
    return plot.svg()


def _ticks(top: float) -> List[float]:
    step = max(1.0, sc.nice_step(top))
    return [i * step for i in range(int(top // step) + 1)]


def _peaks_at_size(a: dict) -> str:
    """One size: bars per config (reserved, needs), allocated, the limit."""
    limit = a["limit"]
    rows = []
    configs = a["configs"]
    for name, c in configs.items():
        colour = CONFIG_COLOURS.get(name, sc.GREY)
        rows.append((f"{name}: reserved", [("reserved", c["peak_reserved"], colour)],
                     band_of(c, "peak_reserved")))
        if c.get("min_memory") is not None:
            rows.append((f"{name}: needs at least", [("needs", c["min_memory"], colour + "99")],
                         None))
    names = [n for n in configs] if not _same_allocated(list(configs.values())) else [None]
    for name in names:
        c = configs[name] if name else next(iter(configs.values()))
        rows.append((f"{name}: allocated" if name else "allocated",
                     [("allocated", c["peak_allocated"], "#444")], band_of(c, "peak_allocated")))
    top = max([limit] + [sum(p[1] for p in parts) + (band or 0) for _, parts, band in rows])
    return sc.stacked_bars(rows, top * 1.04, marks=[(limit, f"limit {size_text(limit)}",
                                                     sc.VERMILLION)],
                           title=f"peak memory at size {a.get('size')}", text_of=size_text)


def _fits_at(a: dict) -> dict:
    """{config name: fits} at the size the page shows over time."""
    if "largest" in a:
        row = a["probes"].get(str(a.get("shown_size")), {})
        return {name: bool(row.get(name, {}).get("fits")) for name in NATIVE_CONFIGS}
    return {name: bool(a["configs"][name]["fits"]) for name in NATIVE_CONFIGS}


def over_time(a: dict) -> Optional[List[dict]]:
    """The engine's replay series of the answer's recording, per native
    config (lab.compare rows with "series", plus "at_limit"): under the
    limit where the config fits (what the GPU would do: near the limit it
    frees its cache and retries), without one where it does not (how far
    over it goes). None when the recording is gone or the tool refuses it
    (the page then says so)."""
    trace = a.get("trace")
    if not trace:
        return None
    fits = _fits_at(a)
    rows = {}
    try:
        for at_limit in (True, False):
            names = [n for n in NATIVE_CONFIGS if fits[n] == at_limit]
            if names:
                got = lab.compare(trace, [NATIVE_CONFIGS[n] for n in names],
                                  memory_limit=a["limit"] if at_limit else None,
                                  series_points=SERIES_POINTS, placement=PLACEMENT)
                for name, row in zip(names, got):
                    rows[name] = dict(row, at_limit=at_limit)
    except (lab.LabError, OSError):
        return None
    return [rows[n] for n in NATIVE_CONFIGS]


def _over_time_chart(a: dict, rows: List[dict]) -> str:
    limit = a["limit"]
    rec = a.get("recording") or {}
    requests = max(rows[0]["requests"], 1)
    peak = max(r["peak_reserved"] for r in rows)
    show_limit = limit <= 1.6 * peak
    plot = sc.Plot(requests, (max(peak, limit) if show_limit else peak) * 1.08, height=320,
                   x_label="allocator requests in program order (time →)",
                   title="memory over the recorded steps")
    plot.axes(_ticks(requests), x_text=lambda v: f"{v:,.0f}")
    for i, end in enumerate(rec.get("step_ends") or []):
        plot.vline(min(end, requests), "#888", f"step {i + 1}", dotted=True)
    names = list(NATIVE_CONFIGS)
    one_allocated = len({tuple(p[2] for p in r["series"]) for r in rows}) == 1
    lines = []   # the table under the chart: (colour, what, peak, where)
    for name, r in zip(names, rows):
        colour = CONFIG_COLOURS[name]
        what = f"{name} reserved" + ("" if r["at_limit"] else " (no limit)")
        series = [(p[0], p[1]) for p in r["series"]] + [(requests, r["series"][-1][1])]
        plot.line(series, colour, width=1.6, step=True, tip=what)
        plot.dot(r["peak_request"], r["peak_reserved"], colour,
                 f"{what}: peak {size_text(r['peak_reserved'])} at request {r['peak_request']:,}",
                 r=5)
        plot.label_right(r["series"][-1][1], f"{name} reserved", colour)
        lines.append((colour, what, r["peak_reserved"], r["peak_request"], r))
    at = (rec.get("peak_makeup") or {}).get("event")
    for name, r in zip(names, rows):
        if one_allocated and name != names[0]:
            continue
        colour = "#444" if one_allocated else CONFIG_COLOURS[name]
        what = "allocated" if one_allocated else f"{name} allocated"
        series = [(p[0], p[2]) for p in r["series"]] + [(requests, r["series"][-1][2])]
        plot.line(series, colour, dash="7,4", width=1.4, step=True, tip=what)
        where = at if at is not None else max(r["series"], key=lambda p: p[2])[0]
        plot.dot(where, r["peak_allocated"], colour,
                 f"{what}: peak {size_text(r['peak_allocated'])} at request {where:,}", r=5,
                 ring=True)
        plot.label_right(r["series"][-1][2], what, colour)
        lines.append((colour, what, r["peak_allocated"], where, None))
    if show_limit:
        plot.hline(limit, sc.VERMILLION, f"limit {size_text(limit)}")
    table = ['<table><tr><th class="l">line</th><th>peak</th><th>at request</th>'
             '<th>cache flushes (retries)</th><th>OOMs</th></tr>']
    for colour, what, value, where, r in lines:
        extra = (f'<td>{r["retries"]}</td><td>{r["ooms"]}</td>' if r else "<td></td><td></td>")
        table.append(f'<tr><td class="l"><span style="color:{colour}">━</span> {html.escape(what)}'
                     f'</td><td>{size_text(value)}</td><td>{where:,}</td>{extra}</tr>')
    table.append("</table>")
    note = ('<p class="note">Replayed on the engine at the limit where a config fits (near the '
            "limit the allocator frees its cache and retries, as on the GPU), without a limit "
            "where it does not. Each point is the largest value in a bucket of consecutive "
            "requests; dotted lines end the optimizer steps.")
    if not show_limit:
        note += (f" The limit, {size_text(limit)}, is far above this chart "
                 f"({percent(peak / limit)} of it is reserved at the peak).")
    return plot.svg() + "".join(table) + note + "</p>"


def _makeup(a: dict, rows: Optional[List[dict]]) -> str:
    m = (a.get("recording") or {}).get("peak_makeup")
    if not m or not m.get("total"):
        return '<p class="note">This recording has no breakdown of its peak.</p>'
    bars = [("peak allocated", [(KIND_NAMES[k], m[k], KIND_COLOURS[k]) for k in KINDS], None)]
    for name, r in zip(NATIVE_CONFIGS, rows or []):
        bars.append((f"{name} reserved" + ("" if r["at_limit"] else ", no limit"),
                     [("allocated then", r["allocated_at_peak"], "#7a7a7a"),
                      ("cached, free", r["peak_reserved"] - r["allocated_at_peak"], sc.LIGHT)],
                     None))
    top = max(sum(p[1] for p in parts) for _, parts, _ in bars)
    marks = [(a["limit"], f"limit {size_text(a['limit'])}", sc.VERMILLION)] \
        if a["limit"] <= 1.3 * top else []
    chart = sc.stacked_bars(bars, max([top] + [b for b, _, _ in marks]) * 1.04, marks=marks,
                            title="what the peak is made of", text_of=size_text)
    legend = "".join(f'<span><i style="background:{KIND_COLOURS[k]}"></i>{KIND_NAMES[k]} '
                     f'{size_text(m[k])} ({percent(m[k] / m["total"])})</span>' for k in KINDS)
    return (chart + f'<p class="legend">{legend}</p><p class="note">At request '
            f'{m["event"]:,}, where the live bytes peak. Parameters, gradients and optimizer '
            "state are the storages an optimizer held at its steps; workspaces are the cuBLAS "
            "and cuDNN workspaces; the rest is activations and temporaries. A reserved bar adds "
            "what the allocator caches, free, at its own peak.</p>")


def headline_of(text: str) -> str:
    """The text answer's first line without its explanation (what follows
    ': the allocator' or an opening parenthesis): the page's title."""
    line = text.partition("\n")[0]
    for cut in (": the allocator", " ("):
        line = line.split(cut, 1)[0]
    return line.strip()


def render(a: dict, text: str, rows: Optional[List[dict]] = None) -> str:
    """The page for an answer (search.fits or search.largest), its text
    (report.py) and the over-time replay rows (over_time())."""
    headline = headline_of(text)
    largest = "largest" in a
    shown = a.get("shown_size") if largest else a.get("size")
    out = ['<!doctype html><html lang="en"><head><meta charset="utf-8">'
           '<meta name="viewport" content="width=device-width, initial-scale=1">'
           f'<title>cachealloc predict: {html.escape(headline)}</title><style>{_STYLE}</style>'
           '</head><body><main>',
           f'<h1 style="color:{_verdict_colour(a, headline)}">{html.escape(headline)}</h1>',
           f'<p class="sub">{html.escape(_limit_line(a))}; {a.get("steps", "")}'
           f'{" optimizer step(s) recorded; " if "steps" in a else ""}'
           f'predicted in {a["seconds"]:.1f} s</p>', _settings(a),
           _largest_table(a) if largest else _fits_table(a)]
    out.append("<h2>Peak memory against the size</h2>")
    if largest and a.get("probes"):
        out.append(_peaks_by_size(a) + '<p class="note">Each probed size was recorded and '
                   "replayed; lines join the probes, filled dots fit and hollow ones do not. "
                   "Reserved is what the step takes with no limit; needs (dotted) is the "
                   "smallest limit it runs in without an out-of-memory error, as near the limit "
                   "the allocator frees its cache and retries: a config fits while its needs "
                   "line is under the limit. Allocated (dashed) is the tensors alone.</p>")
    elif not largest:
        out.append(_peaks_at_size(a) + '<p class="note">Reserved is what the step takes with '
                   "no limit; needs is the smallest limit it runs in without an out-of-memory "
                   "error (near the limit the allocator frees its cache and retries): a config "
                   "fits where its needs bar ends left of the limit.</p>")
    what = "" if shown is None else f" at size {shown}"
    out.append(f"<h2>Memory over the recorded steps{what}</h2>")
    if rows:
        out.append(_over_time_chart(a, rows))
    else:
        out.append('<p class="note">The recording is gone (or could not be replayed), so '
                   "there is no time series.</p>")
    out.append(f"<h2>What the peak is made of{what}</h2>")
    out.append(_makeup(a, rows))
    out.append("<details><summary>The answer as printed</summary>"
               f"<pre>{html.escape(text)}</pre></details>")
    return "".join(out) + "</main></body></html>\n"


def write(path, a: dict, text: str) -> None:
    """Replays the recording for the time series, and writes the page."""
    page = render(a, text, over_time(a))
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
