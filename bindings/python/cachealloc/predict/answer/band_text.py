"""The honest parts of an answer in words: figures with their band, the
band's origin, the ops' coverage, the unmodelled items, the torch versions,
a run shorter than asked, and an error with the script's own output."""
from __future__ import annotations

from typing import Optional

UNIT = 1 << 30
VERDICT_WORDS = {"fits": "FITS", "does_not_fit": "DOES NOT FIT",
                 "too_close_to_call": "TOO CLOSE TO CALL"}
OPS_SHOWN = 12          # ops named per coverage list (the JSON has them all)


def amount(n) -> str:
    """GiB with two decimals, MiB with one below a GiB (as report.size_text)."""
    return f"{n / UNIT:.2f} GiB" if n >= UNIT else f"{n / (1 << 20):.1f} MiB"


def with_band(value, band) -> str:
    """'12.34 ± 0.06 GiB', '12.34 +0.10/-0.06 GiB', or '12.34 +?/-0.06 GiB'
    (no bound on the high side); MiB (one decimal) below one GiB; the value
    alone when it has no band."""
    if value is None:
        return "-"
    unit, name, digits = (UNIT, "GiB", 2) if value >= UNIT else (1 << 20, "MiB", 1)

    def f(n):
        return f"{n / unit:.{digits}f}"
    if not band:
        return f"{f(value)} {name}"
    low, high = band
    if high == low:
        return f"{f(value)} ± {f(low)} {name}"
    return f"{f(value)} +{'?' if high is None else f(high)}/-{f(low)} {name}"


def band_line(a: dict) -> str:
    b = a["band"]
    by = b.get("set_by") or {}

    def origin(q):
        row = by.get(q)
        if not row:
            return "no measured row: the floor"
        at = " ".join(str(row[k]) for k in ("policy", "batch") if row.get(k) not in (None, "both"))
        return f"{row['workload']}{' ' + at if at else ''} {row[f'{q}_error_pct']:+.2f} %"
    na, nr = b.get("allocated_noise") or 0, b.get("reserved_noise") or 0
    own_need = bool(by.get("need"))   # the need banded from the GPU's largest-batch brackets

    def share(q, noise):
        return f"{b[q + '_pct']:.2f} %" if not (na or nr) else f"({b[q + '_pct']:.2f} % + {amount(noise)})"
    if own_need:
        quantities = (f"±{share('allocated', na)} of peak allocated, ±{share('reserved', nr)} of "
                      f"peak reserved, ±{share('need', b.get('need_noise') or 0)} of the need")
    else:
        quantities = (f"±{share('allocated', na)} of peak allocated, ±{share('reserved', nr)} of "
                      f"peak reserved and of the need")
    origins = f"allocated: {origin('allocated')}; reserved: {origin('reserved')}"
    if own_need:
        origins += (f"; need: peak reserved's share plus {b.get('need_own_pct', 0):.2f} % from "
                    f"{origin('need')}, the worst of {b.get('need_rows', '?')} GPU largest-batch "
                    "bracket(s) x 1.25")
    if not (na or nr):
        text = (f"Error band: {quantities}; step class {b['class']} ({b['why']}): the worst error "
                f"of its {b['rows']} tuning row(s) x 1.25, at least 0.5 % ({origins}; sources in --json)")
    else:  # band data with the GPU's own spread in bytes (tuning_errors.py --gpu-noise)
        text = (f"Error band: {quantities}; step class {b['class']} ({b['why']}): the worst error "
                f"of its {b['rows']} tuning row(s) beyond the GPU's own spread between processes, "
                f"x 1.25, at least 0.5 %, plus that spread ({origins}; sources in --json)")
    if b["items"]:
        text += f"; widened by {len(b['items'])} unmodelled item(s), listed below"
    names = {"peak_allocated": "peak allocated", "peak_reserved": "peak reserved",
             "min_memory": "the need"}
    for name, d in sorted((b.get("placement") or {}).items()):
        moved = ", ".join(_moved(names[q], v) for q, v in d.items() if _moved(names[q], v))
        others = "first fit" if "expandable" in name else "first fit, random orders"
        text += (f"; {name}: segments placed otherwise than top down ({others}) "
                 f"give {moved} (the band reaches them: the driver's placement is not modelled)")
    for name, lowest in sorted((b.get("reserved_reaches_down_to") or {}).items()):
        text += (f"; {name}: peak reserved's band reaches down to {amount(lowest)} (the missing "
                 "workspaces' bound, never below peak allocated: an unknown workspace moves "
                 "classic's segments either way)")
    return text


def _moved(name: str, d) -> str:
    """"peak reserved -92 MiB / +12 MiB" for a (down, up) spread (an old
    answer's single signed figure too); "" when neither side moved."""
    if not isinstance(d, (list, tuple)):
        return f"{name} {_signed(d)}" if d else ""
    parts = [_signed(v) for v in d if v]
    return f"{name} {' / '.join(parts)}" if parts else ""


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "-") + amount(abs(n))


def steps_line(a: dict) -> Optional[str]:
    """The first-lines note of a run shorter than asked."""
    rec = a.get("recording") or {}
    if rec.get("builder"):
        return None
    wanted, got = a.get("steps_requested"), a.get("steps")
    if got == 0 and a.get("no_optimizer_step"):
        return ("NOTE: no optimizer step (--no-optimizer-step): the script's whole run was "
                "recorded and predicted")
    if wanted and got is not None and got < wanted:
        return (f"NOTE: only {got} of the {wanted} optimizer steps asked for (--steps {wanted}) "
                "ran: the script ended first, and its whole run was predicted")
    return None


def coverage_lines(a: dict) -> list:
    cov = a.get("coverage") or {}
    names = {"gpu_checked": "GPU-checked (ran in a tuning step compared with the GPU)",
             "kernel_model": "kernel model from torch's CUDA source, not GPU-checked",
             "meta_only": "meta function alone (its outputs; unchecked)"}
    out = ["ops of the step on the fake device:"]
    for kind, what in names.items():
        ops = cov.get(kind) or {}
        listed = ", ".join(f"{op.replace('aten.', '').replace('.default', '')} x{n}"
                           for op, n in sorted(ops.items(), key=lambda x: -x[1])[:OPS_SHOWN])
        more = f", ... {len(ops) - OPS_SHOWN} more" if len(ops) > OPS_SHOWN else ""
        out.append(f"  {what}: {len(ops)} op(s), {sum(ops.values())} call(s)"
                   + (f": {listed}{more}" if ops else ""))
    items = (a.get("band") or {}).get("items") or []
    out.append("  known unmodelled: " + ("none" if not items else f"{len(items)} item(s)"))
    for it in items:
        low, high = it["need"]
        widen = "an unknown amount" if high is None else f"up to +{amount(high)}"
        if low:
            widen += f" / -{amount(low)}"
        example = f"; e.g. {it['example']}" if it.get("example") else ""
        out.append(f"    - {it['what']}: {it['calls']} call(s), the need widened by {widen} "
                   f"({it['detail']}{example})")
    return out


def torch_lines(a: dict) -> list:
    t = a.get("torch_versions") or {}
    if not t:
        return []
    if t.get("installed_checked"):
        checked = f"checked under this torch ({t.get('checked_source')})"
    else:
        checked = ("NOT checked under this torch: no tuning step was predicted with it and "
                   "compared with the GPU")
    out = [f"torch: the kernel models follow torch {t['assumed']} (the GPU's); installed here: "
           f"{t['installed']}, {checked}; mode that ran: {a.get('mode', 'fake')}"]
    if t.get("kernel_models_checked") or t.get("kernel_models_unchecked"):
        out.append(f"  kernel models used, checked for the installed torch: "
                   f"{', '.join(t['kernel_models_checked']) or 'none'}; unchecked: "
                   f"{', '.join(t['kernel_models_unchecked']) or 'none'}")
    return out


def failure_text(error: dict) -> str:
    """An error that stopped the prediction, with the script's output tail
    and the exceptions that went through its code."""
    lines = [f"cachealloc predict: the step could not be predicted ({error['kind']}): "
             f"{error['message']}"]
    if error.get("where"):
        lines.append(f"  at {error['where']}")
    for e in error.get("exceptions") or []:
        lines.append(f"  exception in the script's code: {e['type']}: {e['message']} "
                     f"(raised at {e['raised_at']}, passed through {e['seen_at']})")
    if error.get("output_tail"):
        lines += ["--- the end of the script's output ---", error["output_tail"].rstrip(),
                  "--- end ---"]
    return "\n".join(lines) + "\n"
