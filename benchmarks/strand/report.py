"""The strand driver's results (strand.json, measure.py) as markdown tables:
largest size under the limit per allocator beside the physical limit, with
the verdict (does native's best strand memory, and does a policy of ours
close at least half the gap), peaks at the physical size, the advised
lines, and step-time ratios.

    python benchmarks/strand/report.py DIR/strand.json   # prints the tables
"""
from __future__ import annotations

import json
import sys

MiB = 1 << 20
STRAND_RESERVED = 1.05  # reserved / allocated at the limit that counts as stranded (issue 48)


def _kinds(res):
    pol = ["policy:" + p for p in res.get("meta", {}).get("policies", [])]
    return ["classic", "expandable", "advised"] + pol


def _largest(W, kind):
    v = ((W.get("kinds") or {}).get(kind) or {}).get("largest")
    return v.get("value") if v else None


def _size(v, conv=True):
    if v is None:
        return "–"
    return f"{v:,}" + ("" if conv else " ~")


def verdict(W):
    """(strands: bool | None, why), from native's best against physical."""
    phys = (W.get("physical") or {}).get("value")
    best = W.get("native_best")
    if phys is None or best is None:
        return None, "not measured"
    nb = _largest(W, best)
    at = (W["kinds"][best].get("at_largest") or {})
    ratio = (at.get("peak_reserved", 0) / at["peak_allocated"]) if at.get("peak_allocated") else None
    why = []
    if nb < phys:
        why.append(f"largest {nb:,} < physical {phys:,} ({100 * (phys - nb) / phys:.1f} % short)")
    if ratio is not None and ratio >= STRAND_RESERVED:
        why.append(f"reserves {ratio:.3f}x what it allocates at its largest")
    return bool(why), "; ".join(why) or f"reaches the physical limit, reserved {ratio or 0:.3f}x allocated"


def closes_half(W, kind):
    """A policy closes at least half of native's best's gap to physical."""
    phys, best = (W.get("physical") or {}).get("value"), W.get("native_best")
    pv = _largest(W, kind)
    if phys is None or best is None or pv is None:
        return None
    nb = _largest(W, best)
    if nb >= phys:
        return None
    return (pv - nb) >= 0.5 * (phys - nb)


def _peak(p):
    if not p:
        return "–"
    if p.get("outcome") != "ok":
        return p.get("outcome", "?").upper()
    a, r = p.get("peak_allocated", -1), p.get("peak_reserved", -1)
    if a <= 0:
        return f"{r / MiB:,.0f}"
    return f"{r / MiB:,.0f} / {a / MiB:,.0f} ({r / a:.3f}x)"


def markdown(res) -> str:
    meta = res.get("meta", {})
    kinds = _kinds(res)
    names = {k: k.replace("policy:", "") for k in kinds}
    lim = meta.get("limit", 0)
    out = [f"# Strand suite: {meta.get('device', '?')}, limit {lim / (1 << 30):.2f} GiB",
           "",
           f"torch {meta.get('torch', '?')}; {meta.get('elapsed_s', 0):.0f} s; "
           f"{meta.get('processes', '?')} probe processes"
           + ("" if meta.get("done") else "; **incomplete (cut off or still running)**"),
           "",
           "## Largest size under the limit (one fresh process per probe)",
           "",
           "Physical: the largest size whose peak allocated fits the limit. `~`: the search "
           "stopped before reaching its resolution. Native's best: of classic, expandable and "
           "advised, the largest (then the lower peak reserved).",
           "",
           "| workload | unit | physical | " + " | ".join(names[k] for k in kinds)
           + " | native's best | strands? | policies closing half the gap |",
           "|---|---|---:|" + "---:|" * len(kinds) + "---|---|---|"]
    for name, W in res.get("workloads", {}).items():
        phys = W.get("physical") or {}
        cells = []
        for k in kinds:
            v = ((W.get("kinds") or {}).get(k) or {})
            lg = v.get("largest") or {}
            cells.append(_size(lg.get("value"), lg.get("converged", True)) + (
                f" (= {v['same_as']})" if v.get("same_as") else ""))
        s, why = verdict(W)
        if W.get("note") or W.get("error"):
            why = f"{why}: {W.get('note') or W.get('error')}"
        closing = [names[k] for k in kinds if k.startswith("policy:") and closes_half(W, k)]
        out.append(f"| {name} | {W.get('unit', '')} | {_size(phys.get('value'), phys.get('converged', True))}"
                   f" | " + " | ".join(cells) + f" | {W.get('native_best') or '–'} | "
                   f"{'**yes**: ' if s else ('no: ' if s is False else '')}{why} | "
                   f"{', '.join(closing) or '–'} |")
    out += ["", "## Peak reserved / allocated (MiB) at the physical size",
            "",
            "Under the limit (OOM: that size does not run), then with a cap of 2x the limit "
            "(\"open\").",
            "",
            "| workload | " + " | ".join(f"{names[k]} (limit)" for k in kinds) + " | "
            + " | ".join(f"{names[k]} (open)" for k in kinds) + " |",
            "|---|" + "---:|" * (2 * len(kinds))]
    for name, W in res.get("workloads", {}).items():
        K = W.get("kinds") or {}
        out.append(f"| {name} | " + " | ".join(_peak((K.get(k) or {}).get("at_physical")) for k in kinds)
                   + " | " + " | ".join(_peak((K.get(k) or {}).get("open")) for k in kinds) + " |")
    out += ["", "## Advise's line per workload (its own trace, the limit, the device's memory)", ""]
    for name, W in res.get("workloads", {}).items():
        adv = W.get("advise") or {}
        line = adv.get("recommendation")
        text = (f"`{line or '(defaults)'}`: {adv.get('headline') or ''}" if line is not None
                else (adv.get("error") or adv.get("skipped") or "–"))
        tr = W.get("trace") or {}
        out.append(f"- {name}: {text} (trace: {tr.get('events', '–')} events)")
    T = res.get("timing") or {}
    if T:
        out += ["", "## Step time, ratio to native (per-round ratios: median [min–max], rounds)", "",
                "Each round runs the same steps in one persistent process per allocator, under the "
                "limit, at 95 % of the largest size all of them run.", "",
                "| workload | size | " + " | ".join(names[k] for k in kinds) + " |",
                "|---|---:|" + "---:|" * len(kinds)]
        for name, t in T.items():
            if "ratios" not in t:
                out.append(f"| {name} | – | " + (t.get("skipped") or t.get("error") or "–") + " |")
                continue
            W = res["workloads"].get(name, {})
            cells = []
            for k in kinds:
                r = t["ratios"].get(k) or {}
                c = r.get("vs_native_best") or r.get("vs_classic")
                if not c:
                    cells.append("–")
                    continue
                mark = "" if r.get("vs_native_best") else " vs classic"
                cells.append(f"{c['median']:.3f} [{c['min']:.3f}–{c['max']:.3f}] ({c['n']}){mark}")
            out.append(f"| {name} (vs {W.get('native_best') or 'classic'}) | {t['size']:,} | "
                       + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: report.py STRAND_JSON")
    print(markdown(json.loads(open(sys.argv[1]).read())))
