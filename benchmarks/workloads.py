"""Deterministic GPU workloads shared by the trace recorder, the A/B
benchmark and the GPU tests. Each takes a device and a step count and
returns the list of losses (floats), so two runs can be compared exactly.

torchvision is optional: resnet18 needs it (the GPU hosts have it)."""
from __future__ import annotations

import random
from typing import Callable, Dict, List


def _seed(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def _train_classifier(model, opt, x, y, steps: int) -> List[float]:
    """Plain cross-entropy training steps; the losses, one per step."""
    import torch

    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def mlp(device: str = "cuda", steps: int = 5, batch: int = 256) -> List[float]:
    import torch

    _seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 1024, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    return _train_classifier(model, opt, x, y, steps)


def resnet18(device: str = "cuda", steps: int = 5, batch: int = 32) -> List[float]:
    import torch
    import torchvision

    _seed(0)
    model = torchvision.models.resnet18(num_classes=100).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device=device)
    y = torch.randint(0, 100, (batch,), device=device)
    return _train_classifier(model, opt, x, y, steps)


def transformer(device: str = "cuda", steps: int = 5, batch: int = 32, seq: int = 256) -> List[float]:
    import torch

    _seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=6).to(device)
    head = torch.nn.Linear(512, 1000).to(device)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    x = torch.randn(batch, seq, 512, device=device)
    y = torch.randint(0, 1000, (batch, seq), device=device)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        out = head(model(x))
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, 1000), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _decoder_block(width: int, heads: int):
    """Pre-norm causal self-attention and an MLP (the class is made here so
    that this module imports without torch)."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                           torch.nn.Linear(4 * width, width))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, heads, -1).permute(2, 0, 3, 1, 4)
            # is_causal without a mask: the same attention kernels as the
            # transformer workload (a mask would pick others).
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, width))
            return x + self.mlp(self.norm2(x))

    return Block()


def decoder(device: str = "cuda", steps: int = 12, seed: int = 0) -> List[float]:
    """A causal (GPT-style) decoder trained on batches whose batch size and
    sequence length change every step, drawn from a seeded schedule: the
    activation sizes vary, which is where expandable segments differ most
    from the classic allocator (a new size rarely fits an old segment)."""
    import torch

    _seed(seed)
    rng = random.Random(seed)
    vocab, width = 8192, 512
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, width),
                                *[_decoder_block(width, 8) for _ in range(4)],
                                torch.nn.LayerNorm(width), torch.nn.Linear(width, vocab)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    losses = []
    for _ in range(steps):
        batch, seq = rng.choice([4, 8, 12, 16, 24]), rng.choice([64, 128, 192, 256, 384, 512])
        tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def random_tensors(device: str = "cuda", steps: int = 2000, seed: int = 0) -> List[float]:
    """Random sizes (512 B .. 256 MiB), random frees: stresses split/merge."""
    import torch

    _seed(seed)
    rng = random.Random(seed)
    live = []
    for _ in range(steps):
        if live and rng.random() < 0.45:
            live.pop(rng.randrange(len(live)))
        else:
            n = int(2 ** rng.uniform(9, 28)) // 4
            live.append(torch.empty(n, dtype=torch.float32, device=device))
        if len(live) > 60:
            live.pop(rng.randrange(len(live)))
    return [float(len(live))]


def fuzz(device: str = "cuda", steps: int = 3000, seed: int = 0, settle: bool = False) -> List[float]:
    """Random requests of 1 B .. 1 GiB (log-uniform) on three streams, frees
    in random order, blocks used by another, busy stream (record_stream, so
    their frees wait for an event), empty_cache() now and then, and OOMs
    caught (run it under a memory fraction to get them). For parity sweeps:
    the recording is replayed, so the GPU's timing (which event is done when)
    may vary from run to run without harm.

    With `settle`, the busy stream is waited for right after such a free,
    so its event has completed by the next malloc in every run: decisions no
    longer depend on GPU timing, and two live runs (native's, cachealloc's)
    can be compared directly.

    Returns [OOMs caught, empty_cache() calls, tensors live at the end]."""
    import torch

    _seed(seed)
    rng = random.Random(seed)
    streams = [torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.Stream()]
    live = []  # (tensor, index of the stream it was allocated on)
    ooms = empties = 0
    for _ in range(steps):
        r = rng.random()
        if live and r < 0.40:
            live.pop(rng.randrange(len(live)))
        elif r < 0.42:
            torch.cuda.empty_cache()
            empties += 1
        elif live and r < 0.47:
            # Used on another stream kept busy for 1-100 us: the free is
            # deferred until that stream's event completes.
            t, own = live.pop(rng.randrange(len(live)))
            other = rng.choice([i for i in range(3) if i != own])
            with torch.cuda.stream(streams[other]):
                torch.cuda._sleep(rng.randrange(2000, 200000))
            t.record_stream(streams[other])
            del t
            if settle:
                streams[other].synchronize()
        else:
            n = max(1, int(2 ** rng.uniform(0, 30)))
            own = rng.choice([0, 0, 0, 1, 2])
            try:
                with torch.cuda.stream(streams[own]):
                    live.append((torch.empty(n, dtype=torch.uint8, device=device), own))
            except torch.OutOfMemoryError:
                ooms += 1
                for _ in range(len(live) // 2):
                    live.pop(rng.randrange(len(live)))
        if len(live) > 48:
            live.pop(rng.randrange(len(live)))
    n_live = len(live)
    live.clear()
    torch.cuda.synchronize()
    return [float(ooms), float(empties), float(n_live)]


WORKLOADS: Dict[str, Callable[..., List[float]]] = {
    "mlp": mlp,
    "resnet18": resnet18,
    "transformer": transformer,
    "decoder": decoder,
    "random": random_tensors,
    "fuzz": fuzz,
}
