"""The verdict each zoo row would get at its GPU memory limit, and whether
the GPU agrees (issue 46: "too close to call" on at most 10 % of rows, and
no wrong "fits").

For each setup and each batch whose peaks were measured, the limit is the
truth's memory fraction of the card (the one its largest-batch search ran
under), and the verdict is cachealloc predict's rule (answer/band.py judge:
a config fits when its need plus the band's high side is within the limit,
does not fit when its need minus the low side is over it; the answer fits
when some config fits, does not fit when every config does not, else too
close to call), from the stored predictions (each config's need and its
band are independent of the limit). The GPU's answer: the batch trains
under a config when it is at most that config's measured largest batch.

    python3 benchmarks/zoo/verdicts.py --truth T.json --pred P.json [--half validation] [--md OUT]

CPU only: no torch, no cachealloc build (it imports the answer's own rule,
answer/band.py, from bindings/python)."""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python"))
from cachealloc.predict.answer import band  # noqa: E402  (judge and combine: the answer's rule)


def rows(truth: dict, pred: dict, half: str | None):
    for name, T in sorted(truth["setups"].items()):
        if half and T.get("half") != half:
            continue
        P = (pred.get("setups") or {}).get(name) or {}
        largest = T.get("largest") or {}
        limit = T.get("limit_bytes")
        for batch, a in sorted((P.get("fits") or {}).items(), key=lambda kv: int(kv[0])):
            if not a or not a.get("configs") or limit is None:
                continue
            # The replay at the limit is taken to fit when the need does (the
            # need is the smallest memory without an OOM).
            per = {c: band.judge(v.get("min_memory"), v.get("min_memory") is not None
                                 and v["min_memory"] <= limit,
                                 (v.get("band") or {}).get("min_memory") or [0, 0], limit)
                   for c, v in a["configs"].items()}
            verdict = band.combine(per.values())
            trains = {c: largest.get(c) is not None and int(batch) <= largest[c] for c in per}
            if verdict == "fits":
                ok = any(trains[c] for c, v in per.items() if v == "fits")
            elif verdict == "does_not_fit":
                ok = not any(trains.values())
            else:
                ok = None
            yield {"setup": name, "batch": int(batch), "limit": limit, "verdict": verdict,
                   "per_config": per, "gpu_trains": trains, "right": ok,
                   "gpu_largest": largest}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", required=True)
    ap.add_argument("--pred", required=True)
    ap.add_argument("--half", default=None, help="tuning / validation (default: every setup)")
    ap.add_argument("--md", default=None)
    a = ap.parse_args()
    truth, pred = json.load(open(a.truth)), json.load(open(a.pred))
    R = list(rows(truth, pred, a.half))
    if not R:
        sys.exit("verdicts: no row has both a prediction and a truth limit")
    lines = ["| setup | batch | limit MiB | verdict (classic / expandable) | GPU trains (classic / expandable) | right |",
             "|---|---:|---:|---|---|---|"]
    for r in R:
        lines.append(f"| {r['setup']} | {r['batch']} | {r['limit'] / 2**20:,.0f} | {r['verdict']} "
                     f"({' / '.join(r['per_config'].values())}) | "
                     f"{' / '.join('yes' if v else 'no' for v in r['gpu_trains'].values())} | "
                     f"{'-' if r['right'] is None else 'yes' if r['right'] else '**NO**'} |")
    close = sum(r["verdict"] == "too_close_to_call" for r in R)
    wrong_fits = [r for r in R if r["verdict"] == "fits" and r["right"] is False]
    wrong_not = [r for r in R if r["verdict"] == "does_not_fit" and r["right"] is False]
    lines.append("")
    lines.append(f"{len(R)} rows: {sum(r['verdict'] == 'fits' for r in R)} fits, "
                 f"{sum(r['verdict'] == 'does_not_fit' for r in R)} does not fit, {close} too close to "
                 f"call ({100 * close / len(R):.0f} %); wrong 'fits': {len(wrong_fits)}; wrong "
                 f"'does not fit': {len(wrong_not)}.")
    text = "\n".join(lines)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
