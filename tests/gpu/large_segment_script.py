"""large_segment_size_mb and the settings re-parse rule, probed in one
fresh process: `python3 large_segment_script.py ALLOCATOR CASE` prints one
JSON line {"case", "allocator", "result"}; ALLOCATOR is native or
cachealloc (glue mode), CASE one of CASES. Results are segment sizes in MiB
(addresses differ between processes), so native's and cachealloc's lines
compare directly (test_large_segment_gpu.py)."""
import json
import os
import sys

MiB = 1 << 20
# case -> PYTORCH_CUDA_ALLOC_CONF at start-up.
CASES = {
    "default": "",
    "large40": "large_segment_size_mb:40",
    "large64_expandable": "large_segment_size_mb:64,expandable_segments:True",
    # Native reads large_segment_size_mb first wherever it stands: 40 MiB
    # is a valid max_split_size only because of it.
    "large40_after_split": "max_split_size_mb:40,large_segment_size_mb:40",
    "reparse": "max_split_size_mb:40,max_non_split_rounding_mb:200",
}


def segments(torch):
    return sorted(s["total_size"] // MiB for s in torch.cuda.memory_snapshot())


def sizes_probe(torch):
    """Segments for 1-10 MiB requests: each size alone after empty_cache,
    then five 9 MiB tensors held together (how many share a segment)."""
    out = {}
    for mib in (1.5, 4, 9.9):
        t = torch.empty(int(mib * MiB), dtype=torch.uint8, device="cuda")
        out[str(mib)] = segments(torch)
        del t
        torch.cuda.empty_cache()
    held = [torch.empty(9 * MiB, dtype=torch.uint8, device="cuda") for _ in range(5)]
    out["5x9"] = segments(torch)
    del held
    torch.cuda.empty_cache()
    return out


def reparse_probe(torch):
    """The issue's case: alloc+free 100 MiB, a settings call naming only
    max_split_size_mb, then 60 MiB: [60, 100] when the call resets
    max_non_split_rounding (native 2.11), [100] when it keeps 200 MiB."""
    t = torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
    del t
    torch.cuda.memory._set_allocator_settings("max_split_size_mb:40")
    u = torch.empty(60 * MiB, dtype=torch.uint8, device="cuda")
    out = {"segments": segments(torch)}
    del u
    # large_segment_size persists across settings calls, and the minimum of
    # max_split_size_mb follows it.
    return out


def main():
    allocator, case = sys.argv[1], sys.argv[2]
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = CASES[case]
    import torch

    if allocator == "cachealloc":
        import cachealloc

        cachealloc.install()
        assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    result = reparse_probe(torch) if case == "reparse" else sizes_probe(torch)
    if case == "large40":
        # After a settings call not naming it, 40 MiB still holds.
        torch.cuda.memory._set_allocator_settings("garbage_collection_threshold:0.9")
        t = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
        result["after_settings_call"] = segments(torch)
        del t
        try:
            torch.cuda.memory._set_allocator_settings("max_split_size_mb:30")
            result["split30"] = "accepted"
        except Exception as e:  # noqa: BLE001 -- the refusal is the result
            result["split30"] = "refused: " + type(e).__name__
    print(json.dumps({"case": case, "allocator": allocator, "result": result}))


if __name__ == "__main__":
    main()
