"""Rewrites the first_empty_cache marks of key_probe.py tables measured
before find_marks() (session 25's first probe run, which read them off
segment releases only): for each cudnn.benchmark key, the marks by the
find rule. In place.

    python3 benchmarks/zoo/remark_finds.py TABLE.json[.gz] [...]"""
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python", "cachealloc", "predict", "kernels"))
import key_probe  # noqa: E402  (by path: standard library only)

for path in sys.argv[1:]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        t = json.load(f)
    if t.get("conv_benchmark_empty_cache") is False:
        continue
    n = 0
    for key, e in t["entries"].items():
        if key_probe.parse_key(key)["flags"][0]:
            marks = key_probe.find_marks(e.get("first", e["workspaces"]), e["workspaces"])
            e.pop("first_empty_cache", None)
            if marks:
                e["first_empty_cache"] = marks
                n += 1
    t["remarked"] = "first_empty_cache by key_probe.find_marks (benchmarks/zoo/remark_finds.py)"
    with opener(path, "wt") as f:
        json.dump(t, f, indent=0, sort_keys=True)
    print(f"{path}: {n} keys marked")
