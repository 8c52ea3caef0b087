"""The run's one HTML page: the answer first (which rank peaks, and the
config advised for the worst ranks), then a row per rank. Self-contained
(no script, no external files); about 1 KB per rank, so 512 ranks stay far
under 5 MB."""
from __future__ import annotations

import html
from typing import List, Optional

SITES_SHOWN = 3


def gib(n) -> str:
    return "—" if n is None else f"{n / 2**30:.2f} GiB"


def headline(ranks: List[dict], advice: Optional[dict]) -> List[str]:
    """The answer, in sentences (the page's and the terminal's first lines)."""
    top = max(ranks, key=lambda r: (r["peak_reserved"], r["peak_allocated"]))
    top_alloc = max(ranks, key=lambda r: r["peak_allocated"])
    lines = [f"Rank {top['rank']} peaks highest: {gib(top['peak_reserved'])} reserved "
             f"({top['peak_reserved']:,} B), {gib(top['peak_allocated'])} allocated, "
             f"of {len(ranks)} ranks."]
    if top_alloc["rank"] != top["rank"]:
        lines.append(f"Rank {top_alloc['rank']} allocates the most: "
                     f"{gib(top_alloc['peak_allocated'])} ({top_alloc['peak_allocated']:,} B).")
    low = min(r["peak_reserved"] for r in ranks)
    lines.append(f"Spread of peak reserved across ranks: {top['peak_reserved'] - low:,} B.")
    if advice and "recommendation" in advice:
        conf = advice["recommendation"] or "(the defaults)"
        lines.append(f"Advised PYTORCH_CUDA_ALLOC_CONF={conf}: the {len(advice['ranks'])} highest "
                     f"ranks all run in {gib(advice['worst_min_memory'])} "
                     f"(worst: rank {advice['worst_rank']}).")
    elif advice:
        lines.append(f"Advisor: {advice.get('skipped', 'not run')}.")
    return lines


_STYLE = ("body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;vertical-align:top}"
          "td.n{text-align:right}tr.top{background:#fee}.answer{font-size:1.15em}")


def render(ranks: List[dict], advice: Optional[dict], title: str) -> str:
    top_rank = max(ranks, key=lambda r: (r["peak_reserved"], r["peak_allocated"]))["rank"]
    advised = set(advice.get("ranks", [])) if advice else set()
    out = [f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>",
           f"<style>{_STYLE}</style><h1>{html.escape(title)}</h1><div class=answer>"]
    out += [f"<p>{html.escape(line)}</p>" for line in headline(ranks, advice)]
    out.append("</div><table><tr><th>rank</th><th>peak reserved</th><th>peak allocated</th>"
               "<th>allocated peak at</th><th>largest live blocks at the peak, by site</th>"
               "<th>advised on</th></tr>")
    for r in ranks:
        when = "—" if r.get("peak_time_us") is None else \
            f"event {r['peak_event']:,} of {r['events']:,}, t={r['peak_time_us']:,} µs"
        sites = "<br>".join(f"{gib(s['bytes'])} {html.escape(s['site'])}"
                            for s in r.get("sites_at_peak", [])[:SITES_SHOWN])
        cls = " class=top" if r["rank"] == top_rank else ""
        out.append(f"<tr{cls}><td>{r['rank']}</td><td class=n>{r['peak_reserved']:,}</td>"
                   f"<td class=n>{r['peak_allocated']:,}</td><td>{when}</td><td>{sites}</td>"
                   f"<td>{'yes' if r['rank'] in advised else ''}</td></tr>")
    out.append("</table>")
    return "\n".join(out)
