"""Trains GPT-2 small (built from transformers' GPT2Config(), no download:
the GPU box has no network) in bf16 with AdamW at sequence length 1024, in
this fresh process under one allocator, and prints one JSON line.

    python tests/gpu/gpt2_train_script.py native|cachealloc --batch 28 --steps 3
        [--fraction 0.5] [--conf PYTORCH_CUDA_ALLOC_CONF] [--snapshot OUT.pickle]

--conf is set as PYTORCH_CUDA_ALLOC_CONF before torch loads (native) or
given to cachealloc.install (cachealloc). --fraction calls
torch.cuda.set_per_process_memory_fraction before the first allocation.
--snapshot records the allocator's history (Python frames included) and
dumps it, even when a step ran out of memory. The JSON: ok (every step ran),
oom_step (the step that raised OutOfMemoryError, or null), losses, step
seconds, peak reserved/allocated bytes, num_ooms, num_alloc_retries,
num_device_alloc, the device's total bytes, and the conf in force.
"""
import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))

SEQUENCE = 1024


def main():
    p = argparse.ArgumentParser()
    p.add_argument("allocator", choices=["native", "cachealloc"])
    p.add_argument("--batch", type=int, default=28)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--fraction", type=float, default=None)
    p.add_argument("--conf", default="")
    p.add_argument("--snapshot", default=None)
    args = p.parse_args()
    if args.allocator == "native":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.conf
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    if args.allocator == "cachealloc":
        import cachealloc

        cachealloc.install(conf=args.conf)
        assert cachealloc.mode() == "torch-extension", cachealloc.mode()
    if args.fraction is not None:
        torch.cuda.set_per_process_memory_fraction(args.fraction, 0)
    if args.snapshot:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to(device="cuda", dtype=torch.bfloat16)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device="cuda").manual_seed(1)
    losses, seconds, oom_step = [], [], None
    for step in range(args.steps):
        start = time.perf_counter()
        try:
            ids = torch.randint(0, model.config.vocab_size, (args.batch, SEQUENCE), device="cuda",
                                generator=generator)
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(loss))
            del ids, loss
        except torch.OutOfMemoryError:
            oom_step = step
            break
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    if args.snapshot:
        torch.cuda.memory._dump_snapshot(args.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats(0)
    print(json.dumps({
        "allocator": args.allocator, "conf": args.conf, "batch": args.batch,
        "fraction": args.fraction, "ok": oom_step is None and len(losses) == args.steps,
        "oom_step": oom_step, "losses": losses, "step_seconds": seconds,
        "peak_reserved": stats.get("reserved_bytes.all.peak", 0),
        "peak_allocated": stats.get("allocated_bytes.all.peak", 0),
        "num_ooms": stats.get("num_ooms", 0), "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "num_device_alloc": stats.get("num_device_alloc", 0),
        "total_memory": torch.cuda.get_device_properties(0).total_memory,
    }))


if __name__ == "__main__":
    main()
