"""A training script whose CUDA-side init samples by rejection, as torch
2.13's trunc_normal_ does: on the fake device the loop's test reads a
placeholder (True) and never ends; the predictor must catch it."""
import torch

w = torch.empty(256, 256, device="cuda")
x = w.normal_(0.0, 1.0)
while True:
    mask = (x < -2.0) | (x > 2.0)
    if not mask.any():          # the loop: line 10
        break
    x = torch.where(mask, torch.empty_like(x).normal_(0.0, 1.0), x)
w.copy_(x)
opt = torch.optim.SGD([w.requires_grad_()], lr=0.1)
for _ in range(3):
    (w * 2).sum().backward()
    opt.step()
