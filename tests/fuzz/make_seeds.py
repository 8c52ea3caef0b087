#!/usr/bin/env python3
"""Writes the fuzz targets' seed inputs (OUT/TARGET/; OUT is the first
argument, build-fuzz/seeds by default) from the
bundled traces (tests/data/traces*, tests/cpp/fuzz_corpus): small, so that
libFuzzer mutates them quickly. scripts/fuzz_campaign.sh --merge then keeps
what adds coverage in tests/fuzz/corpus/TARGET/, the corpus CI runs from.

  replay, pickle: the first 32 entries of each bundled trace (its settings
    kept, its final segments dropped: a cut trace ends elsewhere), as
    protocol 4 pickles; the pickle target also gets a few gzipped;
    tests/cpp/fuzz_corpus's small cases as they are.
  explain: the moment of the first OOM of oom_frac and x_oom_frac (the
    segments at that point computed from the trace; the last 40 entries up
    to the OOM as the history, so the history starts mid-run, as a ring
    does), one with cachealloc's own OOM facts added, and a cut trace
    without an OOM.
  config: one text per key, and the bundled traces' settings.

Reads the bundled pickles with cachealloc's plain-data unpickler (no
globals), never with pickle.load."""
import gzip
import hashlib
import importlib.util
import pathlib
import pickle
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build-fuzz" / "seeds"
_spec = importlib.util.spec_from_file_location(
    "plain_pickle", ROOT / "bindings" / "python" / "cachealloc" / "plain_pickle.py")
plain_pickle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plain_pickle)


def load(path):
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return plain_pickle.loads(data)


def write(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def cut(snapshot, entries):
    """The snapshot's first `entries` trace entries per device, no segments."""
    out = {"segments": [], "device_traces": [t[:entries] for t in snapshot["device_traces"]]}
    if "allocator_settings" in snapshot:
        out["allocator_settings"] = snapshot["allocator_settings"]
    return out


def segments_after(events, device=0):
    """The segments (native's snapshot schema, blocks in address order) that
    `events` leave: segment_alloc/segment_free make them, alloc/free_completed
    mark the blocks in them; the rest of a segment is inactive."""
    segments, live = {}, {}
    for e in events:
        a, n = e.get("addr", 0), e.get("size", 0)
        if e["action"] == "segment_alloc":
            segments[a] = n
        elif e["action"] == "segment_free":
            segments.pop(a, None)
        elif e["action"] == "alloc":
            live[a] = n
        elif e["action"] == "free_completed":
            live.pop(a, None)
    out = []
    for base, total in sorted(segments.items()):
        blocks, at = [], base
        for a in sorted(x for x in live if base <= x < base + total):
            if a > at:
                blocks.append({"size": a - at, "requested_size": 0, "state": "inactive"})
            blocks.append({"size": live[a], "requested_size": live[a], "state": "active_allocated"})
            at = a + live[a]
        if at < base + total:
            blocks.append({"size": base + total - at, "requested_size": 0, "state": "inactive"})
        out.append({"device": device, "address": base, "total_size": total, "stream": 0,
                    "segment_type": "large" if total > (2 << 20) else "small",
                    "blocks": blocks})
    return out


def oom_moment(snapshot, history):
    """The snapshot at its first OOM: segments then, the last `history`
    entries up to and including the OOM."""
    events = snapshot["device_traces"][0]
    k = next(i for i, e in enumerate(events) if e["action"] == "oom")
    out = {"segments": segments_after(events[:k + 1]),
           "device_traces": [events[max(0, k + 1 - history):k + 1]]}
    if "allocator_settings" in snapshot:
        out["allocator_settings"] = snapshot["allocator_settings"]
    return out


def dumps(value):
    return pickle.dumps(value, protocol=4)


def main():
    traces = sorted((ROOT / "tests" / "data" / "traces").glob("*.pickle.gz")) + sorted(
        (ROOT / "tests" / "data" / "traces_expandable").glob("*.pickle.gz"))
    confs = set()
    for i, path in enumerate(traces):
        name = path.name.replace(".pickle.gz", "")
        snapshot = load(path)
        small = dumps(cut(snapshot, 32))
        write("replay", name + ".pickle", small)
        write("pickle", name + ".pickle", small)
        if i % 6 == 0:
            write("pickle", name + ".pickle.gz", gzip.compress(small, mtime=0))
        conf = snapshot.get("allocator_settings", {}).get("PYTORCH_CUDA_ALLOC_CONF")
        if conf:
            confs.add(conf)
        if name in ("oom_frac", "x_oom_frac"):
            moment = oom_moment(snapshot, 40)
            write("explain", name + "_at_oom.pickle", dumps(moment))
            oom = moment["device_traces"][0][-1]
            facts = dict(moment, cachealloc_oom={
                "device": 0, "requested": oom["size"], "rounded": oom["size"],
                "allocation": oom["size"], "device_total": 85017493504,
                "device_free": oom.get("device_free", 0), "allowed": 8 << 30,
                "message": "CUDA out of memory. Tried to allocate %d bytes." % oom["size"]})
            write("explain", name + "_cachealloc_facts.pickle", dumps(facts))
        if name in ("mlp", "x_mlp"):
            write("explain", name + "_no_oom.pickle", small)
    for path in sorted((ROOT / "tests" / "cpp" / "fuzz_corpus").glob("*.pickle")):
        write("replay", path.name, path.read_bytes())
        write("pickle", path.name, path.read_bytes())
    confs |= {
        "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8]",
        "roundup_power2_divisions:4", "roundup_power2_divisions:[1:2,>:4]",
        "roundup_power2_divisions:[2:4,8:0,16:2]", "roundup_power2_divisions:[>:4,8:8]",
        "expandable_segments:True,large_segment_size_mb:64,max_non_split_rounding_mb:256,"
        "max_split_size_mb:512",
        "garbage_collection_threshold:0.6,per_process_memory_fraction:0.25",
        "backend:cudaMallocAsync", "backend:native,release_lock_on_cudamalloc:True",
        "pinned_use_cuda_host_register:True,pinned_num_register_threads:8,"
        "pinned_reserve_segment_size_mb:64,pinned_use_background_threads:True",
        "graph_capture_record_stream_reuse:True,throw_on_cudamalloc_oom:False",
        "pinned_max_round_threshold_mb:64,pinned_max_cached_size_mb:128,"
        "pinned_free_catch_all:True",
        "release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True",
    }
    for conf in sorted(confs):
        digest = hashlib.sha1(conf.encode()).hexdigest()[:12]
        # First byte: the release and whether it is also a settings call.
        for lead in (b"\x00", b"\x82"):
            write("config", digest + lead.hex(), lead + conf.encode())


if __name__ == "__main__":
    main()
