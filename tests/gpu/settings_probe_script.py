"""Issue 32's probes of large_segment_size_mb and the settings re-parse rule,
as unmodified PyTorch code. Run as

    python settings_probe_script.py native|cachealloc ITEM [OUT_DIR]

in a fresh process per (allocator, item): the config is read at start-up,
so each item sets PYTORCH_CUDA_ALLOC_CONF before torch is imported. Prints
one JSON object: the segments' sizes and the reserved bytes seen. Item
`record_classic` / `record_expandable` (native) also write a snapshot with
history and its .json into OUT_DIR, for tests/data.
"""
import json
import os
import random
import sys

mode, item = sys.argv[1], sys.argv[2]
out_dir = sys.argv[3] if len(sys.argv) > 3 else None
CONFS = {
    "large40": "large_segment_size_mb:40",
    "large64_expandable": "large_segment_size_mb:64,expandable_segments:True",
    "reparse": "max_split_size_mb:40,max_non_split_rounding_mb:200",
    "record_classic": "large_segment_size_mb:40,max_split_size_mb:64",
    "record_expandable": "large_segment_size_mb:64,expandable_segments:True",
}
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = CONFS[item]

import torch  # noqa: E402

if mode == "cachealloc":
    import cachealloc

    cachealloc.install()
    assert cachealloc.mode() == "torch-extension", cachealloc.mode()

MiB = 2**20
out = {"mode": mode, "item": item, "conf": CONFS[item], "torch": torch.__version__}


def segment_sizes():
    return sorted(s["total_size"] for s in torch.cuda.memory_snapshot())


def tensor(mib):
    return torch.empty(int(mib * MiB), dtype=torch.uint8, device="cuda")


if item in ("large40", "large64_expandable"):
    held = [tensor(m) for m in (2, 5, 9, 1.5, 7)]
    out["segments"] = segment_sizes()
    out["reserved"] = torch.cuda.memory_reserved()
    held.append(tensor(30))
    out["segments_after_30"] = segment_sizes()
    out["reserved_after_30"] = torch.cuda.memory_reserved()
elif item == "reparse":
    big = tensor(100)
    del big
    torch.cuda.memory._set_allocator_settings("max_split_size_mb:40")
    held = tensor(60)
    out["segments"] = segment_sizes()
    out["reserved"] = torch.cuda.memory_reserved()
else:
    # A small churn of 1-30 MiB tensors with a fixed seed, with history.
    torch.cuda.memory._record_memory_history(max_entries=100000)
    rng = random.Random(32)
    live = []
    for step in range(400):
        if live and rng.random() < 0.45:
            live.pop(rng.randrange(len(live)))
        else:
            live.append(tensor(rng.choice([0.25, 1.5, 3, 6, 9, 12, 30]) * rng.uniform(0.5, 1.0)))
        if step == 200:
            torch.cuda.empty_cache()
    live.clear()
    out["segments"] = segment_sizes()
    out["reserved"] = torch.cuda.memory_reserved()
    if out_dir:
        name = f"large_segment_{'expandable' if 'expandable' in item else 'classic'}"
        snap = torch.cuda.memory._snapshot()
        import gzip
        import pickle
        with gzip.open(os.path.join(out_dir, name + ".pickle.gz"), "wb") as f:
            pickle.dump(snap, f)
        props = torch.cuda.get_device_properties(0)
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump({"conf": CONFS[item], "device": props.name, "name": name,
                       "device_total_memory": props.total_memory, "memory_fraction": None,
                       "n_events": len(snap["device_traces"][0]), "ooms_caught": 0,
                       "workload": "settings_probe_script.py " + item, "torch": torch.__version__,
                       "final_memory_stats": dict(sorted(torch.cuda.memory_stats().items()))},
                      f, indent=1)
    torch.cuda.memory._record_memory_history(enabled=None)
print(json.dumps(out))
