"""A/B benchmark on the GPU: the same training loop under PyTorch's native
allocator and under cachealloc, each in its own process, alternating
A B A B ... to spread drift over both. Prints per-step time (median over
timed steps), the step-time ratio cachealloc/native, and peak reserved.

    python benchmarks/ab_train.py [--workload transformer] [--rounds 3] [--steps 30] [--cpus 2,3]

Also prints each round's ratio (cachealloc run / the native run just before
it) and their median, which cancels drift slower than a round. --cpus pins
every child process to the same CPUs, so both allocators run on the same
cores (process placement was a large share of the run-to-run spread).

Target: cachealloc's step time within 1 % of native's.
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def child(allocator, workload, steps, warmup, cpus):
    if cpus:
        os.sched_setaffinity(0, cpus)
    sys.path.insert(0, str(ROOT / "bindings" / "python"))
    import torch

    if allocator == "cachealloc":
        import cachealloc as mem

        mem.install()
        stats = mem.memory_stats
    else:
        stats = torch.cuda.memory_stats
    torch.manual_seed(0)
    if workload == "transformer":
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, 6).cuda()
        x = torch.randn(32, 256, 512, device="cuda")
        loss_fn = lambda: model(x).square().mean()
    elif workload == "resnet18":
        import torchvision

        model = torchvision.models.resnet18().cuda()
        x = torch.randn(32, 3, 224, 224, device="cuda")
        loss_fn = lambda: model(x).square().mean()
    elif workload == "smallops":  # allocator-bound: many tiny tensors
        model = torch.nn.Linear(64, 64).cuda()
        x = torch.randn(16, 64, device="cuda")

        def loss_fn():
            y = x
            for _ in range(200):
                y = (y * 1.0001 + 0.001).relu()
            return model(y).square().mean()
    else:
        raise SystemExit(f"unknown workload {workload}")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn().backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"step_ms": statistics.median(times) * 1e3,
                      "peak_reserved": stats(0)["reserved_bytes.all.peak"],
                      "peak_allocated": stats(0)["allocated_bytes.all.peak"]}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="transformer", choices=["transformer", "resnet18", "smallops"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--cpus", default="", help="comma-separated CPUs to pin every run to")
    p.add_argument("--child", choices=["native", "cachealloc"])
    a = p.parse_args()
    try:
        cpus = {int(c) for c in a.cpus.split(",") if c.strip()}
    except ValueError:
        p.error(f"--cpus: expected comma-separated CPU numbers, got {a.cpus!r}")
    if a.child:
        return child(a.child, a.workload, a.steps, a.warmup, cpus)
    results = {"native": [], "cachealloc": []}
    for _ in range(a.rounds):
        for alloc in ("native", "cachealloc"):
            out = subprocess.run([sys.executable, __file__, "--child", alloc, "--workload", a.workload,
                                  "--steps", str(a.steps), "--warmup", str(a.warmup), "--cpus", a.cpus],
                                 capture_output=True, text=True, check=True)
            results[alloc].append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(r["step_ms"] for r in v) for k, v in results.items()}
    print(f"workload={a.workload} rounds={a.rounds} steps={a.steps} cpus={a.cpus or 'any'}")
    for k, v in results.items():
        runs = ", ".join(f"{r['step_ms']:.3f}" for r in v)
        print(f"  {k:10s} step {med[k]:8.3f} ms (runs: {runs})"
              f"  peak reserved {v[0]['peak_reserved'] / 2**20:.1f} MiB"
              f"  peak allocated {v[0]['peak_allocated'] / 2**20:.1f} MiB")
    print(f"  step-time ratio cachealloc/native = {med['cachealloc'] / med['native']:.4f}")
    paired = [c["step_ms"] / n["step_ms"] for n, c in zip(results["native"], results["cachealloc"])]
    print(f"  per-round ratios: {', '.join(f'{r:.4f}' for r in paired)}; "
          f"median {statistics.median(paired):.4f}")


if __name__ == "__main__":
    main()
