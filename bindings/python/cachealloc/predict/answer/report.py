"""Words an answer: text that leads with the answer and puts the settings
line on a line of its own (ready to copy). The HTML page is page.py."""
from __future__ import annotations

from ..kernels.cudnn_workspace import NON_CUDNN_CONV
from .band_text import (VERDICT_WORDS, amount, band_line, coverage_lines, steps_line,
                        torch_lines, with_band)


def gib(n) -> str:
    return "-" if n is None else f"{n / (1 << 30):.2f} GiB"


def size_text(n) -> str:
    """GiB, or MiB below one GiB (small steps would read 0.00 GiB)."""
    if n is not None and abs(n) < (1 << 30):
        return f"{n / (1 << 20):.1f} MiB"
    return gib(n)


def settings_block(line) -> list:
    if line is None:
        return []
    if line == "":
        return ["Use the defaults (no PYTORCH_CUDA_ALLOC_CONF needed). Line to use:", "",
                "unset PYTORCH_CUDA_ALLOC_CONF", ""]
    return ["Settings to use (copy the line below):", "", f"PYTORCH_CUDA_ALLOC_CONF={line}", ""]


def _head(a: dict, verdict: str) -> str:
    return (VERDICT_WORDS[verdict] + f" on {a['gpu']}")


def _limit_text(a: dict) -> str:
    return (f"the allocator can get {gib(a['limit'])} (total {gib(a['total_memory'])} - "
            f"{gib(a['context_bytes_assumed'])} assumed CUDA context"
            + (f", memory fraction {a['memory_fraction']:.4g} ({100 * a['memory_fraction']:.1f}%)"
               if a.get("memory_fraction") else "") + ")")


def _closest(a: dict):
    """(name, need, band) of the candidate with the smallest need."""
    cands = [(n, c["min_memory"], (c.get("band") or {}).get("min_memory"))
             for n, c in a["configs"].items()]
    if a.get("best"):
        cands.append((a["best"]["line"] or "defaults", a["best"]["min_memory"], a["best"]["band"]))
    cands = [c for c in cands if c[1] is not None]
    return min(cands, key=lambda c: c[1]) if cands else None


def first_lines(a: dict, head: str) -> list:
    """The answer, then what the reader must know before reading on: a run
    shorter than asked, the band, why a close call is one."""
    lines = [head]
    note = steps_line(a)
    if note:
        lines.append(note)
    if a["verdict"] == "too_close_to_call" and "configs" in a:
        c = _closest(a)
        if c:
            lines.append(f"The smallest need, {c[0] or 'defaults'}: {with_band(c[1], c[2])}, against "
                         f"a limit of {amount(a['limit'])}: the margin is within the band, so "
                         "neither 'fits' nor 'does not fit' can be said")
    lines.append(band_line(a))
    return lines + [""]


def fits_text(a: dict) -> str:
    head = _head(a, a["verdict"])
    if a.get("size") is not None:
        head += f" at size {a['size']}"
    lines = first_lines(a, head + ": " + _limit_text(a))
    if a["verdict"] == "too_close_to_call" and a.get("settings") is not None:
        lines.append("If you try it: without the band, these settings fit.")
    lines += settings_block(a.get("settings"))
    lines.append(f"{'config':12} {'peak allocated':>22} {'peak reserved':>22} {'needs (min)':>22}  verdict")
    for name, c in a["configs"].items():
        b = c.get("band") or {}
        lines.append(f"{name:12} {with_band(c['peak_allocated'], b.get('peak_allocated')):>22} "
                     f"{with_band(c['peak_reserved'], b.get('peak_reserved')):>22} "
                     f"{with_band(c['min_memory'], b.get('min_memory')):>22}  "
                     f"{VERDICT_WORDS[c['verdict']].lower()}")
    if a.get("best"):
        b = a["best"]
        why = f"; {b['why']}" if b.get("why") else ""
        lines.append(f"{'advisor best':12} {'':>22} {'':>22} {with_band(b['min_memory'], b['band']):>22}  "
                     f"{VERDICT_WORDS[b['verdict']].lower()}  ({b['line'] or 'defaults'}{why})")
        lines.append("")
        lines.append("How much each setting saves (advisor, smallest memory without OOM, smallest first):")
        for row in b["configs"][:8]:
            lines.append(f"  {gib(row['min_memory']):>10}  {row['line'] or 'defaults'}")
    lines += ["", f"recorded {a['recording']['allocations']} allocations in {a['steps']} step(s); "
              f"{a['recording']['item_placeholders']} .item() placeholder(s)"]
    lines += mode_lines(a)
    lines += notes(a)
    lines += coverage_lines(a)
    lines += torch_lines(a)
    lines.append("modelled:")
    lines += ["  " + m for m in a["modelled"]]
    lines.append(f"predicted in {a['seconds']:.1f} s; trace: {a['trace']}")
    return "\n".join(lines) + "\n"


MODE_WORDS = {"cpu-init": "cpu-init (CPU tensors real: the model's initialisation and the "
                          "script's CPU work ran as on your machine; only CUDA tensors fake)",
              "fake": "fake (every tensor fake: values read on the CPU side are placeholders)"}


def mode_lines(a: dict) -> list:
    """Which fake-device mode ran (device/cpu_side.py), and why it fell back."""
    mode = a.get("mode")
    if not mode:
        return []
    out = [f"mode: {MODE_WORDS.get(mode, mode)}"]
    rec = a.get("recording") or {}
    if rec.get("host_bytes_peak") is not None and mode == "cpu-init":
        out[0] += (f"; the CPU side held at most {size_text(rec['host_bytes_peak'])} of host memory "
                   f"(budget {size_text(rec['host_budget'])})")
    if a.get("mode_note"):
        out.append(f"note: {a['mode_note']}")
    if rec.get("init_redraw_checks"):
        out.append(f"note: {rec['init_redraw_checks']} redraw check(s) in torch.nn.init on CUDA "
                   "tensors answered 'no redraw', as on a GPU (docs/prediction.md)")
    return out


def notes(a: dict) -> list:
    """What this recording did that the reader should know: what the step
    holds at its optimizer steps, attention kernels chosen, RNNs,
    empty_cache (a run shorter than asked: band_text.steps_line, first)."""
    rec = a["recording"]
    out = []
    held = rec.get("at_optimizer_step")
    if held:
        peak = max(c["peak_allocated"] for c in a["configs"].values())
        out.append(f"held at an optimizer step: parameters {size_text(held['parameters'])} + "
                   f"gradients {size_text(held['gradients'])} + optimizer state "
                   f"{size_text(held['optimizer_state'])} = {size_text(held['total'])}; the rest of "
                   f"the peak allocated (activations, saved tensors, temporaries, workspaces) "
                   f"{size_text(peak - held['total'])}")
    for what, n in sorted((rec.get("attention_calls") or {}).items()):
        out.append(f"attention: {n} call(s) on {what}")
    for what, n in sorted((rec.get("unmodelled_calls") or {}).items()):
        if what == NON_CUDNN_CONV:
            out.append(f"NOT MODELLED: {n} call(s) of {what}: cuDNN is off, and torch's own "
                       "kernels' column buffers are not modelled (the band bounds them)")
            continue
        out.append(f"NOT MODELLED: {n} call(s) of {what}: a GPU runs each as one cuDNN call with a "
                   "workspace and reserve space cuDNN sizes; the fake run recorded the CPU build's "
                   "per-time-step ops instead (the prediction may be far off for this step)")
    if rec.get("empty_cache_calls"):
        out.append(f"note: torch.cuda.empty_cache() was called {rec['empty_cache_calls']} time(s): "
                   "replayed where the script called it (cached segments no block uses are released)")
    return out


def _size_text(n: int, at_least: bool) -> str:
    return f"at least {n} (the search stopped at --max)" if at_least else str(n)


def largest_text(a: dict) -> str:
    L, W, least = a["largest"], a["largest_within_band"], a["at_least"]
    n = a["largest_fitting"]
    if a["verdict"] == "fits":
        head = (f"LARGEST SIZE THAT FITS on {a['gpu']}: "
                f"{_size_text(n, least['classic'] or least['expandable'])}")
        if max(L["classic"], L["expandable"]) != n:
            head += f" within the band ({max(L['classic'], L['expandable'])} as predicted)"
    elif a["verdict"] == "does_not_fit":
        head = f"NO SIZE FITS on {a['gpu']}: the smallest size tried does not fit, band included"
    else:
        head = (f"TOO CLOSE TO CALL on {a['gpu']}: no size fits with its band "
                f"({max(L['classic'], L['expandable'])} fits as predicted)")
    lines = first_lines(a, head + f" (allocator limit {gib(a['limit'])}, "
                        f"{gib(a['context_bytes_assumed'])} assumed CUDA context)")
    lines += settings_block(a["settings"] if n else None)
    lines += mode_lines(a)
    lines.append("largest size, within the band (as predicted):")
    for name, label in (("classic", "classic (defaults):       "),
                        ("expandable", "expandable_segments:True: "),
                        ("physical", "physical limit (peak allocated fits):")):
        lines.append(f"  {label} {_size_text(W[name], least[name])} ({L[name]})")
    for name, sizes in sorted((a.get("passed_over_missing_keys") or {}).items()):
        lines.append(f"  {name}: {W[name]} has every convolution key measured and fits within its "
                     f"band; size(s) {', '.join(map(str, sizes))} below it have keys missing and "
                     "fail within their band only by those workspaces' bounds (not a failure for "
                     "certain; --cudnn-keys, then the key probe on the GPU, measures them)")
    lines.append(f"searched in {a['seconds']:.1f} s over {len(a['probes'])} probes; the band, ops "
                 f"and torch below are of size {a['shown_size']}")
    lines += cudnn_lines(a.get("cudnn") or {})
    lines += [m for m in a.get("modelled", []) if m.startswith("cuDNN plan fallbacks")]
    lines += coverage_lines(a)
    lines += torch_lines(a)
    return "\n".join(lines) + "\n"


def cudnn_lines(per_size: dict) -> list:
    """How the search's probes were covered by the cuDNN workspace table."""
    stats = [c for c in per_size.values() if c and (c["modelled_calls"] or c["not_modelled_calls"])]
    if not stats:
        return []
    missing = {s: c for s, c in per_size.items() if c and c["not_modelled_calls"]}
    lines = [f"cuDNN workspaces: {stats[0]['source']}"]
    if missing:
        example = next(iter(missing.values()))["not_modelled_example"]
        lines.append(f"  NOT MODELLED at size(s) {', '.join(missing)}: "
                     f"{sum(c['not_modelled_calls'] for c in missing.values())} convolution call(s) the "
                     f"table lacks got no workspace (e.g. {example})")
    return lines

