"""CPU-side random fills read back in every way deferred_fills.py watches.

values(device) returns, as exact lists, what the CPU side computed after
each kind of trigger; run as a script (under cachealloc predict) it writes
them as JSON to $OUT and trains one step on `device`. The test runs
values("cpu") in plain torch and compares: the cpu-init recording must
give the eager run's values bit for bit.
"""
import hashlib
import io
import json
import os

import numpy
import torch


def _bits(t):
    """Exact: the float's bit patterns, not a rounded decimal."""
    return t.detach().reshape(-1).view(torch.int32 if t.element_size() == 4 else torch.int16).tolist()


def values(device):
    out = {}
    torch.manual_seed(0)
    # 1. a generator draw after deferred fills: one read later, one dead,
    #    one overwritten by a second fill.
    a = torch.empty(1000).normal_()
    lin = torch.nn.Linear(64, 32)                        # kaiming_uniform_ and the bias' uniform_
    dead = torch.empty(500).uniform_()
    del dead
    w = torch.empty(300)
    w.uniform_(-1, 1)
    w.normal_(0, 2)
    out["randn_after"] = _bits(torch.randn(5))
    out["a"] = _bits(a[:8])
    out["lin"] = _bits(lin.weight[0, :8]) + _bits(lin.bias[:8])
    out["w"] = _bits(w[:8])
    # 2. the generator's state asked for in Python
    b = torch.empty(200).normal_()
    out["state_sum"] = int(torch.get_rng_state().to(torch.int64).sum())
    out["b"] = _bits(b[:4])
    # 3. memory read outside the dispatcher
    c = torch.empty(50).uniform_()
    out["c_numpy"] = [float(x) for x in c.numpy()[:4]]
    d = torch.empty(40).normal_()
    out["d_tolist"] = d.tolist()[:4]
    # 4. a fill of part of a storage (not deferred) after a deferred one
    e = torch.empty(64).normal_()
    f = torch.empty(10, 10)
    f[:, :3].normal_()
    out["e"] = _bits(e[:4])
    out["f"] = _bits(f[:, :3])
    # 5. a model moved to the device (its CPU weights die), then a draw
    moved = torch.nn.Linear(128, 256).to(device)
    out["rand_after_move"] = _bits(torch.rand(3))
    # 6. a view of a pending storage reads nothing; a bf16 fill
    g = torch.empty(16, 8, dtype=torch.bfloat16).uniform_()
    gt = g.t()
    out["g"] = _bits(gt[0])
    # 7. fork_rng (checkpointing's stash) inside pending fills
    h = torch.empty(32).normal_()
    with torch.random.fork_rng(devices=[]):
        out["fork"] = _bits(torch.randn(2))
    out["h"] = _bits(h[:4])
    out["after_fork"] = _bits(torch.randn(2))
    # 8. the generator's state set back in Python, and seeded
    saved = torch.get_rng_state()
    i = torch.empty(16).uniform_()
    torch.set_rng_state(saved)
    out["after_set_state"] = _bits(torch.randn(2))
    out["i"] = _bits(i[:4])
    j = torch.empty(16).normal_()
    torch.manual_seed(3)
    out["after_seed"] = _bits(torch.randn(2))
    out["j"] = _bits(j[:4])
    # 9. seeded through the generator object itself (unwatched): eager order kept
    k = torch.empty(16).normal_()
    torch.default_generator.manual_seed(7)
    out["after_generator_seed"] = _bits(torch.randn(2))
    out["k"] = _bits(k[:4])
    # 10. memory read by torch.save and by numpy, and memory numpy owns
    m = torch.empty(8).normal_()
    buf = io.BytesIO()
    torch.save(m, buf)
    out["saved"] = hashlib.sha256(buf.getvalue()).hexdigest()   # the bytes torch.save wrote
    n = torch.empty(8).uniform_()
    out["asarray"] = [float(x) for x in numpy.asarray(n)[:4]]
    shared = torch.empty(8)
    view = shared.numpy()                 # numpy now shares this storage...
    shared.normal_()                      # ...so this fill must land at once
    out["numpy_shared"] = [float(x) for x in view[:4]]
    own = numpy.zeros(8, dtype=numpy.float32)
    torch.from_numpy(own).normal_()
    out["numpy_owned"] = [float(x) for x in own[:4]]
    # 11. a fill eager refuses, caught where the script called it
    try:
        torch.empty(4).uniform_(2.0, 1.0)
        out["bad_fill"] = "ran"
    except RuntimeError:
        out["bad_fill"] = "raised"
    # 12. a device tensor made from a pending CPU one: its exact (shadow) values
    p = torch.empty(4).uniform_(0, 100).to(device, torch.long)
    out["shadow"] = [int(p[q].item()) for q in range(4)]
    return out, moved


if __name__ == "__main__":
    found, _ = values("cuda")
    with open(os.environ["OUT"], "w") as fh:
        json.dump(found, fh)
    # Weights that only go to the device, and no CPU draw after them: their
    # fills (two weights, two biases) are never computed.
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.Linear(256, 16)).to("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(int(os.environ.get("B", "4")), 128, device="cuda")
    model(x).square().mean().backward()
    opt.step()
