"""How the cuDNN workspace bound (kernels/workspace_bound.py) holds on
convolutions it was not made from: for each key of a probe table (a
validation or holdout half's, benchmarks/predict/cudnn_probe.py --zoo),
the workspace measured on the GPU against the bound the predictor would
give it from the bundled tables alone (as for a model nobody probed), and
from the same convolution at the table's other batch sizes (as after a
user's probe at a few batches).

    PYTHONPATH=bindings/python python3 benchmarks/zoo/workspace_check.py PROBE.json [--md OUT]

Prints, per shape class, the keys, how many the bound covers (measured <=
bound), the largest measured / bound and the summed bound / summed
measured (how loose it is). Reads only the probe table's workspaces, never
a step's peaks."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
from cachealloc.predict.kernels import workspace_bound as wb  # noqa: E402
from cachealloc.predict.kernels import cudnn_workspace  # noqa: E402


def any_batch(key: str) -> str:
    """The key with its input's batch dimension replaced by '*'."""
    return re.sub(r"\|in=\d+,", "|in=*,", key, count=1)


def check(entries: dict, table_path: str = None) -> dict:
    """{class: {"keys", "covered", "worst", "measured", "bound", "misses"}}
    with the bound from the bundled tables, plus table_path's entries at
    other batches when given (the key itself excluded)."""
    out = {}
    for key, e in sorted(entries.items()):
        if e.get("unstable"):
            continue
        c = wb.shape_class(key)
        if c is None:
            continue
        if table_path:
            # the same convolution at the table's other batches only
            others = {k: v for k, v in entries.items()
                      if k != key and any_batch(k) == any_batch(key)}
            if not others:
                continue
            r = wb.MARGIN * max(wb.largest_workspace(v) / wb.op_bytes(k) for k, v in others.items())
            b = int(min(r, wb.ratios()[c[0]]) * wb.op_bytes(key) + 0.999)
        else:
            b = wb.bound(key)
        m = wb.largest_workspace(e)
        C = out.setdefault(" ".join(c), {"keys": 0, "covered": 0, "worst": 0.0, "measured": 0,
                                         "bound": 0, "misses": []})
        C["keys"] += 1
        C["covered"] += m <= b
        C["measured"] += m
        C["bound"] += b
        if b:
            C["worst"] = max(C["worst"], m / b)
        if m > b:
            C["misses"].append((key, m, b))
    return out


def table(res: dict, title: str) -> str:
    lines = [f"**{title}**", "", "| class | keys | bound covers | largest measured / bound | "
             "summed bound / summed measured |", "|---|---:|---:|---:|---:|"]
    for c, C in sorted(res.items()):
        loose = "—" if not C["measured"] else f"{C['bound'] / C['measured']:.1f}"
        lines.append(f"| {c} | {C['keys']} | {C['covered']} | {C['worst']:.2f} | {loose} |")
    tot = sum(C["keys"] for C in res.values())
    cov = sum(C["covered"] for C in res.values())
    lines += ["", f"{cov} of {tot} keys covered."]
    for C in res.values():
        for key, m, b in C["misses"][:3]:
            lines.append(f"- miss: `{key}`: measured {m:,} B, bound {b:,} B")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe")
    ap.add_argument("--md")
    args = ap.parse_args()
    entries = cudnn_workspace.load_table(args.probe)["entries"]
    os.environ.pop(cudnn_workspace.ENV, None)      # the bundled tables only
    text = (table(check(entries), f"{os.path.basename(args.probe)}: bound from the bundled "
                                  "tables (a model nobody probed)") + "\n\n"
            + table(check(entries, args.probe), "the same convolution at the probe's other "
                                                "batch (a rule tried on the tuning probes and not used: "
                                                "workspace_bound.py)") + "\n")
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
