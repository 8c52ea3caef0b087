"""An offline HTML page of a profile: allocated and reserved bytes over time
(inline SVG: no script, no external URL), a band per scope in lanes by
nesting depth, each scope's exact peak as a dashed bar over its time span,
and the results table. Hovering an element shows its numbers (SVG titles).

The memory lines join measured samples (scope boundaries, monitoring
samples); between samples the level is not known, which is why each scope's
peak is drawn separately: it is exact even when no sample caught it.
"""
from __future__ import annotations

import html
from typing import List, Sequence

from .monitor import MemorySample
from .results import ScopeResult, format_bytes

WIDTH, LEFT, RIGHT, TOP = 1300, 96, 24, 36   # px
CHART_HEIGHT, LANE_HEIGHT, LANE_GAP = 380, 22, 4  # px
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#e15759", "#76b7b2", "#edc948", "#9c755f"]
ALLOCATED_COLOR, RESERVED_COLOR = "#1f4e9c", "#9a9a9a"


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.0f} µs"


def _nice_step(top: float) -> float:
    """A round byte step (1, 2 or 5 times a power of 1024 times a power of
    ten) that divides [0, top] into at most six intervals."""
    for unit in (1, 1024, 1024 ** 2, 1024 ** 3, 1024 ** 4):
        for m in (1, 2, 5, 10, 20, 50, 100, 200, 500):
            if top / (m * unit) <= 6:
                return float(m * unit)
    return top / 5


def _colors(results: Sequence[ScopeResult]) -> dict:
    """One color per scope name, in order of first opening, so repeated
    calls of a scope look alike."""
    colors: dict = {}
    for r in sorted(results, key=lambda r: r.id):
        colors.setdefault(r.name, PALETTE[len(colors) % len(PALETTE)])
    return colors


def _scope_tip(r: ScopeResult) -> str:
    return (f"{r.name} (depth {r.depth}{', raised ' + r.exception if r.exception else ''})\n"
            f"time {_fmt_time(r.duration_s)}\n"
            f"allocated {format_bytes(r.before.allocated)} -> {format_bytes(r.after.allocated)}"
            f" (net {format_bytes(r.net_change)})\n"
            f"peak {format_bytes(r.peak_allocated)} (+{format_bytes(r.peak_above_start)}), "
            f"self peak +{format_bytes(r.self_peak_above_start)}\n"
            f"allocated {format_bytes(r.bytes_allocated)} in {r.allocations} blocks, "
            f"freed {format_bytes(r.bytes_freed)} in {r.frees}\n"
            f"reserved peak {format_bytes(r.peak_reserved)}")


def _svg(results: Sequence[ScopeResult], samples: Sequence[MemorySample]) -> str:
    times = [s.timestamp for s in samples] + [t for r in results
                                              for t in (r.before.timestamp, r.after.timestamp)]
    if not times:
        return "<p>No samples: nothing was profiled.</p>"
    t0, t1 = min(times), max(times)
    span = max(t1 - t0, 1e-6)
    top_bytes = max([s.reserved for s in samples] + [s.allocated for s in samples] +
                    [r.peak_reserved for r in results] + [r.peak_allocated for r in results] + [1])
    top_bytes *= 1.05
    step = _nice_step(top_bytes)
    top_bytes = step * -(-top_bytes // step)  # round up to a whole step
    color_of = _colors(results)
    plot_w = WIDTH - LEFT - RIGHT
    depth = max([r.depth for r in results] + [-1]) + 1
    height = TOP + CHART_HEIGHT + 30 + depth * (LANE_HEIGHT + LANE_GAP) + 20

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * plot_w

    def y(b: float) -> float:
        return TOP + CHART_HEIGHT - b / top_bytes * CHART_HEIGHT

    out: List[str] = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
                      f'font-family="sans-serif" font-size="11">']
    # Outermost scopes shade the chart so its lines can be read against them.
    for r in results:
        if r.depth == 0:
            color = color_of[r.name]
            out.append(f'<rect x="{x(r.before.timestamp):.1f}" y="{TOP}" '
                       f'width="{max(x(r.after.timestamp) - x(r.before.timestamp), 1):.1f}" '
                       f'height="{CHART_HEIGHT}" fill="{color}" opacity="0.07"/>')
    for i in range(int(round(top_bytes / step)) + 1):  # y axis: round levels
        b = step * i
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(b):.1f}" y2="{y(b):.1f}" '
                   f'stroke="#e3e3e3"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(b) + 4:.1f}" text-anchor="end">'
                   f'{_esc(format_bytes(b).replace(".00 ", " "))}</text>')
    for i in range(6):  # x axis: time since the first sample
        t = span * i / 5
        anchor = "start" if i == 0 else "end" if i == 5 else "middle"
        out.append(f'<text x="{x(t0 + t):.1f}" y="{TOP + CHART_HEIGHT + 16}" '
                   f'text-anchor="{anchor}">{_esc(_fmt_time(t))}</text>')
    for attr, color, label in (("reserved", RESERVED_COLOR, "reserved"),
                               ("allocated", ALLOCATED_COLOR, "allocated")):
        points = []
        for s in samples:  # a step line: each level holds until the next sample
            if points:
                points.append(f"{x(s.timestamp):.1f},{points[-1].split(',')[1]}")
            points.append(f"{x(s.timestamp):.1f},{y(getattr(s, attr)):.1f}")
        if points:
            out.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{color}" '
                       f'stroke-width="2"><title>{label}</title></polyline>')
    for r in results:  # exact peaks over each scope's span
        color = color_of[r.name]
        x0, x1 = x(r.before.timestamp), max(x(r.after.timestamp), x(r.before.timestamp) + 2)
        out.append(f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y(r.peak_allocated):.1f}" '
                   f'y2="{y(r.peak_allocated):.1f}" stroke="{color}" stroke-width="2" '
                   f'stroke-dasharray="5,3"><title>{_esc(_scope_tip(r))}</title></line>')
    lanes_top = TOP + CHART_HEIGHT + 30
    for r in results:  # scope bands, one lane per depth
        color = color_of[r.name]
        x0 = x(r.before.timestamp)
        w = max(x(r.after.timestamp) - x0, 1.5)
        ly = lanes_top + r.depth * (LANE_HEIGHT + LANE_GAP)
        stroke = ' stroke="#d00" stroke-width="2"' if r.exception else ""
        out.append(f'<g><title>{_esc(_scope_tip(r))}</title>'
                   f'<rect x="{x0:.1f}" y="{ly}" width="{w:.1f}" height="{LANE_HEIGHT}" '
                   f'fill="{color}" opacity="0.85"{stroke}/>')
        if w > 6.5 * len(r.name) + 8:
            out.append(f'<text x="{x0 + 4:.1f}" y="{ly + 15}" fill="white">{_esc(r.name)}</text>')
        out.append("</g>")
    legend_y = TOP - 14
    out.append(f'<line x1="{LEFT}" x2="{LEFT + 24}" y1="{legend_y}" y2="{legend_y}" '
               f'stroke="{ALLOCATED_COLOR}" stroke-width="2"/>'
               f'<text x="{LEFT + 30}" y="{legend_y + 4}">allocated (samples)</text>'
               f'<line x1="{LEFT + 160}" x2="{LEFT + 184}" y1="{legend_y}" y2="{legend_y}" '
               f'stroke="{RESERVED_COLOR}" stroke-width="2"/>'
               f'<text x="{LEFT + 190}" y="{legend_y + 4}">reserved (samples)</text>'
               f'<line x1="{LEFT + 320}" x2="{LEFT + 344}" y1="{legend_y}" y2="{legend_y}" '
               f'stroke="#555" stroke-width="2" stroke-dasharray="5,3"/>'
               f'<text x="{LEFT + 350}" y="{legend_y + 4}">exact peak allocated while a scope '
               f'was open</text>')
    out.append("</svg>")
    return "\n".join(out)


def _table(results: Sequence[ScopeResult]) -> str:
    head = ("scope", "time", "allocated before", "after", "peak", "peak above start",
            "self peak above start", "bytes allocated", "bytes freed", "net", "blocks +/-",
            "reserved peak")
    rows = ["<tr>" + "".join(f"<th>{_esc(h)}</th>" for h in head) + "</tr>"]
    for r in sorted(results, key=lambda r: r.id):  # opening order: parents before children
        cells = [f'<td style="padding-left:{8 + 16 * r.depth}px">{_esc(r.name)}'
                 f'{" <b>raised</b>" if r.exception else ""}</td>',
                 f"<td>{_esc(_fmt_time(r.duration_s))}</td>"]
        cells += [f"<td>{_esc(format_bytes(v))}</td>" for v in (
            r.before.allocated, r.after.allocated, r.peak_allocated, r.peak_above_start,
            r.self_peak_above_start, r.bytes_allocated, r.bytes_freed, r.net_change)]
        cells.append(f"<td>{r.allocations} / {r.frees}</td>")
        cells.append(f"<td>{_esc(format_bytes(r.peak_reserved))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "<table>" + "\n".join(rows) + "</table>"


def write_html(path: str, title: str, device: int, exact: bool,
               results: Sequence[ScopeResult], samples: Sequence[MemorySample]) -> None:
    note = ("Peaks are exact (kept by cachealloc's allocator)." if exact else
            "Peaks come from PyTorch's peak resets at scope boundaries and are not exact.")
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 16px; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; }}
th, td {{ border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }}
th {{ background: #f3f3f3; }} td:first-child, th:first-child {{ text-align: left; }}
</style></head><body>
<h2>{_esc(title)}</h2>
<p>Device {device}: {len(results)} scopes, {len(samples)} samples. {_esc(note)}
Hover a band or a dashed peak for its numbers.</p>
{_svg(results, samples)}
{_table(results)}
</body></html>
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
