"""Parity sweep: fresh recordings of PyTorch's native allocator on the GPU,
each under a config drawn from a seed, replayed through cachealloc's engine
with native's segment addresses. Every event must land where native put it
and the replay must end with native's 122 memory_stats values.

Why, beside the reference traces in ../shared/traces: those cover each
option alone and have no deferred frees. The sweep's workload (`fuzz` in
benchmarks/workloads.py) mixes three streams, record_stream on busy streams
(frees that wait for an event), empty_cache() and OOMs under a memory
fraction, and the configs combine max_split_size, both forms of
roundup_power2_divisions and garbage_collection_threshold.

A second set does the same under expandable_segments:True (pages mapped
into one reserved range per stream and pool), combined with the same
options: CACHEALLOC_SWEEP_EXPANDABLE_SEEDS (default 6) seeds from
CACHEALLOC_SWEEP_EXPANDABLE_FIRST (default 0); the classic set is unchanged.

CACHEALLOC_SWEEP_SEEDS (default 12) sets how many seeds run, from
CACHEALLOC_SWEEP_FIRST (default 0);
CACHEALLOC_SWEEP_OUT, if set, is a folder the recordings are copied to."""
import json
import math
import os
import pathlib
import random
import shutil
import subprocess
import sys
import gzip

import pytest

from cachealloc import plain_pickle

HERE = pathlib.Path(__file__).resolve().parent
RECORDER = HERE.parents[1] / "examples" / "record_trace.py"


def env_count(name, default):
    """$name as a count (decimal digits), else `default`; anything else is
    refused naming the variable, not run as some other sweep."""
    text = os.environ.get(name, "")
    if not text:
        return default
    if not text.isdigit():
        raise ValueError(f"{name}={text!r} is not a count (decimal digits)")
    return int(text)


SEEDS = env_count("CACHEALLOC_SWEEP_SEEDS", 12)
FIRST_SEED = env_count("CACHEALLOC_SWEEP_FIRST", 0)
EXPANDABLE_SEEDS = env_count("CACHEALLOC_SWEEP_EXPANDABLE_SEEDS", 6)
EXPANDABLE_FIRST = env_count("CACHEALLOC_SWEEP_EXPANDABLE_FIRST", 0)
STEPS = 3000


def sweep_config(seed):
    """(PYTORCH_CUDA_ALLOC_CONF, memory fraction or None) for a seed."""
    rng = random.Random(7919 * seed + 1)
    parts = []
    split_mb = rng.choice([None, None, 20, 64, 256])
    if split_mb:
        parts.append(f"max_split_size_mb:{split_mb}")
    pow2 = rng.choice([None, None, "2", "4", "16", "[256:1,512:2,1024:4,>:8]", "[64:8,>:2]"])
    if pow2:
        parts.append(f"roundup_power2_divisions:{pow2}")
    fraction = rng.choice([None, None, 0.02, 0.05])
    # Native collects garbage only under a memory fraction; set without one,
    # the option must change nothing.
    gc = rng.choice([None, None, 0.5, 0.8])
    if gc:
        parts.append(f"garbage_collection_threshold:{gc}")
    return ",".join(parts), fraction


def expandable_sweep_config(seed):
    """(conf, fraction) for the expandable set: expandable_segments:True
    first, then options drawn as sweep_config draws them, from a seed space
    of its own (so seed n here is not seed n of the classic set)."""
    conf, fraction = sweep_config(1_000_003 + seed)
    return ",".join(["expandable_segments:True"] + ([conf] if conf else [])), fraction


def count_actions(trace_path, action):
    """How many entries of the recording are `action`."""
    with gzip.open(trace_path, "rb") as f:
        entries = plain_pickle.load(f)["device_traces"][0]
    return sum(e["action"] == action for e in entries)


def deferred_frees(trace_path):
    """How many frees in the recording waited for stream events: a
    free_requested not followed at once by its free_completed."""
    with gzip.open(trace_path, "rb") as f:
        entries = plain_pickle.load(f)["device_traces"][0]
    n = 0
    for i, e in enumerate(entries):
        if e["action"] != "free_requested":
            continue
        nxt = entries[i + 1] if i + 1 < len(entries) else None
        if not nxt or nxt["action"] != "free_completed" or nxt["addr"] != e["addr"]:
            n += 1
    return n


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + SEEDS))
def test_fresh_native_recording_replays_exactly(tmp_path, seed):
    conf, fraction = sweep_config(seed)
    record_and_replay(tmp_path, f"fuzz{seed}", seed, conf, fraction)


@pytest.mark.parametrize("seed", range(EXPANDABLE_FIRST, EXPANDABLE_FIRST + EXPANDABLE_SEEDS))
def test_fresh_native_expandable_recording_replays_exactly(tmp_path, seed):
    conf, fraction = expandable_sweep_config(seed)
    meta = record_and_replay(tmp_path, f"fuzz_expandable{seed}", seed, conf, fraction)
    assert meta["maps"] > 0, "native mapped no pages: the recording is not expandable"


def record_and_replay(tmp_path, name, seed, conf, fraction):
    """Records the fuzz workload under native with `conf` (and `fraction`),
    replays it through cachealloc's CLI and checks it; returns the
    recording's .json, with "maps" (its segment_map entries) added."""
    from cachealloc import lab

    try:
        cli = lab.cli_path()  # $CACHEALLOC_CLI (gpu_session.sh sets it) or a build
    except lab.LabError as e:
        pytest.skip(f"GPU test skipped: {e}")
    out = tmp_path / name
    cmd = [sys.executable, str(RECORDER), "--workload", "fuzz", "--allocator", "native",
           "--steps", str(STEPS), "--seed", str(seed), "--conf", conf, "--out", str(out)]
    if fraction is not None:
        cmd += ["--memory-fraction", str(fraction)]
    rec = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rec.returncode == 0, rec.stderr[-4000:]
    trace = pathlib.Path(f"{out}.pickle.gz")
    meta = json.loads(pathlib.Path(f"{out}.json").read_text())
    if os.environ.get("CACHEALLOC_SWEEP_OUT"):
        dest = pathlib.Path(os.environ["CACHEALLOC_SWEEP_OUT"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(trace, dest)
        shutil.copy(f"{out}.json", dest)

    args = [str(cli), "replay", "--json", str(trace),
            "--device-memory", str(meta["device_total_memory"])]
    if fraction is not None:
        args += ["--memory-limit", str(math.floor(fraction * meta["device_total_memory"]))]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    replay = json.loads(proc.stdout)
    ooms, empties, _ = meta["losses"]
    meta["maps"] = count_actions(trace, "segment_map")
    print(f"seed {seed}: conf {conf!r} fraction {fraction}: {replay['events']} events, "
          f"{int(ooms)} OOMs, {int(empties)} empty_cache, {deferred_frees(trace)} deferred frees, "
          f"{meta['maps']} segment_map, divergence {replay['divergence']}")
    assert replay["divergence"] is None
    assert replay["events"] == meta["n_events"]
    # Two counters can differ where the trace cannot show an empty_cache()
    # call (lab.UNOBSERVABLE_COUNTERS), exactly as the calls made (recorded)
    # and the calls the replay inferred explain; every other key is equal.
    diff = lab.stats_mismatches(meta["final_memory_stats"], replay["memory_stats"], int(empties),
                                replay["empty_cache_calls"])
    assert not diff, diff
    return meta
