"""PyTorch's run-time allocator settings (torch.cuda.memory.
_set_allocator_settings) reaching cachealloc through the hook that
install() sets (cachealloc/torch_settings.py), on a simulated device with
PyTorch's CPU build. The GPU side: tests/gpu/test_expectations_gpu.py."""
import warnings

import pytest

torch = pytest.importorskip("torch")

MiB = 2**20


@pytest.fixture
def hooked(ca):
    from cachealloc import torch_settings

    saved = {n: getattr(torch._C, n) for n in torch_settings._SETTER_NAMES
             if hasattr(torch._C, n)}
    if not saved:
        pytest.skip(f"torch {torch.__version__} has no allocator-settings setter")
    torch_settings.install_settings_hook()
    yield ca
    for name, fn in saved.items():
        setattr(torch._C, name, fn)
    saved_setter = saved.get("_accelerator_setAllocatorSettings")
    if saved_setter:
        saved_setter("")  # PyTorch's own config back to its defaults


def block_bytes(ca, nbytes):
    """The rounded bytes cachealloc gives a request of `nbytes`."""
    before = ca.memory_allocated()
    p = ca._malloc(nbytes)
    size = ca.memory_allocated() - before
    ca._free(p)
    return size


def setter():
    return torch._C._accelerator_setAllocatorSettings


def test_settings_apply_to_later_requests(hooked):
    assert block_bytes(hooked, 84 * MiB + 1) == 84 * MiB + 512
    with warnings.catch_warnings():  # deprecated in torch 2.11 for torch._C's name
        warnings.simplefilter("ignore", FutureWarning)
        torch.cuda.memory._set_allocator_settings("roundup_power2_divisions:4")
    assert block_bytes(hooked, 84 * MiB + 1) == 96 * MiB
    # PyTorch's own config got the text too (its pinned allocator reads it).
    assert torch._C._accelerator_getAllocatorSettings() == "roundup_power2_divisions:4"
    # A call that does not name the divisions puts them back to their default.
    setter()("garbage_collection_threshold:0.5")
    assert block_bytes(hooked, 84 * MiB + 1) == 84 * MiB + 512


def test_unknown_key_is_a_value_error_and_changes_nothing(hooked):
    setter()("roundup_power2_divisions:4")
    with pytest.raises(ValueError, match="Unrecognized key 'bogus_key' in Accelerator"):
        setter()("roundup_power2_divisions:8,bogus_key:1")
    assert block_bytes(hooked, 84 * MiB + 1) == 96 * MiB


def test_bad_value_raises_pytorchs_own_error(hooked):
    setter()("roundup_power2_divisions:4")
    with pytest.raises(ValueError, match="max_split_size_mb too small"):
        setter()("max_split_size_mb:10")
    assert block_bytes(hooked, 84 * MiB + 1) == 96 * MiB


def test_expandable_segments_at_run_time_maps_pages(hooked):
    """expandable_segments:True set at run time changes where new memory
    comes from: pages mapped into a reserved range, which native counts in
    reserved bytes but not as a segment."""
    hooked.empty_cache()
    setter()("expandable_segments:True")
    assert torch._C._accelerator_getAllocatorSettings() == "expandable_segments:True"
    before = hooked.memory_stats()
    p = hooked._malloc(3 * MiB)
    after = hooked.memory_stats()
    assert after["segment.all.current"] == before["segment.all.current"]
    assert after["reserved_bytes.all.current"] - before["reserved_bytes.all.current"] == 20 * MiB
    assert after["num_device_alloc"] == before["num_device_alloc"] + 1
    hooked._free(p)
    setter()("expandable_segments:False")
    hooked.empty_cache()  # unmaps the page, expandable or not
    assert hooked.memory_stats()["reserved_bytes.all.current"] == before["reserved_bytes.all.current"]


def test_not_a_string_gets_pytorchs_type_error(hooked):
    with pytest.raises(TypeError):
        setter()(4)


def test_hook_wraps_once(hooked):
    from cachealloc import torch_settings

    wrapped = setter()
    torch_settings.install_settings_hook()
    assert setter() is wrapped
