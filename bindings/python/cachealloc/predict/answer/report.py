"""Words an answer: text that leads with the answer and puts the settings
line on a line of its own (ready to copy), and an HTML page doing the same."""
from __future__ import annotations

import html


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


def fits_text(a: dict) -> str:
    head = ("FITS" if a["fits"] else "DOES NOT FIT") + f" on {a['gpu']}"
    if a.get("size") is not None:
        head += f" at size {a['size']}"
    lines = [head + f": the allocator can get {gib(a['limit'])} "
             f"(total {gib(a['total_memory'])} - {gib(a['context_bytes_assumed'])} assumed CUDA context"
             + (f", memory fraction {a['memory_fraction']}" if a.get("memory_fraction") else "") + ")", ""]
    lines += settings_block(a.get("settings"))
    lines.append(f"{'config':12} {'peak allocated':>15} {'peak reserved':>14} {'needs (min)':>12}  fits")
    for name, c in a["configs"].items():
        lines.append(f"{name:12} {gib(c['peak_allocated']):>15} {gib(c['peak_reserved']):>14} "
                     f"{gib(c['min_memory']):>12}  {'yes' if c['fits'] else 'no'}")
    if a.get("best"):
        b = a["best"]
        lines.append(f"{'advisor best':12} {'':>15} {'':>14} {gib(b['min_memory']):>12}  "
                     f"{'yes' if b['min_memory'] is not None and b['min_memory'] <= a['limit'] else 'no'}"
                     f"  ({b['line'] or 'defaults'})")
        lines.append("")
        lines.append("How much each setting saves (advisor, smallest memory without OOM):")
        for row in b["configs"][:8]:
            lines.append(f"  {gib(row['min_memory']):>10}  {row['line'] or 'defaults'}")
    lines += ["", f"recorded {a['recording']['allocations']} allocations in {a['steps']} step(s); "
              f"{a['recording']['item_placeholders']} .item() placeholder(s)"]
    lines += mode_lines(a)
    lines += notes(a)
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
    """What this recording did that the reader should know: attention
    kernels chosen, a script that stopped early or never stepped."""
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
        out.append(f"NOT MODELLED: {n} call(s) of {what}: a GPU runs each as one cuDNN call with a "
                   "workspace and reserve space cuDNN sizes; the fake run recorded the CPU build's "
                   "per-time-step ops instead (the prediction may be far off for this step)")
    if rec.get("empty_cache_calls"):
        out.append(f"note: torch.cuda.empty_cache() was called {rec['empty_cache_calls']} time(s): "
                   "not replayed (cached segments are kept, so peak reserved may be over-predicted; "
                   "peak allocated is unaffected)")
    wanted = a.get("steps_requested")
    if wanted and a["steps"] < wanted and not rec.get("builder"):
        out.append(f"note: the script ended after {a['steps']} of the {wanted} optimizer step(s) "
                   "asked for: its whole run was recorded"
                   + (" (no optimizer.step() call was seen)" if a["steps"] == 0 else ""))
    return out


def largest_text(a: dict) -> str:
    L = a["largest"]
    lines = [f"LARGEST SIZE THAT FITS on {a['gpu']}: {a['largest_fitting']} "
             f"(allocator limit {gib(a['limit'])}, {gib(a['context_bytes_assumed'])} assumed CUDA context)", ""]
    lines += settings_block(a["settings"])
    lines += mode_lines(a)
    lines += [f"  classic (defaults):        {L['classic']}",
              f"  expandable_segments:True:  {L['expandable']}",
              f"  physical limit (peak allocated fits): {L['physical']}",
              f"searched in {a['seconds']:.1f} s over {len(a['probes'])} probes"]
    lines += cudnn_lines(a.get("cudnn") or {})
    lines += [m for m in a.get("modelled", []) if m.startswith("cuDNN plan fallbacks")]
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


def page(a: dict, text: str) -> str:
    answer = text.split("\n", 1)[0]
    ok = a.get("fits", a.get("largest_fitting", 0) > 0)
    color = "#1a7f37" if ok else "#cf222e"
    return ("<!doctype html><html><head><meta charset='utf-8'><title>cachealloc predict</title></head>"
            f"<body style='font-family:sans-serif;max-width:60em;margin:2em auto'>"
            f"<h1 style='color:{color}'>{html.escape(answer)}</h1>"
            f"<pre>{html.escape(text.split(chr(10), 1)[1] if chr(10) in text else '')}</pre></body></html>")
