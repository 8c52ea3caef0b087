"""Checks the predictor's largest-batch answers on the GPU, at exactly the
sizes answered (issue 46: "the predicted largest batch trains on the GPU on
every row").

The truth's own search (record.py) closes on the first bracket L / L+1 it
finds and assumes the need grows with the size. Near the limit it does not
always (session 29: on an H200 under the H100 truth's byte limit,
EfficientNet-B2 classic trains at 96-97, fails at 98-101, trains at 103,
105 and 107; Swin-S expandable trains at 70, fails at 71, trains at 72 and
74, fails at 73 and 75). So "the answer is at most the GPU's largest" does
not show that the answer trains: this runs the answered size itself, in a
fresh process under the truth's limit in bytes (its fraction rescaled to
this card's total memory, so a card of another size enforces the same
limit), 3 steps as the truth.

    plan   --truth T --pred P [--pred P2 ...] [--half validation] [--above K] --out PLAN.json
           every (setup, config) of the preds: the answered size, the replay's
           largest, and K sizes above the truth's largest (where the need may come
           back under the limit); sizes the truth already probed are left out
    run    --plan PLAN.json [--plan ...] --out DIR [--jobs 8] [--deadline S]   (on the GPU)
           one fresh record_truth.py worker per entry, every plan's answers
           first, admitted while their limits plus 1 GiB of context each fit in
           90 % of the card (an entry that cannot fit alone is refused, named);
           a result with no outcome (timed out, crashed) is run again next time
    report --truth T --pred P [--pred P2 ...] [--half H] --results DIR [--results ...] [--md OUT]
           per prediction file: each answer trains (this run's probe, else the
           truth's), and the sizes that train above the truth's largest
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "predict"))

import record_truth as rt  # noqa: E402  (the truth's worker, its environment and its result)
from zoo.record import BUILDER, CTX  # noqa: E402  (the setups' builder file; a context's bytes)

CONFS = tuple(rt.CONFS)


def _rows(truth: dict, pred: dict, half):
    for s, P in sorted(pred["setups"].items()):
        T = truth["setups"].get(s)
        L = (P.get("largest") or {})
        if not T or (half and T.get("half") != half) or not L.get("largest_within_band"):
            continue
        yield s, T, L


def _probed(T: dict, conf: str) -> dict:
    """{size: ok} of the truth's own probes under its limit."""
    return {int(b): bool(r.get("ok")) for b, r in ((T.get("probes") or {}).get(conf) or {}).items()
            if str(b).isdigit()}


def plan(truth: dict, preds: list, half, above: int) -> list:
    seen, first, later = set(), [], []
    for pred in preds:
        for s, T, L in _rows(truth, pred, half):
            for conf in CONFS:
                done = _probed(T, conf)
                gpu = (T.get("largest") or {}).get(conf)
                wanted = [(L["largest_within_band"].get(conf), "answer", first),
                          (L["largest"].get(conf), "replay", later)]
                wanted += [((gpu or 0) + k, "above", later) for k in range(1, above + 1) if gpu]
                for b, why, queue in wanted:
                    if not b or b in done or (s, conf, b) in seen:
                        continue
                    seen.add((s, conf, b))
                    queue.append({"setup": s, "conf": conf, "batch": int(b), "why": why,
                                  "limit_bytes": int(T["limit_bytes"])})
    return first + later   # the answers first: a deadline cuts the scans


def run(entries: list, out: str, jobs: int, deadline: float) -> None:
    import torch
    total = torch.cuda.get_device_properties(0).total_memory
    os.makedirs(out, exist_ok=True)
    room = [int(0.9 * total)]
    cv = threading.Condition()
    stop = time.time() + deadline

    def one(e):
        path = os.path.join(out, f"{e['setup']}_{e['conf']}_b{e['batch']}.json")
        if os.path.exists(path) and json.load(open(path)).get("ok") is not None:
            return   # measured already (a result with no outcome runs again)
        need = e["limit_bytes"] + CTX
        tag = f"{e['setup']} {e['conf']} b{e['batch']} ({e['why']})"
        if need > int(0.9 * total):
            print(f"refused: {tag}: its limit plus a context exceeds 90 % of this card", flush=True)
            return
        with cv:
            while room[0] < need and time.time() < stop:
                cv.wait(5)
            if time.time() >= stop:
                print(f"not run, past the deadline: {tag}", flush=True)
                return
            room[0] -= need
        spec = {"workload": e["setup"], "builder": f"{BUILDER}:{e['setup']}", "batch": e["batch"],
                "conf": e["conf"], "fraction": e["limit_bytes"] / total, "steps": 3,
                "max_step_calls": 15}
        try:
            p = subprocess.run([sys.executable, rt.__file__, "worker", "--spec", json.dumps(spec)],
                               env=rt._job_env(spec), text=True, capture_output=True,
                               timeout=max(10, min(180, stop - time.time())))
            r = rt._job_result(spec, p.stdout, p.stderr, p.returncode, None)
        except subprocess.TimeoutExpired:
            r = {"ok": None, "error": "timed out"}
        finally:
            with cv:
                room[0] += need
                cv.notify_all()
        r = {"entry": e, "ok": r.get("ok"), "error": (r.get("oom") or r.get("error") or "")[:300],
             "max_memory_allocated": r.get("max_memory_allocated"),
             "max_memory_reserved": r.get("max_memory_reserved"), "device": r.get("device"),
             "device_total_memory": total, "torch": r.get("torch")}
        with open(path, "w") as f:
            json.dump(r, f, indent=1)
        print(f"[{deadline - (stop - time.time()):.0f} s] {tag}: "
              f"{'trains' if r['ok'] else 'OOM' if r['ok'] is False else 'no result'}", flush=True)

    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(one, entries))


def results(path: str) -> dict:
    out = {}
    for f in glob.glob(os.path.join(path, "*.json")):
        r = json.load(open(f))
        e = r["entry"]
        if r.get("ok") is not None:
            out[(e["setup"], e["conf"], e["batch"])] = bool(r["ok"])
    return out


def report(truth: dict, preds: list, names: list, got: dict, half) -> str:
    lines = []
    for name, pred in zip(names, preds):
        lines += [f"### {name}", "",
                  "| setup | config | GPU's largest (truth) | answer | answer trains | replay | "
                  "replay trains | sizes above the truth's largest that train |",
                  "|---|---|---|---|---|---|---|---|"]
        n = trains = within = unknown = 0
        for s, T, L in _rows(truth, pred, half):
            for conf in CONFS:
                known = dict(_probed(T, conf))
                known.update({b: ok for (s2, c2, b), ok in got.items() if s2 == s and c2 == conf})
                gpu = (T.get("largest") or {}).get(conf)
                a, r = L["largest_within_band"].get(conf), L["largest"].get(conf)
                ya = known.get(a)
                yr = known.get(r)
                up = sorted(b for b, ok in known.items() if ok and gpu and b > gpu)
                best = max([gpu or 0] + up)
                n += 1
                trains += ya is True
                unknown += ya is None
                within += bool(ya) and a >= best - 1
                word = {True: "yes", False: "**no**", None: "not probed"}
                lines.append(f"| {s} | {conf} | {gpu} | {a} | {word[ya]} | {r} | {word[yr]} | "
                             f"{', '.join(map(str, up)) or '-'} |")
        skipped = sorted(set(pred["setups"]) - {s for s, _, _ in _rows(truth, pred, half)})
        lines += ["", f"{n} answers: {trains} train on the GPU, {n - trains - unknown} do not, "
                      f"{unknown} not probed; {within} train and are at most 1 under the largest "
                      "size seen training (the truth's or above it)."
                  + (f" Not counted (no answer, or not in the truth's {half or 'any'} half): "
                     f"{', '.join(skipped)}." if skipped else ""), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--truth", required=True)
    p.add_argument("--pred", action="append", required=True)
    p.add_argument("--half")
    p.add_argument("--above", type=int, default=3)
    p.add_argument("--out", required=True)
    p = sub.add_parser("run")
    p.add_argument("--plan", action="append", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--deadline", type=float, default=400)
    p = sub.add_parser("report")
    p.add_argument("--truth", required=True)
    p.add_argument("--pred", action="append", required=True)
    p.add_argument("--half")
    p.add_argument("--results", action="append", required=True)
    p.add_argument("--md")
    a = ap.parse_args()
    if a.cmd == "plan":
        truth = json.load(open(a.truth))
        entries = plan(truth, [json.load(open(p)) for p in a.pred], a.half, a.above)
        with open(a.out, "w") as f:
            json.dump({"truth": a.truth, "preds": a.pred, "entries": entries}, f, indent=1)
        print(f"{a.out}: {len(entries)} probes ({sum(e['why'] == 'answer' for e in entries)} answers)")
    elif a.cmd == "run":
        entries = []
        for path in a.plan:
            entries += json.load(open(path))["entries"]
        answers = [e for e in entries if e["why"] == "answer"]
        run(answers + [e for e in entries if e["why"] != "answer"], a.out, a.jobs, a.deadline)
    else:
        truth = json.load(open(a.truth))
        got = {}
        for d in a.results:
            got.update(results(d))
        text = report(truth, [json.load(open(p)) for p in a.pred], a.pred, got, a.half)
        print(text)
        if a.md:
            with open(a.md, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
