"""A bound on the workspace of a cuDNN convolution the measured table lacks.

The table (kernels/cudnn_workspace.py) holds the workspaces cuDNN's
heuristics chose for the convolutions measured; a call it lacks gets no
workspace in the recording, so the true peak may be higher by what cuDNN
would have asked. The bound: the largest ratio, over every entry of the
bundled tables, of the entry's largest workspace to its op's bytes (input +
weight + output, as the key's shapes and dtype give them), taken per
direction (forward, backward), times the missing call's op bytes.

Measured (kernels/data/cudnn_H200_torch2.11*.json, 669 entries of ResNet-50
and ViT convolutions, fp32, batches 1-16): forward 1.95, backward 4.33
(a 1x1 backward of a (9, 2048, 7, 7) input: 37.7 MB for 8.7 MB of tensors).
RATIO_FLOOR keeps those figures (rounded down) when no table can be read. This is a bound
from the shapes measured so far, not a guarantee for shapes unlike them
(depthwise and grouped convolutions, other dtypes): docs/prediction.md says
so, and the zoo's probe runs turn such keys into table entries.
"""
from __future__ import annotations

import functools
import json
import math
from typing import Dict, Optional

from ..kernels.cudnn_workspace import DATA

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
RATIO_FLOOR = {"fwd": 1.9, "bwd": 4.3}


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


@functools.lru_cache(maxsize=1)
def ratios() -> Dict[str, float]:
    """Largest workspace / op bytes per direction over the bundled tables
    (at least RATIO_FLOOR)."""
    best = dict(RATIO_FLOOR)
    for path in sorted(DATA.glob("cudnn_*.json")):
        try:
            entries = json.loads(path.read_text()).get("entries") or {}
        except (OSError, ValueError):
            continue
        for key, e in entries.items():
            sizes = [b for _, b in (e.get("workspaces") or []) + (e.get("first") or [])]
            nbytes = op_bytes(key)
            if sizes and nbytes:
                kind = key.split("|", 1)[0]
                best[kind] = max(best.get(kind, 0.0), max(sizes) / nbytes)
    return best


def bound(key: str) -> Optional[int]:
    """Bytes a missing convolution's workspace is taken to be at most; None
    when the key does not parse (then no bound: the answer cannot say fits)."""
    nbytes = op_bytes(key)
    if nbytes is None:
        return None
    return int(math.ceil(ratios().get(key.split("|", 1)[0], max(RATIO_FLOOR.values())) * nbytes))
