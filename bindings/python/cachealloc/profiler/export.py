"""Profiler results as JSON and CSV files. Units as in results.py:
bytes, seconds, timestamps in seconds since the Unix epoch."""
from __future__ import annotations

import csv
import dataclasses
import json
from typing import Dict, List, Sequence

from .monitor import MemorySample
from .results import ScopeSnapshot, ScopeResult, ScopeSummary

FORMAT_VERSION = 1


def write_json(path: str, device: int, exact: bool, results: Sequence[ScopeResult],
               summary: Dict[str, ScopeSummary], samples: Sequence[MemorySample]) -> None:
    """{"format_version", "device", "exact", "results": [ScopeResult...],
    "summary": {name: ScopeSummary}, "samples": [MemorySample...]}."""
    doc = {
        "format_version": FORMAT_VERSION,
        "device": device,
        "exact": exact,
        "units": {"memory": "bytes", "time": "seconds", "timestamp": "seconds since the Unix epoch"},
        "results": [r.to_dict() for r in results],
        "summary": {name: dataclasses.asdict(s) for name, s in summary.items()},
        "samples": [dataclasses.asdict(s) for s in samples],
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


def csv_columns() -> List[str]:
    """ScopeResult's fields, with before/after snapshots flattened to
    before_allocated, after_cpu_rss, ... and the stack joined by " | "."""
    columns = []
    for f in dataclasses.fields(ScopeResult):
        if f.name in ("before", "after"):
            columns += [f"{f.name}_{g.name}" for g in dataclasses.fields(ScopeSnapshot)
                        if g.name not in ("name", "device")]
        else:
            columns.append(f.name)
    return columns


def _row(r: ScopeResult) -> dict:
    d = r.to_dict()
    for side in ("before", "after"):
        snap = d.pop(side)
        for k, v in snap.items():
            if k not in ("name", "device"):
                d[f"{side}_{k}"] = v
    if d["stack"] is not None:
        d["stack"] = " | ".join(d["stack"])
    return d


def write_csv(path: str, results: Sequence[ScopeResult]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=csv_columns())
        w.writeheader()
        for r in results:
            w.writerow(_row(r))
