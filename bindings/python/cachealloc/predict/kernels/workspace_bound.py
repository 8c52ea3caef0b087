"""A bound on the workspace of a cuDNN convolution the measured table lacks.

The table (kernels/cudnn_workspace.py) holds the workspaces cuDNN's
heuristics chose for the convolutions measured; a call it lacks gets no
workspace in the recording, so the true peak may be higher by what cuDNN
would have asked. The bound is a ratio times the missing call's op bytes
(input + weight + output, as the key's shapes and dtype give them), the
ratio read off every entry of the bundled tables and of the table the run
was given (--cudnn-table / CACHEALLOC_CUDNN_TABLE): largest workspace / op
bytes, by shape class:

1. its class: direction (fwd, bwd), kind of convolution (depthwise:
   one input channel per group; grouped; pointwise: 1x1 kernel; spatial;
   transposed, which cuDNN runs as the other direction: nothing measured,
   so the widest ratio of both directions),
   dtype and memory format: the class's largest ratio x MARGIN, when at
   least MIN_KEYS keys of the class were measured and one of them took a
   workspace of at least SCRATCH (a class measured at 0 bounds nothing:
   forward depthwise convolutions took none in the tuning probes, and up
   to 58 KB in the validation ones);
2. else its direction and kind of convolution, the same way;
3. else its direction's largest ratio in all tables (no margin: the
   largest measured anywhere; RATIO_FLOOR when no table can be read).

Session 35, from the bundled (tuning) tables, checked on every other probe table:

- Scratch: a class whose largest measured workspace is under SCRATCH
  bounds nothing, like one measured at 0 (next level): a few hundred bytes
  measured over large tensors give a ratio near 0 that says nothing of a
  larger plan's workspace. Before, forward spatial bfloat16 channels_last
  (8 keys: one took 131 bytes, seven none) bounded its keys at 4e-6 x
  their bytes, and forward pointwise float16 channels_last (30 keys, the
  largest 272 bytes) at 1.5e-5 x; over the validation and holdout probes
  77 of 316 and 36 of 2,633 such keys took more, up to 2e5 times the
  bound. Small workspaces still count in a class that also took a larger
  one (some grow with the batch: a 1 x 1 backward's 32 KiB at batch 2 is
  48 KiB at 3), so no class's ratio is lowered.
- Not a rule: the batch x weight bytes as the scale where a class's
  workspaces follow it. Every bfloat16 channels_last depthwise backward in
  the bundled tables takes 32 bytes per batch x weight element whatever
  its spatial size (on the tensors' scale they range 0.125-7.9, so holdout
  35's PVT-v2-B1 56 x 56 maps were bounded at 3 GiB where the H100 took
  9 MiB), but the same class in holdout 30's GhostNet probe takes up to
  128 bytes per element: bounded on that scale, 247 of its 644 keys
  would have been missed (up to 3.2 x). The tensors' scale stays.

A class bound never exceeds level 3's. Not used: the same convolution's
ratio at other batch sizes. cuDNN's heuristics switch plans with the batch
(a 1x1 backward with no workspace at batch 64 takes 8 MiB at 128), so on
the zoo's tuning probes that bound held for 215 of 264 keys only
(benchmarks/zoo/workspace_check.py). Measured before the zoo
(kernels/data/cudnn_H200_torch2.11*.json, 669 entries of ResNet-50 and ViT
convolutions, fp32, batches 1-16): forward 1.95, backward 4.33 (a 1x1
backward of a (9, 2048, 7, 7) input: 37.7 MB for 8.7 MB of tensors). The
zoo's tuning half adds depthwise and channels_last convolutions in 16-bit
dtypes (benchmarks/predict/cudnn_probe.py --zoo). These are bounds from
the shapes measured, not a guarantee for shapes unlike them:
docs/prediction.md gives how they held on the validation half's probes.
"""
from __future__ import annotations

import functools
import json
import math
import os
from typing import Dict, Optional

from .cudnn_workspace import DATA, ENV

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
RATIO_FLOOR = {"fwd": 1.9, "bwd": 4.3}
MARGIN = 1.25      # a class's bound: its largest measured ratio x this (the band's margin)
MIN_KEYS = 3       # keys a class needs measured before its own ratio is used
SCRATCH = 64 << 10  # bytes: a class whose largest workspace is below this sets no ratio


def parse_key(key: str) -> Optional[dict]:
    """The fields of a cudnn_key string, or None when it does not parse."""
    fields = key.split("|")
    out = {"kind": fields[0]}
    for f in fields[1:]:
        name, eq, value = f.partition("=")
        if eq:
            out[name] = value
        else:
            out["dtype"] = f
    need = ("in", "w", "s", "p", "d", "op", "g", "t", "dtype")
    if out["kind"] not in ("fwd", "bwd") or any(n not in out for n in need):
        return None
    return out


def op_bytes(key: str) -> Optional[int]:
    """Input + weight + output bytes of the convolution a key names."""
    k = parse_key(key)
    if k is None:
        return None
    try:
        ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
        inp, w = ints(k["in"]), ints(k["w"])
        s, p, d, op = ints(k["s"]), ints(k["p"]), ints(k["d"]), ints(k["op"])
        groups, transposed = int(k["g"]), k["t"] == "1"
        spatial, kernel = inp[2:], w[2:]
        if transposed:
            out_c = w[1] * groups
            out_sp = [(spatial[i] - 1) * s[i] - 2 * p[i] + d[i] * (kernel[i] - 1) + op[i] + 1
                      for i in range(len(spatial))]
        else:
            out_c = w[0]
            out_sp = [(spatial[i] + 2 * p[i] - d[i] * (kernel[i] - 1) - 1) // s[i] + 1
                      for i in range(len(spatial))]
    except (ValueError, IndexError, ZeroDivisionError):
        return None
    elem = _DTYPE_BYTES.get(k["dtype"], 4)
    return elem * (math.prod(inp) + math.prod(w) + math.prod([inp[0], out_c] + out_sp))


def largest_workspace(entry: dict) -> int:
    """A table entry's largest plan workspace, bytes (steady calls and the
    first call's; 0 for none). Not cudnn.benchmark's timing workspaces (the
    first call's workspace right before each first_empty_cache mark): those
    take what the largest plan asks, up to the free memory, and bound no
    plan that runs (a RegNetY-3.2GF fp32 key's is 4.8 GB)."""
    finds = {before - 1 for _, before in entry.get("first_empty_cache") or ()}
    first = [w for i, w in enumerate(entry.get("first") or []) if i not in finds]
    return max((b for _, b in (entry.get("workspaces") or []) + first), default=0)


def shape_class(key: str) -> Optional[tuple]:
    """(direction, kind of convolution, dtype, memory format) of a key."""
    k = parse_key(key)
    if k is None:
        return None
    try:
        w, groups = [int(v) for v in k["w"].split(",")], int(k["g"])
    except ValueError:
        return None
    if k["t"] == "1":
        # cuDNN runs a transposed forward as a backward-data call: its own
        # kind (nothing measured: the widest ratio of both directions).
        conv = "transposed"
    elif groups > 1:
        conv = "depthwise" if len(w) > 1 and w[1] == 1 else "grouped"
    else:
        conv = "pointwise" if all(n == 1 for n in w[2:]) else "spatial"
    return (k["kind"], conv, k["dtype"], k.get("fmt", "contiguous"))


def measured() -> Dict[tuple, tuple]:
    """{level key: (largest ratio, distinct keys)} over the bundled tables
    and the run's own (CACHEALLOC_CUDNN_TABLE), for the levels: the whole
    class (4 fields), (direction, kind of convolution), (direction,). A key measured
    in several tables counts once, with its largest ratio."""
    extra = (os.environ.get(ENV) or "").lstrip("+")    # "+PATH": that table and the bundled ones
    return _measured("" if extra.lower() == "none" else extra)


@functools.lru_cache(maxsize=4)
def _measured(extra: str) -> Dict[tuple, tuple]:
    per_key: Dict[str, float] = {}
    paths = sorted(DATA.glob("cudnn_*.json")) + ([extra] if extra else [])
    for path in paths:
        try:
            with open(path) as f:
                entries = json.load(f).get("entries") or {}
        except (OSError, ValueError, AttributeError):
            continue
        for key, e in entries.items():
            if not isinstance(e, dict) or e.get("unstable"):
                continue
            nbytes = op_bytes(key)
            if nbytes and shape_class(key):
                ws = largest_workspace(e)
                r, w = per_key.get(key, (0.0, 0))
                per_key[key] = (max(r, ws / nbytes), max(w, ws))
    out: Dict[tuple, tuple] = {}
    top_ws: Dict[tuple, int] = {}
    for key, (r, w) in per_key.items():
        c = shape_class(key)
        for level in (c, c[:2], c[:1]):
            best, n = out.get(level, (0.0, 0))
            out[level] = (max(best, r), n + 1)
            top_ws[level] = max(top_ws.get(level, 0), w)
    # A level that took only scratch sets no ratio (the module note).
    return {level: (r if top_ws[level] >= SCRATCH else 0.0, n) for level, (r, n) in out.items()}


def ratios() -> Dict[str, float]:
    """Largest workspace / op bytes per direction over the bundled tables
    (at least RATIO_FLOOR): level 3, the widest bound."""
    m = measured()
    return {d: max(RATIO_FLOOR[d], m.get((d,), (0.0, 0))[0]) for d in RATIO_FLOOR}


def ratio(key: str) -> tuple:
    """(ratio, the level it came from in words) for a missing key's bound."""
    c = shape_class(key)
    widest = ratios()
    if c is None or c[1] == "transposed":
        return max(widest.values()), "any convolution, both directions"
    top = widest.get(c[0], max(widest.values()))
    for level in (c, c[:2]):
        r, n = measured().get(level, (0.0, 0))
        # A class measured with no workspace at all, or with scratch only,
        # bounds nothing (its plans took none at those shapes; another
        # shape's may): next level.
        if n >= MIN_KEYS and r > 0:
            return min(top, MARGIN * r), " ".join(level) + f" ({n} keys measured)"
    return top, f"{c[0]}, all tables"


def bound(key: str) -> Optional[int]:
    """Bytes a missing convolution's workspace is taken to be at most; None
    when the key does not parse (then no bound: the answer cannot say fits)."""
    nbytes = op_bytes(key)
    if nbytes is None:
        return None
    return int(math.ceil(ratio(key)[0] * nbytes))
