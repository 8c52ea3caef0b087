"""cuDNN convolution workspaces, from a table measured on a GPU.

Why a table: with cudnn.benchmark off, torch's cuDNN path (Conv_v8.cpp)
asks cuDNN's heuristics for an execution plan, allocates the plan's
workspace from the caching allocator, runs the plan and frees the workspace
at once, inside the convolution op. The plan, and so the workspace size
(0 to many MiB), is decided by cuDNN's heuristics, which only run on a GPU
and differ per GPU architecture and cuDNN version. So the sizes are
measured: benchmarks/predict/cudnn_probe.py runs convolutions on the target
GPU and writes, per convolution key (cudnn_key.py: shapes, stride, padding,
dilation, groups, dtype, memory format, transposed, bias / outputs wanted,
the cudnn flags), each workspace's size and where it falls among the op's
own allocations.

Tables live in data/cudnn_*.json (format below, written by the probe, or
derived from a recorded history by benchmarks/predict/cudnn_from_history.py).
For a target GPU the table chosen has the same compute capability; among
those, one from the same GPU product and the running torch's major.minor is
preferred. CACHEALLOC_CUDNN_TABLE=PATH uses that file alone, =+PATH that
file first and the bundled tables for the keys it lacks (what
`cachealloc predict --cudnn-table PATH` sets), =none no table.

A convolution whose key the table lacks gets no workspace and is counted as
not modelled (calls, distinct keys, an example key), so the output says
how much of the step the table covered; nothing is guessed.

Table (JSON): {"format": "cachealloc-cudnn-workspaces/1",
  "gpu": {"name", "capability": [major, minor], ...}, "torch", "cudnn",
  "source", "entries": {KEY: {"workspaces": [[position, bytes], ...],
  "first": [[position, bytes], ...] (the first call's, when it differed),
  "unstable": true (when later calls disagreed: then not modelled),
  "first_empty_cache": [[position, workspaces before], ...] (where the first
  call emptied the allocator's cache: cudnn.benchmark's find path, measured
  by key_probe.py)}}}
position = the number of the op's own allocations made before the workspace.
"""
from __future__ import annotations

import gzip
import json
import os
import pathlib
from typing import Optional

# The recording's unmodelled_calls entry for convolutions that run without
# cuDNN (cudnn_key.uses_cudnn False): torch's native CUDA kernels, whose
# im2col column buffers are not modelled (answer/band.py bounds them).
NON_CUDNN_CONV = "convolutions without cuDNN (torch's native CUDA kernels)"

DATA = pathlib.Path(__file__).with_name("data")
FORMAT = "cachealloc-cudnn-workspaces/1"
ENV = "CACHEALLOC_CUDNN_TABLE"


class TableError(ValueError):
    """A table file that cannot be used (its path and the problem named)."""


def load_table(path) -> dict:
    path = pathlib.Path(path)
    try:
        raw = path.read_bytes()
        table = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, ValueError) as e:
        raise TableError(f"cuDNN workspace table {path}: {e}") from None
    if not isinstance(table, dict) or table.get("format") != FORMAT:
        raise TableError(f"cuDNN workspace table {path}: not a {FORMAT} file")
    if not isinstance(table.get("entries"), dict) or not isinstance(table.get("gpu"), dict):
        raise TableError(f"cuDNN workspace table {path}: no 'entries' / 'gpu'")
    for key, e in table["entries"].items():
        ws = e.get("workspaces") if isinstance(e, dict) else None
        if not isinstance(ws, list) or not all(
                isinstance(w, list) and len(w) == 2 and all(isinstance(x, int) and x >= 0 for x in w)
                for w in ws):
            raise TableError(f"cuDNN workspace table {path}: entry {key!r} has no valid "
                             "'workspaces' ([[position, bytes], ...])")
        marks = e.get("first_empty_cache", [])
        if not isinstance(marks, list) or not all(
                isinstance(m, list) and len(m) == 2 and all(isinstance(x, int) and x >= 0 for x in m)
                for m in marks):
            raise TableError(f"cuDNN workspace table {path}: entry {key!r} has no valid "
                             "'first_empty_cache' ([[position, workspaces before], ...])")
    table["path"] = str(path)
    return table


def dumps_table(table: dict) -> str:
    """The table as JSON, one entry a line (readable diffs)."""
    head = {k: v for k, v in table.items() if k not in ("entries", "path")}
    lines = [json.dumps(k) + ": " + json.dumps(e, sort_keys=True)
             for k, e in sorted(table["entries"].items())]
    return (json.dumps(head, sort_keys=True)[:-1] + ', "entries": {\n' + ",\n".join(lines)
            + "\n}}\n")


def _minor(version: str) -> str:
    return ".".join(str(version).split("+")[0].split(".")[:2])


def choose_table(gpu, torch_version: str, env=None) -> tuple:
    """(table or None, why): the table for this GPU and torch, as the module
    docstring says."""
    env = os.environ if env is None else env
    override = env.get(ENV)
    if override:
        if override.lower() == "none":
            return None, f"{ENV}=none"
        if not override.startswith("+"):
            return load_table(override), f"{ENV}={override}"
    ranked = []
    for path in sorted(DATA.glob("cudnn_*.json")):
        t = load_table(path)
        if tuple(t["gpu"].get("capability", ())) != tuple(gpu.capability):
            continue
        # Same product, then same torch, then a probe's table (cuDNN version
        # recorded) over one read off a history.
        rank = (t["gpu"].get("name") == gpu.product, _minor(t.get("torch", "")) == _minor(torch_version),
                t.get("cudnn") is not None)
        ranked.append((rank, path.name, t))
    if not ranked and not override:
        return None, f"no bundled table for compute capability {gpu.capability[0]}.{gpu.capability[1]}"
    # The best-ranked table, with the keys only the others measured (each
    # key from the best-ranked table that has it): tables of one
    # capability cover different models (ResNet-50/ViT, the zoo's tuning half).
    # An entry measured on another product of the same capability (other SM
    # count, memory) is marked "other_gpu": its plan may differ here, so it
    # gives the workspace but the band bounds it as unmeasured (band.py).
    ranked.sort(key=lambda r: (r[0], r[1]), reverse=True)
    if override:
        # "+FILE" (--cudnn-table): the user's table first (a probe of this
        # model's keys on the target's product), the bundled ones for the
        # keys it lacks.
        t = load_table(override[1:])
        ranked.insert(0, ((True, True, True), pathlib.Path(override[1:]).name, t))

    def marked(t):
        name = t["gpu"].get("name")
        if name == gpu.product:
            return dict(t["entries"])
        return {k: dict(e, other_gpu=name) for k, e in t["entries"].items()}
    best = dict(ranked[0][2], entries=marked(ranked[0][2]))
    for _, name, t in ranked[1:]:
        added = {k: e for k, e in marked(t).items() if k not in best["entries"]}
        if added:
            best["entries"].update(added)
            best["path"] = best["path"] + f" + {len(added)} keys of {name}"
    if override:
        return best, f"{ENV}={override}: that table first, then the bundled tables"
    return best, "bundled table for compute capability {}.{}".format(*gpu.capability)


class CudnnWorkspaces:
    """The table's answers for one recording, and what it did not cover."""

    def __init__(self, table: Optional[dict], why: str, torch_version: str):
        self.table = table
        self.why = why
        self.torch_version = torch_version
        self._seen = set()              # keys called before (the first call may differ)
        self.modelled_calls = 0
        self.workspaces = 0             # workspace requests inserted
        self.workspace_bytes = 0        # their sum, bytes
        self.missing_calls = 0
        self.missing_keys = {}          # key -> calls, in first-seen order
        self._empty_seen = {}           # keys whose first call's empty caches were placed
        self.borrowed_keys = {}         # key -> calls, modelled from another GPU of the capability
        self.empty_cache_calls = 0      # empty caches placed (cudnn.benchmark's find)

    def plan(self, key: str) -> Optional[list]:
        """The [[position, bytes], ...] to insert for this call, or None
        when the table does not cover it (then counted as not modelled)."""
        first = key not in self._seen
        self._seen.add(key)
        e = self.table["entries"].get(key) if self.table else None
        if e is None or e.get("unstable"):
            self.missing_calls += 1
            self.missing_keys[key] = self.missing_keys.get(key, 0) + 1
            return None
        ws = e.get("first", e["workspaces"]) if first else e["workspaces"]
        if e.get("other_gpu"):
            self.borrowed_keys[key] = self.borrowed_keys.get(key, 0) + 1
        self.modelled_calls += 1
        self.workspaces += len(ws)
        self.workspace_bytes += sum(b for _, b in ws)
        return [list(w) for w in ws]

    def empty_caches(self, key: str) -> list:
        """[[position, workspaces before], ...]: where the call just planned
        (plan(), its first call) emptied the allocator's cache on the GPU
        (cudnn.benchmark's find path; kernels/key_probe.py measures it);
        [] for a later call or a key without it."""
        e = self.table["entries"].get(key) if self.table else None
        if e is None or e.get("unstable") or self._empty_seen.get(key):
            return []
        self._empty_seen[key] = True
        self.empty_cache_calls += len(e.get("first_empty_cache") or ())
        return [list(m) for m in e.get("first_empty_cache") or ()]

    def source(self) -> str:
        t = self.table
        if t is None:
            return f"no table ({self.why})"
        g = t["gpu"]
        note = ""
        if _minor(t.get("torch", "")) != _minor(self.torch_version):
            note = f"; this run's torch is {self.torch_version}: its cuDNN may choose other plans"
        return (f"table {os.path.basename(t['path'])} measured on {g.get('name')} "
                f"(sm{g['capability'][0]}{g['capability'][1]}), torch {t.get('torch')}, "
                f"cuDNN {t.get('cudnn') or 'unrecorded'}, by {t.get('source', '?')}{note}")

    def stats(self) -> dict:
        example = next(iter(self.missing_keys), None)
        return {"source": self.source(), "modelled_calls": self.modelled_calls,
                "workspaces": self.workspaces, "workspace_bytes": self.workspace_bytes,
                "empty_caches": self.empty_cache_calls,
                "other_gpu_keys": len(self.borrowed_keys),
                "not_modelled_calls": self.missing_calls,
                "not_modelled_keys": len(self.missing_keys), "not_modelled_example": example}

    def describe(self) -> str:
        line = (f"cuDNN convolution workspaces: from {self.source()}; "
                f"{self.modelled_calls} convolution call(s) modelled ({self.workspaces} "
                f"workspace request(s), {self.workspace_bytes} bytes in all, each allocated and "
                "freed inside its op where the GPU did; under a limit one that OOMs is a plan "
                "fallback, not an OOM of the step)")
        if self.missing_calls:
            line += (f"; NOT MODELLED: {self.missing_calls} call(s) of {len(self.missing_keys)} "
                     f"convolution(s) the table lacks (no workspace counted; e.g. "
                     f"{next(iter(self.missing_keys))})")
        return line
