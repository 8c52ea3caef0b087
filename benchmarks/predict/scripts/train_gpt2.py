"""A plain GPT-2-small training script, as a user writes it: nothing in it
knows about cachealloc. `cachealloc predict` runs it unmodified on the fake
device (rewriting --batch-size); benchmarks/predict/unmodified_check.sh then
runs it on the GPU at the predicted largest batch and at one more.

    python train_gpt2.py --batch-size 8 --steps 20
"""
import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--seq-len", type=int, default=1024)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--lr", type=float, default=3e-4)
args = p.parse_args()

torch.manual_seed(0)
config = GPT2Config()                        # GPT-2 small: 12 layers, 768 wide, 124 M parameters
config._attn_implementation = "eager"
model = GPT2LMHeadModel(config).to("cuda", dtype=torch.bfloat16)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

for step in range(args.steps):
    t0 = time.perf_counter()
    ids = torch.randint(0, config.vocab_size, (args.batch_size, args.seq_len), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(f"step {step} loss {loss.item():.3f} {time.perf_counter() - t0:.3f}s "
          f"peak reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB")
