#!/usr/bin/env python3
"""Extracts what one torch release shows users of its CUDA allocator, from
that release's own wheel, into tests/data/torch_releases/VERSION/:

  accepted_keys.txt   PYTORCH_CUDA_ALLOC_CONF keys it accepts: the CUDA set
                      (c10/cuda/CUDAAllocatorConfig.h getKeys()) and the
                      device-generic set (c10/core/AllocatorConfig.h
                      getMutableKeys() while inline, through 2.12; from
                      2.13 it is out of line, and the run of key strings
                      libc10 holds before "Unrecognized key '" gives it)
  refusal_text.txt    the two pieces native's refusal of an unknown key is
                      made of, from libc10's strings
  stats_keys.txt      torch.cuda.memory_stats keys, from DeviceStats
                      (c10/core/CachingDeviceAllocator.h): StatArray ->
                      NAME.{all,large_pool,small_pool}.{allocated,current,
                      freed,peak}; Stat -> NAME.{...}; int64_t -> NAME; a
                      map of StatArray per pool -> NAME.<pool>.{...}.{...}
  trace_actions.txt   trace entry actions (parseTraceEntryAction's table)
  trace_members.txt   TraceEntry's data members (C++ names)
  trace_entry_fields.txt the trace entry keys torch documents (the
                      TraceEntry TypedDict in torch.cuda.memory._snapshot's
                      docstring: documented, not exhaustive; time_us,
                      compile_context and user_metadata are written but
                      not listed there through 2.14)
  snapshot_members.txt SnapshotInfo's data members (c10/cuda/CUDACachingAllocator.h)
  memory_api.txt      torch/cuda/memory.py's functions and their parameters

Usage (the header/Python tree from scripts/torch_release.sh; libc10 from
the same release's wheel: `unzip WHEEL 'torch/lib/libc10.*'`):

  python3 scripts/torch_release_facts.py 2.12.0 \\
      "$(bash scripts/torch_release.sh 2.12.0)" /path/to/libc10.dylib

Fails naming what it could not find, so a release that moves a list
does not silently give an empty one.
"""
from __future__ import annotations

import ast
import os
import re
import string
import sys

STAT_POOLS = ("all", "large_pool", "small_pool")
STAT_FIELDS = ("allocated", "current", "freed", "peak")


def fail(why: str) -> None:
    sys.exit(f"torch_release_facts: {why}")


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e}")


def braced_strings(text: str, function: str) -> list[str] | None:
    """String literals of the initializer list in `function`'s body, with
    adjacent literals joined as C++ joins them; None when not inline."""
    m = re.search(function + r"\(\)\s*\{\s*static[^{]*\{(.*?)\};", text, re.S)
    if not m:
        return None
    body = re.sub(r"//[^\n]*", "", m.group(1))
    return [re.sub(r'"\s*"', "", item).strip().strip('"')
            for item in re.findall(r'"[^"]*"(?:\s*"[^"]*")*', body)]


def binary_strings(path: str, minimum: int = 4) -> list[str]:
    printable = set(string.printable.encode()) - set(b"\n\r\x0b\x0c")
    data = open(path, "rb").read()
    out, run = [], bytearray()
    for b in data:
        if b in printable:
            run.append(b)
        else:
            if len(run) >= minimum:
                out.append(run.decode())
            run = bytearray()
    return out


def generic_keys_from_library(strings: list[str]) -> list[str]:
    """The snake_case strings between the first "large_segment_size_mb" and
    "Unrecognized key '" (the parser's key comparisons, in order)."""
    try:
        end = strings.index("Unrecognized key '")
        start = max(i for i in range(end) if strings[i] == "large_segment_size_mb")
    except ValueError:
        fail("libc10 has no key run ending in \"Unrecognized key '\"")
    return [s for s in strings[start:end] if re.fullmatch(r"[a-z][a-z0-9_]*", s)]


def struct_body(text: str, name: str) -> str:
    m = re.search(r"struct " + name + r"\s*\{(.*?)\n\};", text, re.S)
    if not m:
        fail(f"no struct {name}")
    return re.sub(r"//[^\n]*", "", m.group(1))


def stats_keys(header: str) -> list[str]:
    body = struct_body(header, "DeviceStats")
    keys = []
    for m in re.finditer(r"([\w:<>, ]+?)\s+(\w+)\s*(?:=[^;]*)?;", body):
        kind, name = " ".join(m.group(1).split()), m.group(2)
        if kind == "StatArray":
            keys += [f"{name}.{p}.{f}" for p in STAT_POOLS for f in STAT_FIELDS]
        elif kind == "Stat":
            keys += [f"{name}.{f}" for f in STAT_FIELDS]
        elif kind == "int64_t":
            keys.append(name)
        elif "map" in kind and "StatArray" in kind:
            keys += [f"{name}.<pool>.{p}.{f}" for p in STAT_POOLS for f in STAT_FIELDS]
        else:
            fail(f"DeviceStats member {name} has a type ({kind}) this script does not know")
    return sorted(keys)


def members(header: str, name: str) -> list[str]:
    body = struct_body(header, name)
    # Data members: "TYPE NAME_;" or "TYPE NAME_{...};" at the struct's level.
    return sorted(set(re.findall(r"\b(\w+_)\s*(?:\{[^}]*\})?\s*;", body)))


def snapshot_members(header: str) -> list[str]:
    body = struct_body(header, "SnapshotInfo")
    return sorted(set(re.findall(r"\b(\w+)\s*;", body)))


def trace_actions(header: str) -> list[str]:
    table = re.search(r"kActionTable\[\]\s*=\s*\{(.*?)\};", header, re.S)
    if not table:
        fail("no kActionTable in CachingDeviceAllocator.h")
    return re.findall(r'\{"(\w+)"', table.group(1))


def documented_trace_fields(source: str) -> list[str]:
    m = re.search(r"class TraceEntry\(TypedDict\):\n(.*?)(?=\n\s*class |\n\s*Args:|\n\s*Returns:|\"\"\")",
                  source, re.S)
    if not m:
        fail("no TraceEntry TypedDict in torch/cuda/memory.py")
    fields = re.findall(r"^\s{12}(\w+)\s*:", m.group(1), re.M)
    if "action" not in fields:
        fail(f"the TraceEntry fields found ({fields}) lack action")
    return fields


def memory_api(source: str) -> list[str]:
    tree = ast.parse(source)
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            a = node.args
            params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
            out.append(f"{node.name}({', '.join(params)})")
    return sorted(out)


def main() -> None:
    if len(sys.argv) != 4:
        fail("usage: torch_release_facts.py VERSION TREE LIBC10")
    version, tree, libc10 = sys.argv[1:]
    inc = os.path.join(tree, "torch", "include")
    generic_h = read(os.path.join(inc, "c10/core/AllocatorConfig.h"))
    cuda_h = read(os.path.join(inc, "c10/cuda/CUDAAllocatorConfig.h"))
    device_h = read(os.path.join(inc, "c10/core/CachingDeviceAllocator.h"))
    caching_h = read(os.path.join(inc, "c10/cuda/CUDACachingAllocator.h"))
    lib = binary_strings(libc10)
    memory_py = read(os.path.join(tree, "torch/cuda/memory.py"))

    cuda_keys = braced_strings(cuda_h, "getKeys")
    if not cuda_keys:
        fail("no inline getKeys() in CUDAAllocatorConfig.h")
    generic_keys = braced_strings(generic_h, "getMutableKeys")
    if generic_keys is None:
        generic_keys = generic_keys_from_library(lib)
    if "max_split_size_mb" not in generic_keys:
        fail(f"the generic key set found ({generic_keys}) lacks max_split_size_mb")
    refusal = [s for s in lib if s in ("Unrecognized key '", "' in Accelerator allocator config.")]
    if len(set(refusal)) != 2:
        fail("libc10 lacks native's refusal text for an unknown key")

    out = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "torch_releases", version)
    os.makedirs(out, exist_ok=True)
    lists = {
        "accepted_keys.txt": sorted(set(cuda_keys) | set(generic_keys)),
        "refusal_text.txt": ["Unrecognized key '", "' in Accelerator allocator config."],
        "stats_keys.txt": stats_keys(device_h),
        "trace_actions.txt": trace_actions(device_h),
        "trace_members.txt": members(device_h, "TraceEntry"),
        "snapshot_members.txt": snapshot_members(caching_h),
        "trace_entry_fields.txt": documented_trace_fields(memory_py),
        "memory_api.txt": memory_api(memory_py),
    }
    for name, lines in lists.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    print(f"{version}: " + ", ".join(f"{n} {len(v)}" for n, v in lists.items()))


if __name__ == "__main__":
    main()
