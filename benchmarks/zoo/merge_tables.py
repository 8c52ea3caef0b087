"""Merges cuDNN workspace tables of one GPU (key_probe.py or cudnn_probe.py
output) into one, for `cachealloc predict --cudnn-table` / the zoo's
CACHEALLOC_CUDNN_TABLE: the first table that has a key gives it.

    python3 benchmarks/zoo/merge_tables.py OUT.json T1.json[.gz] [T2.json ...]

Refuses tables of different GPUs (name and capability) or torch versions:
a merged table must say where every entry was measured."""
from __future__ import annotations

import gzip
import json
import sys


def merge(paths):
    out = None
    for p in paths:
        with (gzip.open(p, "rt") if p.endswith(".gz") else open(p)) as f:
            t = json.load(f)
        if out is None:
            out = dict(t, entries={}, source=f"merged from {len(paths)} tables", parts=[])
        elif (t["gpu"].get("name"), t["gpu"].get("capability"), t.get("torch")) != \
                (out["gpu"].get("name"), out["gpu"].get("capability"), out.get("torch")):
            raise SystemExit(f"{p}: measured on {t['gpu'].get('name')} with torch {t.get('torch')}, "
                             f"not {out['gpu'].get('name')} with torch {out.get('torch')}")
        added = {k: e for k, e in t["entries"].items() if k not in out["entries"]}
        out["entries"].update(added)
        out["parts"].append({"table": p, "source": t.get("source"), "keys": len(t["entries"]),
                             "added": len(added)})
    out.pop("sizes", None)
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    merged = merge(sys.argv[2:])
    with open(sys.argv[1], "w") as f:
        json.dump(merged, f, indent=0, sort_keys=True)
    print(f"wrote {sys.argv[1]}: {len(merged['entries'])} keys from {len(sys.argv) - 2} tables")
