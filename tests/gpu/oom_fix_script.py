"""The OOM fix without preparation (issue 46): a training step run under
`cachealloc run --oom-snapshot DIR` alone (no history, the program
unchanged) until it runs out of memory; the fix the message suggests is
then applied in a fresh process, which must train, reaching exactly the
peak reserved the what-if predicted at the request that had failed.

    python3 tests/gpu/oom_fix_script.py --out DIR [--batch 62] [--limit-gib 24]
                                        [--seq-len 256] [--steps 3] [--cpu]

On a GPU the step is a BERT-base masked-language-model step (built from
BertConfig, nothing downloaded; fp32, SDPA attention, AdamW), batch 62 under
a 24 GiB limit (set_per_process_memory_fraction), as in the issue. Without
a GPU (or with --cpu) the same pipeline runs on the simulated device, the
step being a recorded BERT-base run's requests (batch 16, sequence 512, an
H200: benchmarks/results/predict_unnamed_H200/history/bert_sdpa_classic_b16
.pickle.gz, 7,765 requests) made through cachealloc's own API under a
10.5 GiB limit (its defaults need 10.86 GiB, expandable segments 9.82 GiB).

What runs, each a fresh process through `python -m cachealloc.cli run`
with the switch hook installed (switch_env.py), the program never
importing cachealloc itself:
  A. the step under `--oom-snapshot DIR/oom` only: it must run out of
     memory, native's message followed by the diagnosis, whose what-if
     replays the flight recorder's request ring and suggests a
     PYTORCH_CUDA_ALLOC_CONF at a predicted peak P; the program's own
     torch.cuda.memory._snapshot() after the OOM shows no trace entry;
     `cachealloc explain` on the written snapshot gives the same figures.
     On a GPU, when batch B does not run out of memory, or no setting
     fits, the batch is searched (up to --tries runs) for one that runs
     out of memory with a fix.
  B. the step under `--conf SUGGESTION --oom-snapshot DIR/fixed`: it must
     train --steps steps; the peak reserved over its requests up to and
     including the one that failed in A (from its own request ring) must
     equal P to the byte.
Results: DIR/oom_fix.json and a summary; exit 0 when every check holds.
Time on one H100 with 16 cores: about 1-3 minutes (each run builds
BERT-base and runs its steps; more with a batch search). On a CPU:
about 20 s.

    python3 tests/gpu/oom_fix_script.py step ...   # the program (internal)
"""
import argparse
import gzip
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
GiB = 1 << 30
CPU_TRACE = ROOT / "benchmarks/results/predict_unnamed_H200/history/bert_sdpa_classic_b16.pickle.gz"
CPU_LIMIT = int(10.5 * GiB)
CPU_DEVICE = 80 * GiB  # the simulated device's bytes
WHATIF = re.compile(r"- what-if \((the recorded history|the flight recorder's request ring), "
                    r"(\d+) requests, replayed in (\d+) ms\): (.*)")
FITS = re.compile(r"with (\S+) this history peaks at [^(]+\((\d+) bytes\) and fits")
SUGGESTION = re.compile(r"Suggestion: PYTORCH_CUDA_ALLOC_CONF=(\S+)")


# --- the program (run under `cachealloc run`) -------------------------------

def ring_prefix(entries, allocations):
    """(peak reserved bytes, reserved now, allocations seen) over the trace
    entries up to and including the `allocations`-th "alloc" (all entries
    when None): reserved follows segment_alloc/segment_map minus
    segment_free/segment_unmap."""
    reserved = peak = seen = 0
    for e in entries:
        a = e["action"]
        if a in ("segment_alloc", "segment_map"):
            reserved += e["size"]
            peak = max(peak, reserved)
        elif a in ("segment_free", "segment_unmap"):
            reserved -= e["size"]
        elif a == "alloc":
            seen += 1
            if allocations is not None and seen == allocations:
                break
    return peak, reserved, seen


def bert_step(args, torch, out):
    """BERT-base MLM steps at args.batch; raises torch.OutOfMemoryError."""
    from transformers import BertConfig, BertForMaskedLM

    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(args.limit / total, 0)
    out["total_memory"] = total
    torch.manual_seed(0)
    config = BertConfig(attn_implementation="sdpa")
    model = BertForMaskedLM(config).to("cuda")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    generator = torch.Generator(device="cuda").manual_seed(1)
    out["losses"] = []
    try:
        for _ in range(args.steps):
            ids = torch.randint(1000, config.vocab_size, (args.batch, args.seq_len), device="cuda",
                                generator=generator)
            chosen = torch.rand(ids.shape, device="cuda", generator=generator) < 0.15
            labels = torch.where(chosen, ids, torch.full_like(ids, -100))
            loss = model(input_ids=ids.masked_fill(chosen, 103), attention_mask=torch.ones_like(ids),
                         labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            out["losses"].append(float(loss))
            del ids, chosen, labels, loss
        torch.cuda.synchronize()
    finally:
        opt.zero_grad(set_to_none=True)


def recorded_step(args, ca, out):
    """The recorded run's requests through cachealloc's own API (no CUDA):
    raises ca.OutOfMemoryError."""
    from cachealloc import plain_pickle

    ca.set_per_process_memory_fraction(args.limit / CPU_DEVICE, 0)
    out["total_memory"] = CPU_DEVICE
    trace = plain_pickle.loads(gzip.open(CPU_TRACE).read())["device_traces"][0]
    live = {}
    try:
        for _ in range(args.steps):
            for e in trace:
                if e["action"] == "alloc":
                    live[e["addr"]] = ca._malloc(e["size"], 0, e["stream"])
                elif e["action"] == "free_requested":
                    ca._free(live.pop(e["addr"]))
            out["losses"] = out.get("losses", []) + [0.0]  # a step done
    finally:
        for p in live.values():
            ca._free(p)


def step(args):
    import torch  # the switch hook installs cachealloc right after this import

    ca = sys.modules.get("cachealloc")
    out = {"batch": args.batch, "limit": args.limit, "cachealloc": ca is not None,
           "mode": ca.mode() if ca else None}
    oom_error = (torch.OutOfMemoryError,) + ((ca.OutOfMemoryError,) if ca else ())
    start = time.perf_counter()
    try:
        if args.cpu:
            recorded_step(args, ca, out)
        else:
            bert_step(args, torch, out)
        out["ok"] = True
    except oom_error as e:
        out["ok"] = False
        out["message"] = str(e)
        out["oom_seconds"] = round(time.perf_counter() - start, 3)
    stats = ca.memory_stats(0) if ca else torch.cuda.memory_stats(0)
    out["peak_reserved"] = stats.get("reserved_bytes.all.peak", 0)
    out["reserved_now"] = stats.get("reserved_bytes.all.current", 0)
    if ca is None:
        print(json.dumps(out))
        return
    # The program's own snapshot: history is off, so no trace entry, the
    # recorder's ring notwithstanding.
    snap = ca.snapshot() if args.cpu else torch.cuda.memory._snapshot()
    out["own_snapshot_trace_entries"] = sum(len(t) for t in snap["device_traces"])
    from cachealloc import oom_recorder

    rec = oom_recorder.recorder()
    out["snapshot"] = rec.last_path if rec else None
    if args.prefix_allocations is not None:
        ring = oom_recorder.request_rings()
        entries = ring["device_traces"][0]
        peak, reserved, seen = ring_prefix(entries, args.prefix_allocations)
        out["prefix"] = {"allocations": seen, "peak_reserved": peak, "ring_wrapped": ring["wrapped"][0]}
        # The ring's reserved bytes at its end agree with the statistics
        # (a check of ring_prefix's bookkeeping), when it holds the whole run.
        out["ring_reserved_now"] = ring_prefix(entries, None)[1]
    print(json.dumps(out))


# --- the driver ------------------------------------------------------------

def run_step(switch, run_options, args, batch, prefix_allocations=None, ring_mb=None):
    env, python = switch
    env = dict(env)
    if ring_mb:
        env["CACHEALLOC_OOM_RING_MB"] = str(ring_mb)
    if args.budget_ms:
        env["CACHEALLOC_OOM_BUDGET_MS"] = str(args.budget_ms)
    cmd = [python, "-m", "cachealloc.cli", "run", *run_options, "--", python, __file__, "step",
           "--batch", str(batch), "--seq-len", str(args.seq_len), "--steps", str(args.steps),
           "--limit", str(args.limit)] + (["--cpu"] if args.cpu else [])
    if prefix_allocations is not None:
        cmd += ["--prefix-allocations", str(prefix_allocations)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": f"rc {proc.returncode}: {proc.stderr[-3000:]}", "cmd": cmd}
    d = json.loads(lines[-1])
    d["wall_seconds"] = round(time.perf_counter() - start, 1)
    d["stderr_tail"] = proc.stderr[-1500:]
    return d


def whatif(message):
    """The diagnosis's what-if, parsed: source, requests, ms, suggestion,
    predicted peak (None where absent)."""
    m = next((WHATIF.match(l) for l in (message or "").split("\n") if WHATIF.match(l)), None)
    if not m:
        return None
    fits, sug = FITS.search(m.group(4)), SUGGESTION.search(m.group(4))
    return {"source": m.group(1), "requests": int(m.group(2)), "ms": int(m.group(3)),
            "verdict": m.group(4), "suggestion": sug.group(1) if sug else None,
            "fits_first": fits.group(1) if fits else None,
            "predicted_peak": int(fits.group(2)) if fits else None}


def allocations_before_oom(snapshot_path):
    """(alloc entries before the last "oom" entry of device 0's trace, +1
    for the failed request, the trace's source) of the written snapshot."""
    from cachealloc import plain_pickle

    with open(snapshot_path, "rb") as f:
        snap = plain_pickle.loads(f.read())
    trace = snap["device_traces"][0]
    last_oom = max(i for i, e in enumerate(trace) if e["action"] == "oom")
    source = (snap.get("cachealloc_request_ring") or {}).get("source", [None])[0]
    return sum(1 for e in trace[:last_oom] if e["action"] == "alloc") + 1, source


def explain(snapshot_path):
    from cachealloc.tool import tool_path

    p = subprocess.run([str(tool_path()), "explain", snapshot_path], capture_output=True, text=True,
                       timeout=600)
    return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-2000:]}


def find_oom_with_fix(switch, args, out_dir, r):
    """Run A, at args.batch and, on a GPU, nearby batches until one runs
    out of memory with a suggestion (up to args.tries runs). Returns the
    run, or the last one tried."""
    batch, low, high = args.batch, None, None  # low: trains; high: no setting fits
    tried = []
    for i in range(args.tries if not args.cpu else 1):
        a = run_step(switch, ["--oom-snapshot", str(out_dir / f"oom_b{batch}")] +
                     (["--backend", f"simulated:{CPU_DEVICE}"] if args.cpu else []), args, batch)
        w = whatif(a.get("message"))
        tried.append({"batch": batch, "ok": a.get("ok"), "error": a.get("error"),
                      "suggestion": w and w["suggestion"]})
        if "error" in a or (w and w["suggestion"]) or args.cpu:
            break
        if a.get("ok"):
            low = batch
            batch = batch * 2 if high is None else (batch + high) // 2
        else:
            high = batch
            batch = batch // 2 if low is None else (low + batch) // 2
        if batch in (low, high) or batch < 1:
            break
    r["batches_tried"] = tried
    return a


def run_all(args):
    from switch_env import switch_env

    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    switch = switch_env(tempfile.mkdtemp(prefix="switch_", dir=out_dir))
    r = {"mode": "cpu (simulated device, recorded BERT-base requests)" if args.cpu else
         "gpu (BERT-base MLM step)", "limit": args.limit, "seq_len": args.seq_len,
         "steps": args.steps}
    a = find_oom_with_fix(switch, args, out_dir, r)
    r["A"] = a
    w = whatif(a.get("message"))
    r["A_whatif"] = w
    if a.get("snapshot"):
        r["A_allocations_to_oom"], r["A_trace_source"] = allocations_before_oom(a["snapshot"])
        e = explain(a["snapshot"])
        r["A_explain_rc"] = e["rc"]
        r["A_explain_whatif"] = whatif(e["stdout"])
    if w and w["suggestion"] and r.get("A_allocations_to_oom"):
        # A ring of 64 MiB: the fresh run's whole step, not wrapped.
        r["B"] = run_step(switch, ["--conf", w["suggestion"], "--oom-snapshot", str(out_dir / "fixed")] +
                          (["--backend", f"simulated:{CPU_DEVICE}"] if args.cpu else []),
                          args, a["batch"], prefix_allocations=r["A_allocations_to_oom"], ring_mb=64)
    else:
        r["B"] = {"error": "no suggestion to apply"}
    (out_dir / "oom_fix.json").write_text(json.dumps(r, indent=1) + "\n")
    return r


def checks(r):
    """(name, passed, detail) for each claim."""
    a, b = r.get("A", {}), r.get("B", {})
    w, ew = r.get("A_whatif") or {}, r.get("A_explain_whatif") or {}
    prefix = b.get("prefix") or {}
    same = lambda x: {k: x.get(k) for k in ("source", "requests", "suggestion", "predicted_peak")}
    return [
        ("A runs out of memory under --oom-snapshot alone", a.get("ok") is False,
         a.get("error") or f"batches tried {r.get('batches_tried')}"),
        ("A: native's message comes first", (a.get("message") or "").startswith("CUDA out of memory."),
         (a.get("message") or "")[:200]),
        ("A: the what-if replays the flight recorder's request ring",
         w.get("source") == "the flight recorder's request ring", w.get("verdict")),
        ("A: the written snapshot's trace is the ring", r.get("A_trace_source") == "ring",
         r.get("A_trace_source")),
        ("A: a PYTORCH_CUDA_ALLOC_CONF is suggested, with its peak",
         bool(w.get("suggestion")) and w.get("predicted_peak") is not None
         and w.get("fits_first") == w.get("suggestion"), w.get("verdict")),
        ("A: the program's own _snapshot() has no trace entry", a.get("own_snapshot_trace_entries") == 0,
         a.get("own_snapshot_trace_entries")),
        ("A: `cachealloc explain` on the snapshot gives the same figures",
         r.get("A_explain_rc") == 0 and same(ew) == same(w), f"{same(ew)} vs {same(w)}"),
        ("B: the suggestion trains in a fresh process", b.get("ok") is True and
         len(b.get("losses") or []) == r.get("steps", len(b.get("losses") or [])) and
         len(b.get("losses") or []) > 0, b.get("error") or (b.get("message") or "")[:300]),
        ("B: its ring covers the failed request", prefix.get("allocations") == r.get("A_allocations_to_oom")
         and prefix.get("ring_wrapped") is False, prefix),
        ("B: its ring's reserved bytes agree with the statistics",
         b.get("ring_reserved_now") == b.get("reserved_now"),
         f"{b.get('ring_reserved_now')} vs {b.get('reserved_now')}"),
        ("B: peak reserved up to the failed request == the predicted peak, to the byte",
         prefix.get("peak_reserved") == w.get("predicted_peak") is not None,
         f"{prefix.get('peak_reserved')} vs predicted {w.get('predicted_peak')}"),
        ("B: its peak reserved stays within the limit", 0 < (b.get("peak_reserved") or 0) <= r["limit"],
         f"{b.get('peak_reserved')} vs {r['limit']}"),
    ]


def summary(r):
    lines = [f"OOM fix without preparation, {r['mode']}, limit {r['limit'] / GiB:.2f} GiB:"]
    for name, ok, detail in checks(r):
        lines.append(f"  [{'ok' if ok else 'FAIL'}] {name}" + ("" if ok or detail in (None, "") else
                                                                f" ({detail})"))
    a, b, w = r.get("A", {}), r.get("B", {}), r.get("A_whatif") or {}
    if a.get("message"):
        at = "" if r["mode"].startswith("cpu") else f" at batch {a.get('batch')}"
        lines.append(f"  A{at} (OOM after {a.get('oom_seconds')} s incl. the recorder; "
                     f"{a.get('wall_seconds')} s wall):")
        lines += ["    " + x for x in a["message"].split("\n")[1:]]
    if b.get("prefix"):
        lines.append(f"  B with {w.get('suggestion')}: {len(b.get('losses') or [])} steps, peak "
                     f"reserved {b.get('peak_reserved')} over the run, {b['prefix']['peak_reserved']} "
                     f"up to the failed request ({b['prefix']['allocations']} allocations); "
                     f"predicted {w.get('predicted_peak')}")
    return "\n".join(lines)


def has_gpu():
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def parse_args(argv):
    """The driver's options (see the top of the file), with the limit in
    bytes and the mode decided (CPU without a GPU)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="results folder (default: a new temporary one)")
    p.add_argument("--batch", type=int, default=62)
    p.add_argument("--limit-gib", type=float, default=None, help="default 24 (GPU), 10.5 (CPU)")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--tries", type=int, default=6, help="GPU: runs of the batch search at most")
    p.add_argument("--timeout", type=int, default=600, help="seconds per run")
    p.add_argument("--cpu", action="store_true", help="the simulated device, even with a GPU")
    p.add_argument("--budget-ms", type=int, default=None,
                   help="the in-process what-if's bound (CACHEALLOC_OOM_BUDGET_MS; default: the "
                        "recorder's 500 ms)")
    args = p.parse_args(argv)
    args.cpu = args.cpu or not has_gpu()
    if args.limit_gib is None:
        args.limit = CPU_LIMIT if args.cpu else 24 * GiB
    else:
        args.limit = int(args.limit_gib * GiB)
    if args.cpu:
        args.steps = 1  # one replay of the recorded run
    args.out = args.out or os.environ.get("OUT") or tempfile.mkdtemp(prefix="oom_fix_")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["step"]:
        p = argparse.ArgumentParser(prog="oom_fix_script.py step")
        p.add_argument("--batch", type=int, required=True)
        p.add_argument("--seq-len", type=int, required=True)
        p.add_argument("--steps", type=int, required=True)
        p.add_argument("--limit", type=int, required=True)
        p.add_argument("--cpu", action="store_true")
        p.add_argument("--prefix-allocations", type=int, default=None)
        step(p.parse_args(argv[1:]))
        return 0
    args = parse_args(argv)
    r = run_all(args)
    print(summary(r))
    return 0 if all(ok for _, ok, _ in checks(r)) else 1


if __name__ == "__main__":
    sys.exit(main())
