"""Measures, on a GPU, the cuDNN workspaces of convolutions named by their
table keys (cudnn_key.py), one call at a time: a new model's table without
running its step on the GPU.

    python -m cachealloc.predict.kernels.key_probe KEYS.json --out TABLE.json
    cachealloc predict --cudnn-table TABLE.json ...

This file imports only the standard library and torch, so it also runs by
path (python .../key_probe.py) where cachealloc's native library is not
built.

KEYS.json is what `cachealloc predict --cudnn-keys KEYS.json` writes on any
CPU: {"format": KEYS_FORMAT, "sizes": {size: [key, ...]}}, each size's keys
in the order the step first called them.

Why per key: a workspace depends only on the call (shapes, strides, dtype,
flags) and the GPU, cuDNN and torch, so each key is rebuilt from its string
(random tensors of its shapes and memory format) and run alone. The probe
needs the memory of one convolution, not of the step: a batch that does not
fit the GPU as a whole step can still be probed.

Why in order, one process per size: under cudnn.benchmark the first call of
a convolution in a process times cuDNN's plans in a workspace as large as
the largest plan asks (torch's Conv_v8 find path), empties the allocator's
cache (torch's conv_benchmark_empty_cache, on by default) and then runs the
fastest plan; later calls run that plan. cuDNN's plan cache is per process
and two keys can share an entry, so each size's keys run in the order the
step made them, in a fresh process, as in the step.

Method (as benchmarks/predict/cudnn_probe.py, exact): the caching
allocator's history (no stacks) of each call; an allocation whose own free
is the very next request is a workspace, every other allocation is the
op's own; a workspace's position is how many own allocations came before
it. A segment release inside the first call is the find's empty cache: its
place is recorded as [position, workspaces before it] ("first_empty_cache").
Before each first call one fully free cached segment is made, so that the
empty cache, when torch makes one, always releases something and shows.
"""
from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import sys
import time
from typing import Dict, List, Optional, Tuple

KEYS_FORMAT = "cachealloc-cudnn-keys/1"
TABLE_FORMAT = "cachealloc-cudnn-workspaces/1"
MAX_KEYS = 200_000          # a keys file larger than this is refused (memory bound)
SIZES_PER_PROCESS = 12      # sizes a process probes when no key runs under cudnn.benchmark
MAX_BYTES = 256 << 20       # a keys file's text larger than this is refused


class KeyError_(ValueError):
    """A key string that cannot be rebuilt into a call (the key named)."""


def parse_key(key: str) -> dict:
    """The fields of a table key (cudnn_key.py's format) as Python values."""
    parts = key.split("|")
    if len(parts) != 13 or parts[0] not in ("fwd", "bwd"):
        raise KeyError_(f"cuDNN key {key!r}: expected 13 '|'-separated fields starting fwd/bwd")
    try:
        kv = {}
        for p in parts[1:9] + parts[10:]:
            name, _, value = p.partition("=")
            kv[name] = value
        ints = lambda s: [int(x) for x in s.split(",")] if s else []  # noqa: E731
        out = {"kind": parts[0], "input": ints(kv["in"]), "weight": ints(kv["w"]),
               "stride": ints(kv["s"]), "padding": ints(kv["p"]), "dilation": ints(kv["d"]),
               "output_padding": ints(kv["op"]), "groups": int(kv["g"]),
               "transposed": kv["t"] == "1", "dtype": parts[9], "fmt": kv["fmt"],
               "flags": [int(x) for x in kv["flags"].split(",")]}
        if parts[0] == "fwd":
            out["bias"] = kv["bias"] == "1"
        else:
            out["mask"] = [c == "1" for c in kv["mask"]]
    except (KeyError, ValueError) as e:
        raise KeyError_(f"cuDNN key {key!r}: {e}") from None
    if len(out["flags"]) != 3 or (out["kind"] == "bwd" and len(out["mask"]) != 3):
        raise KeyError_(f"cuDNN key {key!r}: flags need 3 digits, mask 3")
    if not (3 <= len(out["input"]) <= 5) or len(out["weight"]) != len(out["input"]):
        raise KeyError_(f"cuDNN key {key!r}: input and weight need 3 to 5 dimensions alike")
    return out


def load_keys(path) -> Dict[str, List[str]]:
    """{size: [key, ...]} from a keys file, checked."""
    try:
        with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
            text = f.read(MAX_BYTES + 1)        # bounded, a gzip file's unpacked bytes too
        if len(text) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES} bytes")
        doc = json.loads(text)
    except (OSError, ValueError) as e:
        raise ValueError(f"cuDNN keys {path}: {e}") from None
    sizes = doc.get("sizes") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("format") != KEYS_FORMAT or not isinstance(sizes, dict):
        raise ValueError(f"cuDNN keys {path}: not a {KEYS_FORMAT} file with 'sizes'")
    n = 0
    for size, keys in sizes.items():
        if not size.isdigit():
            raise ValueError(f"cuDNN keys {path}: size {size!r} is not a whole number")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"cuDNN keys {path}: size {size}: not a list of key strings")
        for k in keys:
            parse_key(k)
        n += len(keys)
    if n > MAX_KEYS:
        raise ValueError(f"cuDNN keys {path}: {n} keys, more than {MAX_KEYS}")
    return sizes


# --- the history, sliced into one call's requests (shared with cudnn_probe.py) --------

def call_events(trace) -> list:
    """One call's history as ("a", addr, size) / ("f", addr, size) /
    ("s",) for a segment released (emptied cache), in order."""
    out = []
    for e in trace:
        act = e["action"]
        if act == "alloc":
            out.append(("a", e["addr"], e["size"]))
        elif act == "free_requested":
            out.append(("f", e["addr"], e["size"]))
        elif act in ("segment_free", "segment_unmap"):
            out.append(("s",))
    return out


def classify(events, bias_bytes: int = 0) -> Tuple[list, list, list]:
    """(workspaces [[position, bytes]], own allocation sizes, empty caches
    [[position, workspaces before]]) of one call's events (call_events, or
    (kind, addr, size, ...) tuples). With bias_bytes (a backward that
    computes grad_bias), everything from the last allocation of grad_bias's
    size on is that reduction's (its output, and the staging buffer and
    semaphores a split reduction takes and frees at once), not cuDNN's: the
    bias gradient is computed after cuDNN has run, and the predictor models
    the reduction itself."""
    end = len(events)
    if bias_bytes:
        kept = [i for i, e in enumerate(events) if e[0] == "a" and e[2] == bias_bytes]
        if kept:
            end = kept[-1]
    workspaces, own, empties = [], [], []
    i = 0
    while i < len(events):
        kind = events[i][0]
        if kind == "s":
            mark = [len(own), len(workspaces)]
            if not empties or empties[-1] != mark:    # one release run = one empty cache
                empties.append(mark)
            i += 1
            continue
        if i >= end:
            if kind == "a":
                own.append(events[i][2])
            i += 1
            continue
        if kind == "a":
            addr = events[i][1]
            nxt = events[i + 1] if i + 1 < len(events) else None
            if nxt is not None and nxt[0] == "f" and nxt[1] == addr:
                workspaces.append([len(own), events[i][2]])
                i += 2
                continue
            own.append(events[i][2])
        i += 1
    return workspaces, own, empties


def find_marks(first: list, steady: list) -> list:
    """[[position, workspaces before], ...]: where a cudnn.benchmark first
    call emptied the cache, by torch's find path (Conv_v8: each cuDNN op
    that misses the plan cache times its plans in one workspace, then
    empties the cache when conv_benchmark_empty_cache is on, then runs the
    chosen plan). The first call's workspaces that the later calls do not
    repeat, in order, are the timing ones; the cache is emptied right after
    each. A segment release in the history shows it only when some cached
    segment was wholly free then, so the history alone misses some (seen on
    the H100: 41 of 92 ResNet-50 keys showed one)."""
    # Matched from the end: each op's timing workspace comes before its own
    # plan's, so a timing workspace the size of its plan's is still the
    # first of the two.
    marks, j = [], len(steady) - 1
    for i in range(len(first) - 1, -1, -1):
        position, size = first[i]
        if j >= 0 and steady[j][1] == size:
            j -= 1                      # a plan's workspace, as later calls ask it
            continue
        marks.append([position, i + 1])
    return marks[::-1]


# --- rebuilding a call from its key (GPU side) ---------------------------------------

def _memory_format(torch, ndim: int):
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(ndim)


def _tensor(torch, shape, dtype, fmt: str, device):
    """A random tensor of `shape` in the key's memory format: channels_last,
    contiguous, or strided (neither: the last two dimensions transposed in
    memory, which torch copies to contiguous before cuDNN runs)."""
    if fmt == "strided" and len(shape) >= 3 and shape[-1] > 1 and shape[-2] > 1:
        t = torch.randn(*shape[:-2], shape[-1], shape[-2], device=device).to(dtype)
        return t.transpose(-1, -2)
    t = torch.randn(*shape, device=device).to(dtype)
    mf = _memory_format(torch, len(shape))
    if fmt == "channels_last" and mf is not None:
        t = t.contiguous(memory_format=mf)
    return t


def build_call(k: dict, device="cuda"):
    """(func, args) of the key's aten call, tensors on `device`."""
    import torch
    aten = torch.ops.aten
    dtype = getattr(torch, k["dtype"], None)
    if not isinstance(dtype, torch.dtype):
        raise KeyError_(f"dtype {k['dtype']!r} is not a torch dtype")
    # The weight follows the key's format only when it is channels_last
    # (torch runs cuDNN channels_last when input or weight suggests it).
    wfmt = "channels_last" if k["fmt"] == "channels_last" else "contiguous"
    inp = _tensor(torch, k["input"], dtype, k["fmt"], device)
    w = _tensor(torch, k["weight"], dtype, wfmt, device)
    out_channels = k["weight"][1] * k["groups"] if k["transposed"] else k["weight"][0]
    common = (k["stride"], k["padding"], k["dilation"], k["transposed"], k["output_padding"],
              k["groups"])
    if k["kind"] == "fwd":
        bias = torch.randn(out_channels, device=device).to(dtype) if k["bias"] else None
        return aten.convolution.default, (inp, w, bias, *common)
    # The output's shape and strides from the meta function, for grad_output.
    meta = aten.convolution.default(inp.to("meta"), w.to("meta"), None, *common)
    go = torch.empty_strided(meta.shape, meta.stride(), dtype=dtype, device=device).normal_()
    bias_sizes = [out_channels] if k["mask"][2] else None
    return aten.convolution_backward.default, (go, inp, w, bias_sizes, *common, k["mask"])


@functools.lru_cache(maxsize=1)
def _key_module():
    """cudnn_key.py, loaded by path once (this file keeps to the standard
    library and torch, and runs where the package is not built); None if it
    cannot be loaded."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cudnn_key.py")
    try:
        spec = importlib.util.spec_from_file_location("_cudnn_key_for_probe", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except (OSError, ImportError):
        return None
    return mod


def _rebuilt_key(func, args) -> Optional[str]:
    """The key of the call as rebuilt; None if cudnn_key.py cannot be loaded."""
    mod = _key_module()
    return None if mod is None else mod.conv_key(func, args)


def _set_flags(torch, flags) -> None:
    b = torch.backends.cudnn
    b.benchmark, b.deterministic, b.allow_tf32 = bool(flags[0]), bool(flags[1]), bool(flags[2])


def _one_call(torch, func, args, bias_bytes: int) -> Tuple[list, list, list]:
    """Runs func(*args) once under the allocator's history and classifies
    its requests."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=100_000, clear_history=True)
    out = func(*args)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    del out
    trace = snap["device_traces"][0] if snap["device_traces"] else []
    return classify(call_events(trace), bias_bytes)


def _free_segment(torch) -> None:
    """Leaves exactly one fully free cached segment (3 MiB asked: a 20 MiB
    large-pool segment of its own after the cache is emptied), so the find
    path's empty cache always releases one and shows in the history."""
    torch.cuda.empty_cache()
    x = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    del x


EMPTY_AFTER_FIND = True     # torch's conv_benchmark_empty_cache (read on the GPU)


def probe_keys(keys: List[str], calls: int = 2, log=None) -> Dict[str, dict]:
    """Table entries for keys, run in order in this process, each `calls`
    times (>= 2: the first call and the steady one)."""
    import torch
    global EMPTY_AFTER_FIND
    flag = getattr(torch._C, "_cuda_get_conv_benchmark_empty_cache", None)
    EMPTY_AFTER_FIND = True if flag is None else bool(flag())
    entries = {}
    for n, key in enumerate(keys):
        if key in entries:
            continue
        k = parse_key(key)
        _set_flags(torch, k["flags"])
        func, args = build_call(k)
        rebuilt = _rebuilt_key(func, args)
        if rebuilt is not None and rebuilt != key:
            # The tensors made cannot show the key's layout (a strided key
            # whose last dimensions are 1): not measured, so not claimed.
            entries[key] = {"workspaces": [], "unstable": True, "not_rebuilt": rebuilt}
            continue
        bias_bytes = 0
        if k["kind"] == "bwd" and k["mask"][2]:
            out_channels = k["weight"][1] * k["groups"] if k["transposed"] else k["weight"][0]
            bias_bytes = out_channels * args[0].element_size()
        results = []
        for c in range(max(2, calls)):
            if c == 0:
                _free_segment(torch)
            results.append(_one_call(torch, func, args, bias_bytes))
        del func, args
        steady = results[1:]
        e = {"workspaces": steady[-1][0], "own": len(steady[-1][1]), "calls": len(results)}
        if results[0][0] != steady[-1][0]:
            e["first"] = results[0][0]
        marks = results[0][2]
        if k["flags"][0] and EMPTY_AFTER_FIND:
            # The find rule's marks, and those the history showed where the
            # rule has none (a find whose plans need no workspace still
            # empties the cache): one per count of workspaces before it.
            by_before = {m[1]: m for m in marks}
            by_before.update({m[1]: m for m in find_marks(results[0][0], steady[-1][0])})
            marks = [by_before[b] for b in sorted(by_before)]
        if marks:
            e["first_empty_cache"] = marks
        if any(r[0] != steady[-1][0] for r in steady):
            e["unstable"] = True
        entries[key] = e
        if log is not None and (n + 1) % 50 == 0:
            print(f"  {n + 1}/{len(keys)} keys", file=log, flush=True)
    return entries


def gpu_header(torch, source: str) -> dict:
    p = torch.cuda.get_device_properties(0)
    return {"format": TABLE_FORMAT,
            "gpu": {"name": p.name, "capability": [p.major, p.minor],
                    "sms": p.multi_processor_count, "total_memory": p.total_memory},
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "source": source,
            "conv_benchmark_empty_cache": (lambda f: None if f is None else bool(f()))(
                getattr(torch._C, "_cuda_get_conv_benchmark_empty_cache", None)),
            "entries": {}}


def _child(keys_path: str, out_path: str, sizes: List[str]) -> None:
    """The sizes' keys in this (fresh) process, in order; entries to out_path."""
    import torch
    doc = load_keys(keys_path)
    entries = {}
    for size in sizes:
        for key, e in probe_keys(doc[size], log=sys.stderr).items():
            entries.setdefault(key, e)
    with open(out_path, "w") as f:
        json.dump({"entries": entries, "torch": torch.__version__}, f)


def _batches(sizes: Dict[str, List[str]]) -> List[List[str]]:
    """The sizes grouped into processes: one per size when any key runs
    under cudnn.benchmark (its first call's find depends on what the
    process ran before, as in the step's own process), else all in one
    (a heuristics plan depends on the call alone; keys of different sizes
    differ, so each key's first call is still its first)."""
    bench = any(parse_key(k)["flags"][0] for keys in sizes.values() for k in keys)
    if bench:
        return [[s] for s in sizes]
    names = list(sizes)        # chunks, so that a long run writes its table as it goes
    return [names[i:i + SIZES_PER_PROCESS] for i in range(0, len(names), SIZES_PER_PROCESS)]


def _write(table: dict, path: str) -> None:
    tmp_out = path + ".tmp"
    with open(tmp_out, "w") as f:
        json.dump(table, f, indent=0, sort_keys=True)
    os.replace(tmp_out, path)


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m cachealloc.predict.kernels.key_probe",
        description="Measure the cuDNN workspaces of the convolutions a prediction lacked "
                    "(`cachealloc predict --cudnn-keys KEYS.json`), on this GPU, one call at a "
                    "time; write a table for `cachealloc predict --cudnn-table`.")
    ap.add_argument("keys", help="KEYS.json from cachealloc predict --cudnn-keys")
    ap.add_argument("--out", required=True, help="the table to write (JSON)")
    ap.add_argument("--child", nargs="+", metavar="OUT SIZE", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.keys, args.child[0], args.child[1:])
        return 0
    import subprocess
    import tempfile
    import torch
    if not torch.cuda.is_available():
        print("key_probe: needs a CUDA GPU (the table is what cuDNN does on it)", file=sys.stderr)
        return 2
    try:
        sizes = load_keys(args.keys)
    except ValueError as e:
        print(f"key_probe: {e}", file=sys.stderr)
        return 2
    table = gpu_header(torch, "cachealloc.predict.kernels.key_probe " + os.path.basename(args.keys))
    table["sizes"] = {}
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for group in _batches(sizes):
            part = os.path.join(tmp, f"{group[0]}.json")
            # A fresh process: cuDNN's plan cache starts empty, as in the
            # step's own process.
            r = subprocess.run([sys.executable, os.path.abspath(__file__),
                                args.keys, "--out", args.out, "--child", part, *group])
            what = f"size {group[0]}" + (f" to {group[-1]} ({len(group)} sizes)" if len(group) > 1 else "")
            if r.returncode != 0:
                print(f"key_probe: {what}: the probe process failed (exit {r.returncode})",
                      file=sys.stderr)
                return 1
            with open(part) as f:
                got = json.load(f)["entries"]
            for key, e in got.items():
                table["entries"].setdefault(key, e)
            for size in group:
                table["sizes"][size] = len(sizes[size])
            print(f"{what}: {len(got)} keys, {sum(1 for e in got.values() if e['workspaces'])} "
                  f"with a workspace, {time.time() - t0:.1f} s", flush=True)
            table["seconds"] = round(time.time() - t0, 1)
            _write(table, args.out)          # a run cut short keeps what it measured
    _write(table, args.out)                  # also with no key to measure
    print(f"wrote {args.out}: {len(table['entries'])} keys")
    return 0


if __name__ == "__main__":
    sys.exit(main())
