"""A plain Vision Transformer training script, as a user writes it (nothing
in it knows about cachealloc, no torchvision): fp16 autocast with a
GradScaler, activation checkpointing per block (torch.utils.checkpoint,
use_reentrant=False), gradient accumulation over micro-batches, AdamW, and
attention through F.scaled_dot_product_attention. One of the workloads
issue 33 does not name (docs/prediction.md, "Workloads the issue does not
name"); benchmarks/predict/record_truth.py runs it on the GPU.

    python train_vit_amp.py --batch-size 32 --accum 2 --steps 20
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

p = argparse.ArgumentParser()
p.add_argument("--batch-size", type=int, default=32, help="per micro-batch")
p.add_argument("--accum", type=int, default=2, help="micro-batches per optimizer step")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--checkpoint", type=int, default=1)
args = p.parse_args()


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, N, D = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, D // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(B, N, D))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """ViT-S/16 at 224 x 224: 12 blocks, 384 wide, 6 heads, 22 M parameters."""

    def __init__(self, dim=384, depth=12, heads=6, patch=16, image=224, classes=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if args.checkpoint else block(x)
        return self.head(self.norm(x)[:, 0])


torch.manual_seed(0)
model = ViT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
scaler = torch.amp.GradScaler("cuda")

for step in range(args.steps):
    t0 = time.perf_counter()
    for micro in range(args.accum):
        images = torch.randn(args.batch_size, 3, 224, 224, device="cuda")
        labels = torch.randint(0, 1000, (args.batch_size,), device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(images), labels) / args.accum
        scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.3f} {time.perf_counter() - t0:.3f}s "
          f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
