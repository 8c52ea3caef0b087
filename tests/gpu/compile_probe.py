"""Probe (not a test): torch.compile(mode="reduce-overhead"), which replays
CUDA graphs through PyTorch's cudagraph trees, under native or cachealloc
(argv[1]). Prints one JSON line: whether it ran and matched eager, or the
error it raised."""
import json
import sys

import torch

mode = sys.argv[1]
if mode == "cachealloc":
    import cachealloc

    cachealloc.install()


def f(x, w):
    return (x @ w).relu() + 1.0


out = {"mode": mode}
try:
    cf = torch.compile(f, mode="reduce-overhead")
    w = torch.randn(256, 256, device="cuda")
    results = []
    for i in range(6):
        x = torch.randn(128, 256, device="cuda")
        y = cf(x, w)
        results.append(bool(torch.allclose(y, f(x, w), rtol=1e-3, atol=1e-3)))
        if i == 3:  # a new shape: a second graph in the same tree
            x2 = torch.randn(64, 256, device="cuda")
            results.append(bool(torch.allclose(cf(x2, w), f(x2, w), rtol=1e-3, atol=1e-3)))
    out["ok"] = results
except Exception as e:  # report, do not hide: this is a probe
    out["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
print(json.dumps(out))
