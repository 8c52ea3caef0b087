"""An unmodified little training script: reads --batch-size, prints the loss."""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=4)
p.add_argument("--steps", type=int, default=100)
args = p.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for i in range(args.steps):
    x = torch.randn(args.batch_size, 256, device=device)
    loss = (model(x) - x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {i} loss {loss.item():.4f} on {torch.cuda.get_device_name()}")
