"""Issue 32 on the GPU: large_segment_size_mb and the settings re-parse rule
give the same segments under cachealloc as under native (fresh processes,
settings_probe_script.py)."""
import pytest

from native_vs_cachealloc import run_both

MiB = 2**20


@pytest.mark.parametrize("item", ["large40", "large64_expandable", "reparse"])
def test_segments_as_native(item):
    native, ours = run_both("settings_probe_script.py", item)
    print(item, "native:", native, "cachealloc:", ours)
    for key in native:
        if key.startswith(("segments", "reserved")):
            assert ours[key] == native[key], key
    if item == "large40":
        assert native["segments"] == [40 * MiB]
    if item == "reparse":
        assert native["segments"] == [60 * MiB, 100 * MiB]
