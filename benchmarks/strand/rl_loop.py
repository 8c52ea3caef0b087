"""A generate-then-train loop in one process (RL from feedback, as PPO-style
trainers run it on one GPU): each step generates continuations of a batch
of prompts with a growing KV cache (no gradients), scores them with a
no-gradient forward pass (the old log-probabilities), then trains on the
generated sequences (a policy-gradient loss with made-up rewards, AdamW).
Generation's many short-lived, growing cache blocks and training's large
activations alternate in the same cache.

Size: the sequence length in tokens (prompt + generated; the KV length of
generation and the sequence length of training), for a fixed batch. Prompt
lengths are long-tailed; step 1 reaches the size.
"""
from __future__ import annotations

import common

UNIT = "KV tokens"


def grain(device: str) -> int:
    return 8


class RLLoop:
    def __init__(self, size: int, device: str, seed: int = 0):
        import torch

        self.d = common.dims_for(device)
        self.batch = max(1, self.d.batch // 2)
        self.new = min(self.d.gen_tokens, size // 2)
        if self.new < 1 or size < 8:
            raise ValueError(f"size {size}: the sequence length must be at least 8 tokens")
        self.size, self.device, self.seed = size, device, seed
        common.seed_all(seed)
        self.lm = common.make_lm(self.d).to(device)
        self.opt = torch.optim.AdamW(self.lm.parameters(), lr=1e-5)

    def prompt_len(self, i: int) -> int:
        top = self.size - self.new
        if i == 1:
            return top
        return common.long_tail(common.step_rng(self.seed, i), 1, top, multiple=1)

    def step(self, i: int) -> float:
        import torch

        g = torch.Generator().manual_seed(self.seed * 7919 + i)
        prompt = torch.randint(0, self.d.vocab, (self.batch, self.prompt_len(i)), generator=g)
        p = prompt.shape[1]
        self.lm.eval()
        seq = common.generate(self.lm, prompt.to(self.device), self.new, self.device)
        rewards = torch.randn(self.batch, 1, generator=g).to(self.device)
        inputs, chosen = seq[:, :-1], seq[:, 1:]
        with torch.no_grad(), common.autocast(self.device):
            old = torch.log_softmax(common.lm_forward(self.lm, inputs).float(), -1)
            old = old.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)[:, p - 1:]
        self.lm.train()
        with common.autocast(self.device):
            logits = common.lm_forward(self.lm, inputs)
        new = torch.log_softmax(logits.float(), -1).gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
        ratio = torch.exp(new[:, p - 1:] - old)
        loss = -(torch.clamp(ratio, 0.8, 1.2) * rewards).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()
