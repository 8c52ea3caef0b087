"""What the strand workloads share: a small random-weight decoder language
model in plain torch (its KV cache grows by concatenation, as a naive
generation loop's does), the model's dimensions per device, and the
long-tailed length draw.

Sizes: one model for the GPU (about 55 M parameters, vocab 8192) and a tiny
one for the CPU, which exists so that tests can run every workload in
seconds. Every random choice of a step is a function of (seed, step index),
never of earlier steps: a timing round can run steps a..b of any process
and every allocator sees the same shapes in the same round.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import random


@dataclasses.dataclass(frozen=True)
class Dims:
    vocab: int
    width: int
    heads: int
    layers: int
    batch: int       # sequences per batch where a workload fixes the batch
    gen_tokens: int  # tokens generated per request
    experts: int     # MoE experts
    stages: int      # pipeline stages (1F1B)
    micro_batches: int


GPU_DIMS = Dims(vocab=8192, width=768, heads=12, layers=8, batch=16, gen_tokens=32,
                experts=8, stages=4, micro_batches=8)
CPU_DIMS = Dims(vocab=128, width=32, heads=2, layers=2, batch=2, gen_tokens=3,
                experts=4, stages=2, micro_batches=3)


def dims_for(device: str) -> Dims:
    return CPU_DIMS if device == "cpu" else GPU_DIMS


def autocast(device: str):
    """bf16 autocast on CUDA (weights stay fp32, as mixed-precision
    fine-tuning keeps them; autocast's per-step weight casts are part of the
    allocation pattern); nothing on the CPU (kept fast and exact)."""
    import torch

    if device == "cpu":
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=torch.bfloat16)


def step_rng(seed: int, step: int, salt: int = 0) -> random.Random:
    """The random source of one step: a function of (seed, step, salt) only."""
    return random.Random((seed * 1_000_003 + step) * 31 + salt)


def long_tail(rng: random.Random, lo: int, hi: int, multiple: int = 8) -> int:
    """A length in [lo, hi] from a log-normal whose median is hi / 4 and
    sigma 1 (about 8 % of draws reach the cap: truncated inputs pile up at
    the maximum length, as in real fine-tuning sets), rounded up to a
    multiple of `multiple` (dynamic padding pads to a multiple of 8)."""
    if hi <= lo:
        return max(1, hi)
    x = rng.lognormvariate(math.log(max(hi / 4, 1)), 1.0)
    n = int(math.ceil(min(max(x, lo), hi) / multiple) * multiple)
    return max(lo, min(n, hi))


def seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def make_block(width: int, heads: int):
    """Pre-norm causal self-attention and an MLP. forward(x, cache): with a
    cache (a dict), keys and values are concatenated onto the cached ones
    (a new, longer tensor every call: the growing KV cache)."""
    import torch
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
            self.fc1, self.fc2 = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

        def forward(self, x, cache=None):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            causal = True
            if cache is not None:
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                    causal = False  # one new query attends to everything cached
                cache["k"], cache["v"] = k, v
            a = F.scaled_dot_product_attention(q, k, v, is_causal=causal and t > 1)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))

    return Block()


def make_lm(d: Dims, layers: int | None = None):
    """Embedding, `layers` blocks, final norm and head (an nn.ModuleDict so
    that a pipeline can split it)."""
    import torch

    return torch.nn.ModuleDict({
        "embed": torch.nn.Embedding(d.vocab, d.width),
        "blocks": torch.nn.ModuleList(make_block(d.width, d.heads)
                                      for _ in range(layers or d.layers)),
        "norm": torch.nn.LayerNorm(d.width),
        "head": torch.nn.Linear(d.width, d.vocab),
    })


def lm_forward(lm, tokens, *, checkpoint: bool = False, caches=None, last_only: bool = False):
    """Logits for tokens (b, t). checkpoint: recompute each block in the
    backward pass (torch.utils.checkpoint, non-reentrant). caches: one dict
    per block (generation). last_only: logits of the last position only."""
    import torch.utils.checkpoint as ckpt

    x = lm["embed"](tokens)
    for i, block in enumerate(lm["blocks"]):
        if caches is not None:
            x = block(x, caches[i])
        elif checkpoint:
            x = ckpt.checkpoint(block, x, use_reentrant=False)
        else:
            x = block(x)
    if last_only:
        x = x[:, -1:]
    return lm["head"](lm["norm"](x))


def lm_loss(logits, targets):
    """Next-token cross entropy in fp32 (padding marked -100 is ignored)."""
    import torch.nn.functional as F

    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=-100)


def padded_targets(tokens, lengths):
    """Targets for tokens (b, t+1): the next token, -100 past each sample's
    own length (its padding)."""
    import torch

    targets = tokens[:, 1:].clone()
    pos = torch.arange(targets.shape[1], device=tokens.device)
    lens = torch.tensor(lengths, device=tokens.device)
    targets[pos.unsqueeze(0) >= lens.unsqueeze(1)] = -100
    return targets


def generate(lm, prompt, n_new: int, device: str):
    """Greedy generation of n_new tokens after prompt (b, p) with a growing
    KV cache; returns (b, p + n_new). No gradients; the caches are freed on
    return."""
    import torch

    caches = [dict() for _ in lm["blocks"]]
    out = [prompt]
    with torch.no_grad(), autocast(device):
        logits = lm_forward(lm, prompt, caches=caches, last_only=True)
        for i in range(n_new):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
            if i + 1 < n_new:
                logits = lm_forward(lm, nxt, caches=caches, last_only=True)
    return torch.cat(out, dim=1)


def synchronize(device: str) -> None:
    import torch

    if device != "cpu":
        torch.cuda.synchronize()
