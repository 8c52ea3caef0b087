"""Prediction speed (issue 33): a GPT-2-small training step (124 M
parameters, seq 1024, bf16, AdamW, flash attention modelled) predicted on
the CPU with its best config found, and a largest-batch search. Prints the
figures for docs/benchmarks.md.

    PYTHONPATH=bindings/python CACHEALLOC_CLI=build/tools/cachealloc \\
        python benchmarks/predict/speed.py [--gpu H100-80GB] [--fraction 0.25]

The model is written here (nanoGPT-style, no transformers needed) so the
benchmark runs on any CPU machine. Reference measured in the same run: the
bare time to start a worker and import torch (a recording's fixed cost).

    ... speed.py --zoo [vit_b_16,swin_t,convnext_tiny,timm:vit_small_patch16_224] [--batch 8] [--out DIR]

--zoo instead times one size of each model's unmodified training script
(tests/python/predict_steps/zoo_train.py: built on the CPU, moved with
.cuda(), AdamW, 3 steps) predicted as `cachealloc predict --size` does it
(recording, replays and the advisor's search), once per fake-device mode:
cpu-init (CPU tensors real) and fake (every tensor fake). The issue's
target is at most 10 s per size on 2 cores."""
import argparse
import os
import subprocess
import sys
import time

import torch
from torch import nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=50257, seq=1024, d=768, h=12, layers=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def gpt2_small(batch, seq=1024):
    model = GPT(seq=seq).to(device="cuda", dtype=torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, 50257, (batch, seq), device="cuda")

    def step():
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), idx.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


ZOO_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                          "python", "predict_steps", "zoo_train.py")
ZOO = "vit_b_16,swin_t,convnext_tiny,timm:vit_small_patch16_224"


def zoo(gpu, models, batch, ref) -> None:
    """One size of each model, per mode: seconds for the whole prediction."""
    from cachealloc import predict
    print(f"{'model':32} {'mode':9} {'predicted':>10} {'recording':>10} {'x ref':>6} "
          f"{'allocations':>11} {'peak allocated':>15}")
    for model in models:
        os.environ["MODEL"] = model
        for mode in ("cpu-init", "fake"):
            a = predict.fits(["python", os.path.abspath(ZOO_SCRIPT)], gpu, size=batch,
                             batch_env="B", steps=3, mode=mode)
            peak = a["configs"]["classic"]["peak_allocated"]
            print(f"{model:32} {a['mode']:9} {a['seconds']:9.1f}s {a['record_seconds']:9.1f}s "
                  f"{a['seconds'] / ref:5.1f}x {a['recording']['allocations']:11d} {peak:15d}",
                  flush=True)


class _Tee:
    """stdout that also goes to a file (--out)."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)
            s.flush()

    def flush(self):
        for s in self.streams:
            s.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="H100-80GB")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--fraction", type=float, default=0.25)
    ap.add_argument("--no-largest", action="store_true")
    ap.add_argument("--zoo", nargs="?", const=ZOO, help=f"time these models instead (default {ZOO})")
    ap.add_argument("--out", help="also write what is printed to OUT/speed.txt")
    args = ap.parse_args()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        sys.stdout = _Tee(sys.stdout, open(os.path.join(args.out, "speed.txt"), "w"))
    from cachealloc import predict
    gpu = predict.resolve_gpu(args.gpu)
    target = f"{os.path.abspath(__file__)}:gpt2_small"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    ref = time.perf_counter() - t
    print(f"reference: python + import torch: {ref:.1f} s; cores: {os.cpu_count()}; "
          f"load average (1, 5, 15 min) at start: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.zoo:
        zoo(gpu, args.zoo.split(","), args.batch, ref)
        print(f"load average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return
    a = predict.fits(target, gpu, size=args.batch, steps=2)
    print(f"GPT-2 small batch {args.batch} predicted and best config found: {a['seconds']:.1f} s "
          f"(recording {a['record_seconds']:.1f} s, {a['recording']['allocations']} allocations; "
          f"{a['seconds'] / ref:.1f}x the reference); fits={a['fits']} settings={a['settings']!r}; "
          f"classic peak reserved {a['configs']['classic']['peak_reserved']}")
    if not args.no_largest:
        b = predict.largest(target, gpu, memory_fraction=args.fraction, steps=2, start=8, max_size=256)
        print(f"largest-batch search (fraction {args.fraction}): {b['seconds']:.1f} s over "
              f"{len(b['probes'])} probes ({b['seconds'] / ref:.1f}x the reference); largest {b['largest']}")
    print(f"load average at end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
