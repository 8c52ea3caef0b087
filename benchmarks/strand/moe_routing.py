"""A mixture-of-experts model with uneven routing: every layer routes each
token to its top-2 of E experts, and the router favours a few experts by a
bias that changes every step (a Zipf-like preference over a per-step
shuffle of the experts), so each expert's batch changes size from step to
step while their sum stays fixed. Dropless dispatch: tokens are sorted by
expert, each expert runs on its slice, the outputs are scattered back.
Trained with AdamW.

Size: tokens per batch.
"""
from __future__ import annotations

import math

import common

UNIT = "tokens"
TOP_K = 2


def grain(device: str) -> int:
    return 8


def make_moe_layer(width: int, experts: int):
    import torch
    import torch.nn.functional as F

    class MoE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(width)
            self.router = torch.nn.Linear(width, experts)
            self.up = torch.nn.ModuleList(torch.nn.Linear(width, 4 * width) for _ in range(experts))
            self.down = torch.nn.ModuleList(torch.nn.Linear(4 * width, width) for _ in range(experts))

        def forward(self, x, bias):
            n, _ = x.shape
            h = self.norm(x)
            weights, ids = torch.topk(torch.softmax(self.router(h).float() + bias, -1), TOP_K, -1)
            flat = ids.reshape(-1)
            order = torch.argsort(flat, stable=True)
            counts = torch.bincount(flat, minlength=experts).tolist()  # the loads, on the host
            rows = h.repeat_interleave(TOP_K, dim=0)[order]
            outs = [self.down[e](F.gelu(self.up[e](part)))
                    for e, part in enumerate(torch.split(rows, counts)) if counts[e]]
            y = torch.empty_like(rows).index_copy(0, order, torch.cat(outs).to(rows.dtype))
            y = (y.view(n, TOP_K, -1) * weights.unsqueeze(-1).to(y.dtype)).sum(1)
            return x + y

    return MoE()


class MoERouting:
    def __init__(self, size: int, device: str, seed: int = 0):
        import torch

        if size < 8:
            raise ValueError(f"size {size}: at least 8 tokens")
        self.d = common.dims_for(device)
        self.size, self.device, self.seed = size, device, seed
        common.seed_all(seed)
        self.model = torch.nn.ModuleDict({
            "embed": torch.nn.Embedding(self.d.vocab, self.d.width),
            "layers": torch.nn.ModuleList(make_moe_layer(self.d.width, self.d.experts)
                                          for _ in range(max(1, self.d.layers // 2))),
            "head": torch.nn.Linear(self.d.width, self.d.vocab),
        }).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def bias(self, i: int, layer: int):
        """Router bias of step i: expert at rank r of a per-step shuffle gets
        strength * log(1 / (r + 1)); the strength varies per step (1 to 4),
        so loads range from near-even to one expert taking most tokens."""
        import torch

        rng = common.step_rng(self.seed, i, salt=layer + 1)
        ranks = list(range(self.d.experts))
        rng.shuffle(ranks)
        strength = rng.uniform(1.0, 4.0)
        return torch.tensor([strength * math.log(1.0 / (r + 1)) for r in ranks], device=self.device)

    def step(self, i: int) -> float:
        import torch
        import torch.nn.functional as F

        g = torch.Generator().manual_seed(self.seed * 7919 + i)
        tokens = torch.randint(0, self.d.vocab, (self.size + 1,), generator=g).to(self.device)
        with common.autocast(self.device):
            x = self.model["embed"](tokens[:-1])
            for li, layer in enumerate(self.model["layers"]):
                x = layer(x, self.bias(i, li))
            logits = self.model["head"](x)
        loss = F.cross_entropy(logits.float(), tokens[1:])
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()
