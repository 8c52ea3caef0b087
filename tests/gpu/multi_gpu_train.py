"""DDP or FSDP2 training of GPT-2 small (transformers' GPT2Config, nothing
downloaded) or a Llama-style decoder, one process per GPU under torchrun.
The script never imports cachealloc to train: run it under native, or under
`cachealloc run -- torchrun ...` for cachealloc.

    torchrun --nproc-per-node 2 multi_gpu_train.py --mode ddp|fsdp2 --out DIR
        [--model gpt2|llama] [--steps 25] [--batch 8] [--seq 1024]
        [--history]    record allocation history; native ranks dump their
                       snapshot into DIR/run/rank-NNNNN/ (rank_files' names);
                       under `cachealloc run --snapshot-dir DIR/run` cachealloc
                       writes it at exit

fp32 parameters, bf16 autocast, AdamW. Each rank writes DIR/rank-N.json:
losses, step seconds, memory_stats() at the end (peaks are the run's),
the allocator, and on rank 0 under cachealloc the stats gathered from every
rank (cachealloc.distributed.gather_stats).
"""
import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings" / "python"))


def build_model(name):
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        return GPT2LMHeadModel(GPT2Config()), 50257
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                         num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                         max_position_embeddings=2048)
    return LlamaForCausalLM(config), config.vocab_size


def blocks(model, name):
    return model.transformer.h if name == "gpt2" else model.model.layers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "fsdp2"], required=True)
    p.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--out", required=True)
    p.add_argument("--history", action="store_true")
    args = p.parse_args()
    import torch
    import torch.distributed as dist

    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    ours = "cachealloc" in sys.modules and sys.modules["cachealloc"].is_installed()
    if args.history and not ours:
        torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    dist.init_process_group("nccl", device_id=device)
    torch.manual_seed(0)
    model, vocab = build_model(args.model)
    model = model.to(device)
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[local])
    else:
        from torch.distributed.fsdp import fully_shard

        for block in blocks(model, args.model):
            fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device=device).manual_seed(1000 + rank)
    losses, times = [], []
    for _ in range(args.steps):
        tokens = torch.randint(0, vocab, (args.batch, args.seq), device=device, generator=generator)
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    result = {"rank": rank, "mode": args.mode, "model": args.model,
              "allocator": "cachealloc" if ours else "native",
              "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
              "losses": losses, "step_seconds": times,
              "memory_stats": dict(torch.cuda.memory_stats(device))}
    if ours:
        import cachealloc.distributed

        result["gathered"] = cachealloc.distributed.gather_stats()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank-{rank}.json").write_text(json.dumps(result))
    if args.history and not ours:
        from cachealloc import rank_files

        path = rank_files.snapshot_path(out / "run", rank, "end")
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(path))
        rank_files.stats_path(out / "run", rank).write_text(json.dumps(
            {"rank": rank, "devices": {str(local): result["memory_stats"]}}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
