"""Generation with growing KV caches and varying prompt lengths: each step
serves one batch of requests whose prompt length is drawn from a
long-tailed distribution, prefills it, then generates a fixed number of
tokens one at a time. Every layer's cache grows by concatenation (a new
tensor one token longer at each token, the old one freed), as a plain
generation loop does, so the cache's blocks change size all the time.

Size: the KV length, in tokens per sequence (prompt + generated) of the
longest request. Step 1 always reaches it.
"""
from __future__ import annotations

import common

UNIT = "KV tokens"


def grain(device: str) -> int:
    return 8


class KVGeneration:
    def __init__(self, size: int, device: str, seed: int = 0):
        self.d = common.dims_for(device)
        self.new = min(self.d.gen_tokens, size // 2)
        if self.new < 1 or size < 8:
            raise ValueError(f"size {size}: the KV length must be at least 8 tokens")
        self.size, self.device, self.seed = size, device, seed
        common.seed_all(seed)
        self.lm = common.make_lm(self.d).to(device).eval()

    def prompt_len(self, i: int) -> int:
        top = self.size - self.new
        if i == 1:
            return top
        return common.long_tail(common.step_rng(self.seed, i), 1, top, multiple=1)

    def step(self, i: int) -> float:
        import torch

        g = torch.Generator().manual_seed(self.seed * 7919 + i)
        prompt = torch.randint(0, self.d.vocab, (self.d.batch, self.prompt_len(i)), generator=g)
        out = common.generate(self.lm, prompt.to(self.device), self.new, self.device)
        return float(out[:, -self.new:].sum().item())
