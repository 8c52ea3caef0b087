"""A plain BERT-base masked-language-model training script, as a user writes
it (nothing in it knows about cachealloc): built from its config (nothing
downloaded), fp32, PyTorch's fused attention (attn_implementation="sdpa"),
an attention mask, 15 % of the tokens masked, AdamW. One of the workloads
issue 33 does not name (docs/prediction.md, "Workloads the issue does not
name"); benchmarks/predict/record_truth.py runs it on the GPU.

    python train_bert_mlm.py --batch-size 8 --seq-len 512 --steps 20
"""
import argparse
import time

import torch
from transformers import BertConfig, BertForMaskedLM

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--seq-len", type=int, default=512)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--lr", type=float, default=1e-4)
args = p.parse_args()

torch.manual_seed(0)
config = BertConfig(attn_implementation="sdpa")   # BERT-base: 12 layers, 768 wide, 110 M parameters
model = BertForMaskedLM(config).to("cuda")
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

for step in range(args.steps):
    t0 = time.perf_counter()
    ids = torch.randint(1000, config.vocab_size, (args.batch_size, args.seq_len), device="cuda")
    attention_mask = torch.ones_like(ids)
    chosen = torch.rand(ids.shape, device="cuda") < 0.15
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    inputs = ids.masked_fill(chosen, 103)        # [MASK]
    out = model(input_ids=inputs, attention_mask=attention_mask, labels=labels)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.3f} {time.perf_counter() - t0:.3f}s "
          f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
