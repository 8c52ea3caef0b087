"""Which ops' allocations the predictor gets right, measured on the GPU.

The predictor records a step on a fake CUDA device: each op's outputs from
its meta function, plus the hand-written kernel models (predict/kernels/).
Whether that equals what the CUDA kernel really asks of the caching
allocator is a question for the GPU. This probe answers it op by op, as
data, for any step:

    # on the GPU (torch 2.11), per builder FILE.py:FUNC and batch:
    python benchmarks/predict/op_probe.py gpu --builder benchmarks/zoo/setups.py:NAME \\
        --batch 8 --out DIR
    # on any CPU, with cachealloc built: the fake run of the same step, aligned
    # with the GPU's requests, and the per-op verdicts
    python benchmarks/predict/op_probe.py compare DIR/NAME_b8.json.gz --gpu H100-80GB \\
        --out DIR/NAME_b8_ops.json
    # all compared steps -> the table the predictor reads (op -> checked or not)
    python benchmarks/predict/op_probe.py table DIR/*_ops.json --out TABLE.json

Method on the GPU (exact, no timing): the allocator's own history (no
stacks) records every request; a TorchDispatchMode reads the allocator's
cumulative allocation and free counters before and after every aten op,
which slices the history into the requests each op made (requests between
ops, such as a tensor dropped by Python, belong to no op). Each request is
labelled with its op: name and input dtypes ("aten.mm.default float32").

Comparison: the GPU's request stream and the fake run's are aligned as
sequences of tokens ("a", bytes) for an allocation and ("f", bytes of the
block freed) for a free (difflib, no junk heuristic). A GPU request with no
partner in the fake run is MISSING from the prediction, a fake request with
none on the GPU is EXTRA; each is charged to the op label of its GPU
request (an extra one to the GPU op at its place in the alignment). An op
label whose every call on the GPU was aligned with no missing or extra
request is CHECKED on that GPU and torch; one with differences carries the
largest difference per call in bytes, which bounds what the prediction can
miss for it (the band widens by it, predict/answer/).
"""
from __future__ import annotations

import argparse
import collections
import difflib
import gzip
import importlib.util
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FORMAT = "cachealloc-op-probe/1"
TABLE_FORMAT = "cachealloc-op-check/1"


# --- GPU side -----------------------------------------------------------------------

def _load_builder(spec: str):
    path, _, func = spec.rpartition(":")
    mod_spec = importlib.util.spec_from_file_location("_op_probe_builder", path)
    mod = importlib.util.module_from_spec(mod_spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    mod_spec.loader.exec_module(mod)
    build = getattr(mod, func, None) or getattr(mod, "WORKLOADS", {}).get(func)
    if build is None:
        raise SystemExit(f"{path} has no function or WORKLOADS entry {func!r}")
    return build


def op_label(func, args, kwargs) -> str:
    """The op's name and the dtypes of its tensor inputs: the unit a verdict
    is kept for (shapes vary with the batch; dtypes and the op decide the
    kernel family)."""
    import torch
    dtypes = []

    def visit(x):
        if isinstance(x, torch.Tensor):
            d = str(x.dtype).replace("torch.", "")
            if d not in dtypes:
                dtypes.append(d)
        elif isinstance(x, (list, tuple)):
            for y in x:
                visit(y)
    for a in args:
        visit(a)
    for a in (kwargs or {}).values():
        visit(a)
    return f"{func} {','.join(dtypes) or '-'}"


def gpu_main(ns) -> None:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    def counters():
        s = torch._C._cuda_memoryStats(0)["allocation"]["all"]
        return int(s["allocated"]), int(s["freed"])

    class OpSlicer(TorchDispatchMode):
        """(label, counters before, counters after) of each op that made a
        request. Inside __torch_dispatch__ the mode is popped, so an op's
        own sub-ops are not sliced again: the slice is the whole op."""

        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = counters()
            out = func(*args, **(kwargs or {}))
            after = counters()
            if after != before:
                self.calls.append((op_label(func, args, kwargs), before, after))
            return out

    build = _load_builder(ns.builder)
    name = ns.name or ns.builder.rpartition(":")[2]
    torch.cuda.init()
    # History and slicing from before the model is built: the fake run
    # records the build too, so both streams start at the same place.
    base = counters()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=2_000_000)
    slicer = OpSlicer()
    t0 = time.time()
    with slicer:
        step = build(ns.batch)
        for _ in range(ns.steps):
            step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    if ns.snapshot:     # the whole history, for the lab (cachealloc compare)
        import pickle
        with gzip.open(ns.snapshot, "wb") as fh:
            pickle.dump(snap, fh)
    trace = snap["device_traces"][0]
    # Number the history's requests as the counters do, then label each.
    owner = {}
    for label, (a0, f0), (a1, f1) in slicer.calls:
        for n in range(a0, a1):
            owner[("a", n)] = label
        for n in range(f0, f1):
            owner[("f", n)] = label
    a, f = base
    reqs = []
    streams = []    # each request's CUDA stream (0: the default), beside `requests`
    sizes = {}
    for e in trace:
        if e["action"] == "alloc":
            sizes[e["addr"]] = e["size"]
            reqs.append(["a", e["size"], owner.get(("a", a))])
            a += 1
        elif e["action"] == "free_requested":
            reqs.append(["f", sizes.pop(e["addr"], 0), owner.get(("f", f))])
            f += 1
        else:
            continue
        streams.append(e.get("stream", 0))
    calls = collections.Counter(label for label, _, _ in slicer.calls)
    out = {"format": FORMAT, "name": name, "builder": ns.builder, "batch": ns.batch,
           "steps": ns.steps, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(),
           "device": torch.cuda.get_device_name(0),
           "capability": list(torch.cuda.get_device_capability(0)),
           "seconds": round(time.time() - t0, 2),
           "calls": dict(calls), "requests": reqs, "streams": streams,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
           "max_memory_allocated": torch.cuda.max_memory_allocated(),
           "max_memory_reserved": torch.cuda.max_memory_reserved()}
    os.makedirs(ns.out, exist_ok=True)
    path = os.path.join(ns.out, f"{name}_b{ns.batch}.json.gz")
    with gzip.open(path, "wt") as fh:
        json.dump(out, fh)
    print(f"op_probe: {name} b{ns.batch}: {len(reqs)} requests, {len(calls)} op labels, "
          f"{out['seconds']} s -> {path}", flush=True)


# --- CPU side: align with the fake run ----------------------------------------------

def _tokens_of_stream(stream):
    """("a", bytes) / ("f", bytes of the freed block) from request_stream()'s
    ("alloc", bytes) / ("free", n) form."""
    sizes, out = [], []
    for kind, v in stream:
        if kind == "alloc":
            sizes.append(v)
            out.append(("a", v))
        else:
            out.append(("f", sizes[v] if v is not None else 0))
    return out


def align(gpu_reqs, fake_tokens):
    """Per op label: GPU calls seen, requests missing from and extra in the
    fake run, and their bytes. gpu_reqs: [kind, bytes, label]."""
    gpu_tokens = [(k, b) for k, b, _ in gpu_reqs]
    # The GPU's history is read while the step is alive; the fake run ends
    # by dropping it: its closing frees have no GPU partner by design.
    def trailing_frees(tokens):
        n = 0
        while n < len(tokens) and tokens[len(tokens) - 1 - n][0] == "f":
            n += 1
        return n
    cut = trailing_frees(fake_tokens) - trailing_frees(gpu_tokens)
    if cut > 0:
        fake_tokens = fake_tokens[:len(fake_tokens) - cut]
    sm = difflib.SequenceMatcher(None, gpu_tokens, fake_tokens, autojunk=False)
    per = collections.defaultdict(lambda: {"missing": 0, "missing_bytes": 0,
                                           "extra": 0, "extra_bytes": 0})
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        for i in range(i1, i2):
            k, b, label = gpu_reqs[i]
            d = per[label or "(between ops)"]
            d["missing"] += 1
            d["missing_bytes"] += b if k == "a" else 0
        # A replaced run is charged to its first labelled GPU request; a pure
        # insertion to the GPU request before it (an op's extra requests
        # follow its own outputs in the fake run).
        if i2 > i1:
            label = next((gpu_reqs[i][2] for i in range(i1, i2) if gpu_reqs[i][2]), None)
        else:
            label = gpu_reqs[i1 - 1][2] if i1 > 0 else None
        for j in range(j1, j2):
            k, b = fake_tokens[j]
            d = per[label or "(between ops)"]
            d["extra"] += 1
            d["extra_bytes"] += b if k == "a" else 0
    return dict(per), sm.ratio()


def compare_main(ns) -> None:
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
    from cachealloc import predict
    from cachealloc.predict.request_stream import load_device_trace, request_stream
    with gzip.open(ns.probe, "rt") as fh:
        probe = json.load(fh)
    if probe.get("format") != FORMAT:
        raise SystemExit(f"{ns.probe}: not an op probe ({FORMAT})")
    gpu = predict.resolve_gpu(ns.gpu)
    builder = probe["builder"] if os.path.isabs(probe["builder"]) else \
        os.path.join(ROOT, probe["builder"])
    rec = predict.record(builder, gpu, size=probe["batch"], steps=probe["steps"])
    fake = _tokens_of_stream(request_stream(load_device_trace(rec.trace)))
    t0 = time.time()
    per, ratio = align(probe["requests"], fake)
    ops = {}
    for label, calls in probe["calls"].items():
        d = per.get(label, {})
        ops[label] = {"calls": calls, **{k: d.get(k, 0) for k in
                                         ("missing", "missing_bytes", "extra", "extra_bytes")}}
    if "(between ops)" in per:
        ops["(between ops)"] = {"calls": 0, **per["(between ops)"]}
    out = {"format": "cachealloc-op-compare/1", "name": probe["name"], "batch": probe["batch"],
           "gpu_torch": probe["torch"], "cpu_torch": rec.summary.get("torch"),
           "device": probe["device"], "capability": probe["capability"],
           "gpu_requests": len(probe["requests"]), "fake_requests": len(fake),
           "match_ratio": round(ratio, 6), "align_seconds": round(time.time() - t0, 2),
           "ops": ops}
    with open(ns.out, "w") as fh:
        json.dump(out, fh, indent=1, sort_keys=True)
    bad = {k: v for k, v in ops.items() if v["missing"] or v["extra"]}
    print(f"{probe['name']} b{probe['batch']}: {len(probe['requests'])} GPU requests, "
          f"{len(fake)} predicted, match {ratio:.4f}; {len(ops) - len(bad)} op labels checked, "
          f"{len(bad)} differ")
    for k, v in sorted(bad.items(), key=lambda kv: -(kv[1]["missing_bytes"] + kv[1]["extra_bytes"])):
        print(f"  {k}: {v['calls']} calls, missing {v['missing']} ({v['missing_bytes']} B), "
              f"extra {v['extra']} ({v['extra_bytes']} B)")


def table_main(ns) -> None:
    """Merges compared steps into the predictor's table: per op label, the
    steps it was seen in, its calls, and the largest per-call difference."""
    ops, steps, meta = {}, [], None
    for path in ns.compared:
        with open(path) as fh:
            c = json.load(fh)
        steps.append(f"{c['name']} b{c['batch']}")
        meta = meta or {k: c[k] for k in ("gpu_torch", "device", "capability")}
        for label, v in c["ops"].items():
            o = ops.setdefault(label, {"steps": 0, "calls": 0, "differing_steps": 0,
                                       "max_bytes_per_call": 0})
            o["steps"] += 1
            o["calls"] += v["calls"]
            diff = v["missing_bytes"] + v["extra_bytes"]
            if v["missing"] or v["extra"]:
                o["differing_steps"] += 1
                per_call = diff // max(1, v["calls"])
                o["max_bytes_per_call"] = max(o["max_bytes_per_call"], per_call)
    for o in ops.values():
        o["checked"] = o["differing_steps"] == 0
    out = {"format": TABLE_FORMAT, **(meta or {}), "steps": steps, "ops": ops}
    with open(ns.out, "w") as fh:
        json.dump(out, fh, indent=1, sort_keys=True)
    checked = sum(o["checked"] for o in ops.values())
    print(f"{len(steps)} steps, {len(ops)} op labels: {checked} checked, {len(ops) - checked} differ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gpu", help="on the GPU: label every request with its op")
    g.add_argument("--builder", required=True, help="FILE.py:FUNC (FUNC(batch) returns the step)")
    g.add_argument("--batch", type=int, required=True)
    g.add_argument("--steps", type=int, default=3)
    g.add_argument("--name")
    g.add_argument("--snapshot", help="also write the allocator snapshot (pickle.gz) here")
    g.add_argument("--out", required=True, help="folder for NAME_bBATCH.json.gz")
    c = sub.add_parser("compare", help="on a CPU: align one probe with the fake run")
    c.add_argument("probe")
    c.add_argument("--gpu", required=True, help="the target GPU name (predict's table)")
    c.add_argument("--out", required=True)
    t = sub.add_parser("table", help="merge compared steps into the op table")
    t.add_argument("compared", nargs="+")
    t.add_argument("--out", required=True)
    ns = ap.parse_args()
    {"gpu": gpu_main, "compare": compare_main, "table": table_main}[ns.cmd](ns)


if __name__ == "__main__":
    main()
