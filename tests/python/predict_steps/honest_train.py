"""A training script that goes wrong in the ways users' scripts do, for
tests/python/test_predict_honest.py (--mode picks one):

  swallow_build  the model's build fails and the script catches it
                 (print(e)): no CUDA allocation at all
  swallow_step   the model is on "cuda" but every step fails (a shape
                 mistake) and the script catches it: no optimizer step
  inference      no optimizer at all (an evaluation script)
  short          stops after one optimizer step
  ignores_size   trains, but never reads BATCH (--batch-env) or its
                 --batch-size: a size search cannot reach the step
  train          trains normally
"""
import argparse
import os

import torch

p = argparse.ArgumentParser()
p.add_argument("--mode", default="train")
p.add_argument("--batch-size", type=int, default=4)
p.add_argument("--steps", type=int, default=100)
args = p.parse_args()
batch = int(os.environ.get("BATCH", args.batch_size)) if args.mode != "ignores_size" else 16
steps = 1 if args.mode == "short" else args.steps


def build():
    if args.mode == "swallow_build":
        raise RuntimeError("layer 3 wants 512 inputs, got 256: cannot build the model")
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 256)).to("cuda")


print("starting the run", flush=True)
try:
    model = build()
    x = torch.randn(batch, 256 if args.mode != "swallow_step" else 300, device="cuda")
    if args.mode == "inference":
        with torch.no_grad():
            for _ in range(3):
                y = model(x)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for i in range(steps):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
except Exception as e:
    print(f"training stopped: {e}")
print("the run is over")
