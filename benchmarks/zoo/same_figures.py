"""Compares two zoo prediction files (benchmarks/zoo/predict.py) figure by
figure: each (setup, batch, config) peak allocated, peak reserved and need,
and each largest-batch search's replay and answer. Prints how many are
equal and lists the others: the check that the CPU's torch (2.11 on the
GPU host, 2.13 here) does not change an answer.

    python3 benchmarks/zoo/same_figures.py A.json B.json [C.json ...]

Files after the first are read together (their setups merged: later files
win), so split prediction runs compare with one."""
import json
import sys


def figures(doc):
    out = {}
    for s, P in doc["setups"].items():
        for b, p in (P.get("fits") or {}).items():
            for c, row in ((p or {}).get("configs") or {}).items():
                for q in ("peak_allocated", "peak_reserved", "min_memory"):
                    if row.get(q) is not None:
                        out[(s, "peaks", b, c, q)] = row[q]
        L = P.get("largest") or {}
        for c, v in ((L.get("largest") or {}).items() if isinstance(L.get("largest"), dict) else []):
            out[(s, "largest", "replay", c, "")] = v
        for c, v in ((L.get("largest_within_band") or {}).items()
                     if isinstance(L.get("largest_within_band"), dict) else []):
            out[(s, "largest", "answer", c, "")] = v
    return out


def main():
    a = figures(json.load(open(sys.argv[1])))
    b = {}
    for path in sys.argv[2:]:
        b.update(figures(json.load(open(path))))
    common = sorted(set(a) & set(b))
    diff = [k for k in common if a[k] != b[k]]
    peaks = sum(1 for k in common if k[1] == "peaks")
    print(f"{len(common)} figures in both ({peaks} peak figures, {len(common) - peaks} largest-batch "
          f"figures): {len(common) - len(diff)} equal")
    for k in diff:
        print("  differs:", k, a[k], b[k])
    return 0 if not diff else 1


if __name__ == "__main__":
    sys.exit(main())
