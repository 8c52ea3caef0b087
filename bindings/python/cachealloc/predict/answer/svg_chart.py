"""Inline SVG charts for the predictor's page (page.py): an x-y plot of
bytes, and one horizontal bar of stacked parts. No script, no external
file, no font but the reader's sans-serif.

Each chart is drawn in a fixed coordinate box (viewBox) and scales to the
width of its container (width 100%), so a page never grows wider than the
window; text scales with it. Hover text comes from SVG <title> elements.
Values on the y axis are bytes, labelled in GiB (MiB when the largest
value is under one GiB).
"""
from __future__ import annotations

import html
import math
from typing import List, Optional, Sequence, Tuple

WIDTH = 960                                # viewBox units; about px at a 1280 px window
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 22, 40  # margins; labels of lines sit in RIGHT

# Okabe-Ito colours: told apart with common colour-vision deficiencies.
BLUE, ORANGE, GREEN, PINK = "#0072B2", "#E69F00", "#009E73", "#CC79A7"
SKY, VERMILLION, GREY, LIGHT = "#56B4E9", "#D55E00", "#8C8C8C", "#D9D9D9"


def esc(text) -> str:
    return html.escape(str(text), quote=True)


def byte_unit(top: float) -> Tuple[str, float]:
    return ("GiB", float(1 << 30)) if top >= (1 << 30) else ("MiB", float(1 << 20))


def nice_step(span: float, most: int = 6) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) dividing [0, span]
    into at most `most` intervals."""
    if span <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(span / most))
    for m in (1, 2, 2.5, 5, 10):
        if span / (m * power) <= most:
            return m * power
    return 10 * power


class Plot:
    """x (any numbers) against y (bytes), from 0 to the tops given."""

    def __init__(self, x_top: float, y_top: float, height: int = 300, x_label: str = "",
                 title: str = ""):
        self.unit, self.unit_bytes = byte_unit(y_top)
        self.y_step = nice_step(y_top / self.unit_bytes) * self.unit_bytes
        self.y_top = math.ceil(y_top / self.y_step - 1e-9) * self.y_step or self.y_step
        self.x_top = x_top if x_top > 0 else 1.0
        self.height, self.x_label, self.title = height, x_label, title
        self.plot_w = WIDTH - LEFT - RIGHT
        self.plot_h = height - TOP - BOTTOM
        self.parts: List[str] = []
        self.right_labels: List[Tuple[float, str, str]] = []  # (y, text, colour)

    def x(self, v: float) -> float:
        return LEFT + v / self.x_top * self.plot_w

    def y(self, b: float) -> float:
        return TOP + self.plot_h - min(b, self.y_top) / self.y_top * self.plot_h

    def bytes_text(self, b: float) -> str:
        digits = 2 if self.unit == "GiB" else 1
        return f"{b / self.unit_bytes:.{digits}f} {self.unit}"

    def axes(self, x_ticks: Sequence[float], x_text=lambda v: f"{v:g}") -> None:
        p = self.parts
        b = 0.0
        while b <= self.y_top + 1e-6:
            p.append(f'<line x1="{LEFT}" x2="{LEFT + self.plot_w}" y1="{self.y(b):.1f}" '
                     f'y2="{self.y(b):.1f}" stroke="#e6e6e6"/>')
            p.append(f'<text x="{LEFT - 6}" y="{self.y(b) + 4:.1f}" text-anchor="end">'
                     f'{b / self.unit_bytes:g}</text>')
            b += self.y_step
        p.append(f'<text x="{LEFT - 6}" y="{TOP - 10}" text-anchor="end" fill="#444">'
                 f'{self.unit}</text>')
        for v in x_ticks:
            p.append(f'<line x1="{self.x(v):.1f}" x2="{self.x(v):.1f}" y1="{TOP + self.plot_h}" '
                     f'y2="{TOP + self.plot_h + 4}" stroke="#777"/>')
            p.append(f'<text x="{self.x(v):.1f}" y="{TOP + self.plot_h + 16}" '
                     f'text-anchor="middle">{esc(x_text(v))}</text>')
        p.append(f'<line x1="{LEFT}" x2="{LEFT + self.plot_w}" y1="{TOP + self.plot_h}" '
                 f'y2="{TOP + self.plot_h}" stroke="#777"/>')
        if self.x_label:
            p.append(f'<text x="{LEFT + self.plot_w / 2:.1f}" y="{self.height - 6}" '
                     f'text-anchor="middle" fill="#444">{esc(self.x_label)}</text>')

    def line(self, points: Sequence[Tuple[float, float]], colour: str, dash: Optional[str] = None,
             width=2.0, tip: str = "", step=False) -> None:
        """A polyline through (x, bytes) points; dash: an SVG dash pattern
        ("6,4"); step: each level holds until the next point (a bucketed
        series)."""
        coords = []
        for i, (vx, vy) in enumerate(points):
            if step and i:
                coords.append(f"{self.x(vx):.1f},{self.y(points[i - 1][1]):.1f}")
            coords.append(f"{self.x(vx):.1f},{self.y(vy):.1f}")
        dashes = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<polyline points="{" ".join(coords)}" fill="none" stroke="{colour}" '
                          f'stroke-width="{width}"{dashes}>' + (f"<title>{esc(tip)}</title>" if tip
                                                              else "") + "</polyline>")

    def band(self, points: Sequence[Tuple[float, float, float]], colour: str, tip: str) -> None:
        """A shaded area between (x, low, high) points."""
        upper = [f"{self.x(vx):.1f},{self.y(hi):.1f}" for vx, _, hi in points]
        lower = [f"{self.x(vx):.1f},{self.y(lo):.1f}" for vx, lo, _ in reversed(points)]
        self.parts.append(f'<polygon points="{" ".join(upper + lower)}" fill="{colour}" '
                          f'fill-opacity="0.18" stroke="none"><title>{esc(tip)}</title></polygon>')

    def dot(self, vx: float, vy: float, colour: str, tip: str, r=4.0, ring=False) -> None:
        fill = "white" if ring else colour
        self.parts.append(f'<circle cx="{self.x(vx):.1f}" cy="{self.y(vy):.1f}" r="{r}" '
                          f'fill="{fill}" stroke="{colour}" stroke-width="2">'
                          f'<title>{esc(tip)}</title></circle>')

    def hline(self, b: float, colour: str, label: str, dashed=True) -> None:
        dash = ' stroke-dasharray="8,4"' if dashed else ""
        self.parts.append(f'<line x1="{LEFT}" x2="{LEFT + self.plot_w}" y1="{self.y(b):.1f}" '
                          f'y2="{self.y(b):.1f}" stroke="{colour}" stroke-width="2"{dash}>'
                          f'<title>{esc(label)}</title></line>')
        self.right_labels.append((self.y(b), label, colour))

    def vline(self, vx: float, colour: str, label: str, dotted=False) -> None:
        dash = ' stroke-dasharray="2,3"' if dotted else ""
        self.parts.append(f'<line x1="{self.x(vx):.1f}" x2="{self.x(vx):.1f}" y1="{TOP}" '
                          f'y2="{TOP + self.plot_h}" stroke="{colour}" stroke-width="1.5"{dash}/>')
        anchor = "end" if self.x(vx) > LEFT + self.plot_w - 60 else "start"
        shift = -4 if anchor == "end" else 4
        self.parts.append(f'<text x="{self.x(vx) + shift:.1f}" y="{TOP + 11}" fill="{colour}" '
                          f'text-anchor="{anchor}">{esc(label)}</text>')

    def label_right(self, b: float, text: str, colour: str) -> None:
        """A label in the right margin at the height of `b` (the end of a line)."""
        self.right_labels.append((self.y(b), text, colour))

    def svg(self) -> str:
        # Right-margin labels, pushed apart so that none overlaps another.
        placed: List[Tuple[float, str, str]] = []
        for y, text, colour in sorted(self.right_labels):
            if placed and y < placed[-1][0] + 13:
                y = placed[-1][0] + 13
            placed.append((y, text, colour))
        labels = [f'<text x="{LEFT + self.plot_w + 6}" y="{y + 4:.1f}" fill="{colour}">'
                  f'{esc(text)}</text>' for y, text, colour in placed]
        return svg_open(self.height, self.title) + "".join(self.parts + labels) + "</svg>"


def svg_open(height: int, title: str) -> str:
    # No xmlns: inline in HTML, the parser puts <svg> in the SVG namespace.
    return (f'<svg viewBox="0 0 {WIDTH} {height}" '
            f'width="100%" role="img" font-family="sans-serif" font-size="12">'
            + (f"<title>{esc(title)}</title>" if title else ""))


def stacked_bars(rows: Sequence[Tuple[str, Sequence[Tuple[str, float, str]], Optional[float]]],
                 top: float, marks: Sequence[Tuple[float, str, str]] = (), title: str = "",
                 text_of=lambda b: f"{b / (1 << 30):.2f} GiB") -> str:
    """One horizontal bar per row, (label, [(part, bytes, colour), ...],
    band), all to one scale whose right end is `top` bytes; band: None, or
    the half-width in bytes of an error band around the bar's end, drawn as
    a whisker. marks: vertical (bytes, label, colour) lines across every bar
    (the limit). A part's name is written inside it when it fits, and always
    in its hover text."""
    label_w, bar_h, gap, head = 210, 26, 12, 18
    plot_w = WIDTH - label_w - 150  # the right end holds the total (and band) text
    height = head + len(rows) * (bar_h + gap) + 4
    out = [svg_open(height, title)]

    def x(b: float) -> float:
        return label_w + min(b, top) / top * plot_w

    for i, (label, parts, band) in enumerate(rows):
        y = head + i * (bar_h + gap)
        out.append(f'<text x="{label_w - 8}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="end">'
                   f'{esc(label)}</text>')
        at = 0.0
        for name, b, colour in parts:
            if b <= 0:
                continue
            x0, x1 = x(at), x(at + b)
            out.append(f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 0.5):.1f}" '
                       f'height="{bar_h}" fill="{colour}"><title>{esc(name)}: '
                       f'{esc(text_of(b))}</title></rect>')
            if x1 - x0 > 7 * len(name) + 8:
                out.append(f'<text x="{x0 + 4:.1f}" y="{y + bar_h / 2 + 4:.1f}" fill="white" '
                           f'pointer-events="none">{esc(name)}</text>')
            at += b
        end = x(at)
        if band:
            lo, hi, mid = x(max(at - band, 0)), x(at + band), y + bar_h / 2
            out.append(f'<g stroke="#222" stroke-width="1.5"><title>band: {esc(text_of(at))} '
                       f'± {esc(text_of(band))}</title>'
                       f'<line x1="{lo:.1f}" x2="{hi:.1f}" y1="{mid:.1f}" y2="{mid:.1f}"/>'
                       f'<line x1="{lo:.1f}" x2="{lo:.1f}" y1="{mid - 6:.1f}" y2="{mid + 6:.1f}"/>'
                       f'<line x1="{hi:.1f}" x2="{hi:.1f}" y1="{mid - 6:.1f}" y2="{mid + 6:.1f}"/></g>')
            end = hi
        total = text_of(at) + (f" ± {text_of(band)}" if band else "")
        out.append(f'<text x="{end + 6:.1f}" y="{y + bar_h / 2 + 4:.1f}">{esc(total)}</text>')
    for b, label, colour in marks:
        out.append(f'<line x1="{x(b):.1f}" x2="{x(b):.1f}" y1="{head - 4}" y2="{height - 2}" '
                   f'stroke="{colour}" stroke-width="2" stroke-dasharray="8,4"/>')
        out.append(f'<text x="{x(b):.1f}" y="{head - 6}" text-anchor="middle" fill="{colour}">'
                   f'{esc(label)}</text>')
    return "".join(out) + "</svg>"
