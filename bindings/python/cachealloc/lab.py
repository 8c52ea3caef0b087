"""The fragmentation lab from Python: what-if replays of a recorded trace.

    from cachealloc import lab
    rows = lab.compare("run.pickle.gz", ["trace", "expandable_segments:True"],
                       memory_limit=40 << 30)
    for row in rows:
        print(row["label"], row["peak_reserved"], row["fragmentation_at_peak"])
    lab.min_memory("run.pickle.gz", ["", "max_split_size_mb:128"])
    # -> {"": 1887436800, "max_split_size_mb:128": 2214592512}
    advice = lab.advise("run.pickle.gz", memory_limit=40 << 30)
    print(advice["recommendation"], advice["headline"])

A trace is a snapshot pickle (.pickle or .pickle.gz) as
torch.cuda.memory._dump_snapshot or cachealloc.dump_snapshot writes it. Its
requests are replayed on a simulated device, so no GPU is needed.

Configurations are PYTORCH_CUDA_ALLOC_CONF text (expandable_segments:True
included: native's own expandable segments) or "trace" (the trace's own
settings). All sizes are bytes.

Every function runs the `cachealloc` command-line tool with --json: the one
installed with this package, or as tool.tool_path() says. They raise
LabError (with the tool's message) for a bad trace, a bad config or a
missing tool. Each call is a separate process, so it is thread-safe.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
from typing import Optional, Sequence

from ._core import LabError
from .tool import ToolNotFound, tool_path

__all__ = ["LabError", "advise", "cli_path", "compare", "min_memory", "stats_mismatches"]


def cli_path() -> pathlib.Path:
    """Path of the `cachealloc` tool used by compare() and min_memory()
    (tool.tool_path()). Raises LabError if there is none."""
    try:
        return tool_path()
    except ToolNotFound as e:
        raise LabError(str(e)) from None


def _run(args: Sequence[str]) -> dict:
    cmd = [str(cli_path()), *args, "--json", "--quiet"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise LabError(f"cannot run {cmd[0]}: {e}") from e
    if proc.returncode != 0:
        message = proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else "no message"
        raise LabError(f"cachealloc {args[0]} failed (exit {proc.returncode}): {message}",
                       proc.returncode, proc.stderr)
    return json.loads(proc.stdout)


def _conf_args(confs: Sequence[str]) -> list:
    if isinstance(confs, str):
        raise TypeError("confs must be a sequence of config strings, not one string")
    args = []
    for conf in confs:
        args += ["--conf", conf]
    return args


def compare(trace_path, confs: Sequence[str], memory_limit: Optional[int] = None, *,
            html=None, snapshot_dir=None, recorded_limit: Optional[int] = None,
            policy: Optional[str] = None, series_points: Optional[int] = None,
            placement: Optional[str] = None, address_hints: bool = True) -> list:
    """Replays the trace's requests under each config; one dict per config.

    memory_limit: bytes each replay may reserve (None: unlimited); requests
    past it raise OOM in the replay, are counted ("ooms") and skipped.
    html: also write a self-contained HTML report there. snapshot_dir: also
    write each replay as a snapshot pickle for PyTorch's memory viewer.
    recorded_limit: the limit the trace was recorded under, if any (tells
    the allocator's own releases from empty_cache() calls). policy: the
    placement policy of every config that names none (--policy; default
    native; docs/policies.md). series_points: also return memory over time
    in about that many buckets of consecutive requests ("series").
    placement: where a segment goes when the trace gives no address,
    "first-fit" (the default), "top-down" (--placement; the CUDA driver
    mostly places segments downward: docs/prediction.md) or "shuffled:SEED"
    (a seeded random order of segment addresses, for the band's placement
    spread). address_hints=False: place every segment by `placement`,
    not where the trace recorded it (--no-address-hints).

    Each dict holds, in bytes unless said: conf, label, policy,
    peak_reserved, peak_allocated, allocated_at_peak,
    fragmentation_at_peak (fraction), peak_request (index), device_allocs,
    device_frees, retries, ooms, fallbacks, fallback_skips,
    recorded_ooms_succeeded, final_reserved,
    final_allocated, requests, seconds, requests_per_s, events_per_s,
    snapshot (path or None), and with html the peak's largest live blocks
    (peak_blocks) and segment count (peak_segments), and with
    series_points "series": [[first request, reserved, allocated], ...], each
    value the largest in its bucket. ooms counts the
    requests the program needed; an allocation the trace marks fallible (a
    prediction's cuDNN workspace, "fallible_group") that OOMs counts in
    fallbacks instead, and later requests of its group are not made
    (fallback_skips): lab/request_stream.h.
    """
    args = ["compare", os.fspath(trace_path), *_conf_args(confs)]
    if memory_limit is not None:
        args += ["--memory-limit", str(int(memory_limit))]
    if recorded_limit is not None:
        args += ["--recorded-limit", str(int(recorded_limit))]
    if html is not None:
        args += ["--html", os.fspath(html)]
    if snapshot_dir is not None:
        args += ["--snapshot-dir", os.fspath(snapshot_dir)]
    if series_points is not None:
        args += ["--series-points", str(int(series_points))]
    if not address_hints:
        args += ["--no-address-hints"]
    return _run(args + _policy_args(policy, placement))["configs"]


def _policy_args(policy: Optional[str], placement: Optional[str] = None) -> list:
    args = [] if policy is None else ["--policy", str(policy)]
    return args + ([] if placement is None else ["--placement", str(placement)])


def min_memory(trace_path, confs: Sequence[str], *,
               recorded_limit: Optional[int] = None, policy: Optional[str] = None,
               placement: Optional[str] = None) -> dict:
    """Smallest memory limit (bytes) at which the trace's requests run
    without OOM, per config: {conf: bytes}. Exact: verified at the limit and
    one byte below (see `cachealloc min-memory --help`). policy, placement:
    as for compare()."""
    return {row["conf"]: row["min_memory"]
            for row in min_memory_rows(trace_path, confs, recorded_limit=recorded_limit,
                                       policy=policy, placement=placement)}


def min_memory_rows(trace_path, confs: Sequence[str], *,
                    recorded_limit: Optional[int] = None, policy: Optional[str] = None,
                    placement: Optional[str] = None, also_placements: Sequence[str] = ()) -> list:
    """min_memory()'s search, one dict per config (and per placement: first
    `placement`'s rows, then each of `also_placements`', in order) as
    `cachealloc min-memory --json` gives it: conf, label, policy, placement,
    min_memory and peak_reserved_unlimited (bytes), probes, byte_refined,
    seconds. One process reads the trace once for all of them."""
    args = ["min-memory", os.fspath(trace_path), *_conf_args(confs)]
    if recorded_limit is not None:
        args += ["--recorded-limit", str(int(recorded_limit))]
    for p in also_placements:
        args += ["--also-placement", str(p)]
    return _run(args + _policy_args(policy, placement))["configs"]


def advise(trace_path, memory_limit: Optional[int] = None, *,
           device_memory: Optional[int] = None, recorded_limit: Optional[int] = None,
           html=None, threads: Optional[int] = None, policy: Optional[str] = None,
           placement: Optional[str] = None) -> dict:
    """Which PYTORCH_CUDA_ALLOC_CONF the traced run should use (see
    `cachealloc advise --help`): native's settings searched by replay,
    ranked by the smallest memory without an OOM, then OOMs under
    memory_limit, then (within 1 % of the best) the fewest device calls.

    memory_limit: bytes the run gets. device_memory: the device's total
    bytes; with memory_limit, garbage_collection_threshold is searched and
    a recommendation using it carries per_process_memory_fraction.
    html: also write a page that opens with the answer.

    Returns the tool's JSON as a dict: "recommendation" (the
    PYTORCH_CUDA_ALLOC_CONF value, "" for defaults), "headline", "reason",
    "nothing_helps", "saving" and "best_saving" (fractions of the trace's
    own minimum), "notes", "seconds", and "configs", best first, each with
    label, line, min_memory, peak_reserved, ooms, device_allocs,
    device_frees, probes (bytes where sizes). policy: every candidate runs
    under this placement policy (default native); placement: as for
    compare()."""
    args = ["advise", os.fspath(trace_path)]
    for flag, value in (("--memory-limit", memory_limit), ("--device-memory", device_memory),
                        ("--recorded-limit", recorded_limit), ("--threads", threads)):
        if value is not None:
            args += [flag, str(int(value))]
    if html is not None:
        args += ["--html", os.fspath(html)]
    return _run(args + _policy_args(policy, placement))


# memory_stats counters that a trace cannot always show, each with why.
# stats_mismatches checks them by the exact relation the trace implies.
UNOBSERVABLE_COUNTERS = {
    # An empty_cache() that frees nothing counts a synchronization of all
    # streams and leaves no event.
    "num_sync_all_streams": "an empty_cache() that frees nothing leaves no event",
    # An empty_cache() just before a request, and that request's OOM retry
    # (which synchronizes and frees every free segment before retrying),
    # leave the same events: only the retry counts in num_alloc_retries.
    "num_alloc_retries": "an empty_cache() before a request leaves the same events as its retry",
}


def stats_mismatches(recorded: dict, replayed: dict, empty_cache_calls: int = 0,
                     inferred_empty_cache_calls: int = 0) -> dict:
    """Keys of a recorded run's memory_stats that a replay of its trace got
    wrong: {key: (replayed, recorded)}.

    Every key must be equal, except the UNOBSERVABLE_COUNTERS, which must
    differ exactly as the trace's blind spots explain. The recorded run
    called empty_cache() `empty_cache_calls` times (the recorder knows); the
    replay took `inferred_empty_cache_calls` runs of events for such calls
    (its JSON's "empty_cache_calls"). Each call syncs all streams once. A
    call that freed nothing left no event: the replay misses its sync. A
    call the replay took for the next request's OOM retry (or a retry it
    took for a call) moves one from calls to num_alloc_retries. So, exactly:
        recorded syncs - replayed syncs  >= 0  (the calls that left no event)
        (recorded syncs - replayed syncs) + (replayed retries - recorded
        retries) == empty_cache_calls - inferred_empty_cache_calls.
    Otherwise both counters are reported."""
    out = {}
    for key, want in recorded.items():
        got = replayed.get(key)
        if got != want and key not in UNOBSERVABLE_COUNTERS:
            out[key] = (got, want)
    sync, retry = "num_sync_all_streams", "num_alloc_retries"
    if sync in recorded or retry in recorded:
        got_s, want_s = replayed.get(sync), recorded.get(sync)
        got_r, want_r = replayed.get(retry), recorded.get(retry)
        explained = (None not in (got_s, want_s, got_r, want_r) and want_s - got_s >= 0 and
                     (want_s - got_s) + (got_r - want_r) ==
                     empty_cache_calls - inferred_empty_cache_calls)
        if not explained:
            for key in (sync, retry):
                if key in recorded:
                    out[key] = (replayed.get(key), recorded[key])
    return out
