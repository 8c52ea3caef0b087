"""Fine-tuning with dynamic padding: a fixed number of sequences per batch,
each batch padded to its own longest sequence, whose length is drawn per
batch from a long-tailed distribution (common.long_tail, fixed seed). The
tensors of consecutive steps differ in size by up to 10x, so blocks cached
for one step rarely fit the next exactly. With `checkpoint`, every block is
recomputed in the backward pass (gradient checkpointing).

Size: tokens of the longest batch = batch x maximum length (the maximum
length is size // batch, rounded down to a multiple of 8). Step 1 always
reaches the maximum, so every run of 2 or more steps meets its peak shape.
"""
from __future__ import annotations

import common

UNIT = "tokens"


def grain(device: str) -> int:
    """Sizes are multiples of this (batch x 8 tokens)."""
    return common.dims_for(device).batch * 8


class FinetunePadding:
    def __init__(self, size: int, device: str, seed: int = 0, checkpoint: bool = False):
        import torch

        self.d = common.dims_for(device)
        self.max_len = (size // self.d.batch) // 8 * 8
        if self.max_len < 8:
            raise ValueError(f"size {size} tokens is below one batch of 8-token sequences "
                             f"({self.d.batch * 8})")
        self.size, self.device, self.seed, self.checkpoint = size, device, seed, checkpoint
        common.seed_all(seed)
        self.lm = common.make_lm(self.d).to(device)
        self.opt = torch.optim.AdamW(self.lm.parameters(), lr=1e-4)

    def shape(self, i: int):
        """(padded length, each sample's own length) of step i."""
        rng = common.step_rng(self.seed, i)
        length = self.max_len if i == 1 else common.long_tail(rng, 8, self.max_len)
        # The batch's own lengths: one sample sets the padded length.
        own = [length] + [rng.randint(max(1, length // 4), length) for _ in range(self.d.batch - 1)]
        return length, own

    def step(self, i: int) -> float:
        import torch

        length, own = self.shape(i)
        g = torch.Generator().manual_seed(self.seed * 7919 + i)
        tokens = torch.randint(0, self.d.vocab, (self.d.batch, length + 1), generator=g).to(self.device)
        targets = common.padded_targets(tokens, own)
        with common.autocast(self.device):
            logits = common.lm_forward(self.lm, tokens[:, :-1], checkpoint=self.checkpoint)
        loss = common.lm_loss(logits, targets)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()
