"""A normal training script that reads many values: an evaluation pass of
1200 reads before the first optimizer step, and gradient accumulation
over 400 micro-batches per step with a value-dependent branch on each
(1200 branch reads on one line over three steps). None of this is a loop
spinning on a placeholder: the loop rule (at most 1000 branch reads of one
line between two optimizer steps) must not fire."""
import os

import torch

batch = int(os.environ.get("B", "4"))
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).cuda()
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(batch, 32, device="cuda")
total = 0.0
with torch.no_grad():
    for _ in range(1200):                       # evaluation before training: reads, no branch
        total += model(x).mean().item()
print(f"eval {total / 1200:.3f}")
skipped = 0
for step in range(3):
    for micro in range(400):
        loss = model(x).square().mean() / 400
        if (loss > 1e9).any():                  # a branch on a value, every micro-batch
            skipped += 1
            continue
        loss.backward()
    opt.step()
    opt.zero_grad()
    print(f"step {step} loss {loss.item():.4f} skipped {skipped}")
