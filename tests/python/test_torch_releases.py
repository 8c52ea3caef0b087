"""The memory_stats keys each supported torch release has, read from its
wheel (tests/data/torch_releases/VERSION/stats_keys.txt), against the keys
cachealloc counts. The glue fills the installed torch's own DeviceStats, so
a release's key set is what users see; the keys cachealloc does not count
are the named ones, left at torch's defaults (num_oom_rejections: 0, as
native counts with throw_on_cudamalloc_oom off; reserved_bytes_by_private_pools:
empty, where native has one set per private pool)."""
from __future__ import annotations

import os

import pytest

RELEASES = os.path.join(os.path.dirname(__file__), "..", "data", "torch_releases")
PRIVATE_POOLS = {f"reserved_bytes_by_private_pools.<pool>.{p}.{f}"
                 for p in ("all", "large_pool", "small_pool")
                 for f in ("allocated", "current", "freed", "peak")}
LEFT_AT_TORCH_DEFAULTS = {
    "2.11.0": set(),
    "2.12.0": {"num_oom_rejections"},
    "2.13.0": {"num_oom_rejections"} | PRIVATE_POOLS,
    "2.14.1": {"num_oom_rejections"} | PRIVATE_POOLS,
}


def _lines(version: str, name: str) -> list[str]:
    with open(os.path.join(RELEASES, version, name), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


@pytest.mark.parametrize("version", sorted(LEFT_AT_TORCH_DEFAULTS))
def test_stats_keys_are_the_releases_less_the_named_defaults(ca, version):
    ours = set(ca.memory_stats(0))
    assert len(ours) >= 122
    theirs = set(_lines(version, "stats_keys.txt"))
    assert ours <= theirs, f"torch {version} has no {sorted(ours - theirs)}"
    assert theirs - ours == LEFT_AT_TORCH_DEFAULTS[version]


@pytest.mark.parametrize("version", sorted(LEFT_AT_TORCH_DEFAULTS))
def test_settings_keys_follow_the_release_told(ca, version):
    """Told (as install() tells it) that it runs under `version`, the
    library refuses the keys other releases added, in that release's words,
    and accepts that release's new keys."""
    from cachealloc._native import lib
    l = lib()
    accepted = set(_lines(version, "accepted_keys.txt"))
    every = set()
    for v in LEFT_AT_TORCH_DEFAULTS:
        every |= set(_lines(v, "accepted_keys.txt"))
    head, tail = _lines(version, "refusal_text.txt")
    assert l.cachealloc_set_torch_version(version.encode()) == 0
    try:
        ca.init("", "simulated:8589934592")  # as install(): the version first, then init
        for key in sorted(every - accepted) + ["bogus_key"]:
            assert l.cachealloc_check_allocator_settings(f"{key}:1".encode()) == -1, key
            assert (head + key + tail) in l.cachealloc_last_error().decode()
        new_keys = {"pinned_free_catch_all": "True", "throw_on_cudamalloc_oom": "False",
                    "pinned_max_round_threshold_mb": "64", "pinned_max_cached_size_mb": "64"}
        for key, value in new_keys.items():
            if key in accepted:
                assert l.cachealloc_check_allocator_settings(f"{key}:{value}".encode()) == 0, key
        if "throw_on_cudamalloc_oom" in accepted:  # valid, but not carried out
            assert l.cachealloc_check_allocator_settings(b"throw_on_cudamalloc_oom:True") == -2
    finally:
        l.cachealloc_set_torch_version(b"2.11.0")


# Documented trace entry keys cachealloc's own snapshots (the tool's, and
# cachealloc.snapshot()) do not write yet: 2.12's pool_id needs the
# private pool on engine events and history records. Under the glue torch
# writes pool_id itself, from the entry's pool, which the glue gives as
# (0, 0).
TRACE_FIELDS_NOT_WRITTEN = {
    "2.11.0": set(), "2.12.0": {"pool_id"}, "2.13.0": {"pool_id"}, "2.14.1": {"pool_id"}}


@pytest.mark.parametrize("version", sorted(TRACE_FIELDS_NOT_WRITTEN))
def test_trace_entry_fields_are_the_documented_ones_less_the_named(ca, version):
    ca.record_memory_history("all", max_entries=1000)
    kept = ca._malloc(1 << 20)
    ca._free(ca._malloc(1 << 20))
    with pytest.raises(Exception):
        ca._malloc(1 << 40)  # past the 8 GiB simulated device: an oom entry
    ca._free(kept)
    (trace,) = ca.snapshot()["device_traces"]
    ours = set().union(*(entry.keys() for entry in trace))
    assert {e["action"] for e in trace} >= {"alloc", "free_requested", "oom", "segment_alloc"}
    documented = set(_lines(version, "trace_entry_fields.txt"))
    assert documented - ours == TRACE_FIELDS_NOT_WRITTEN[version]
