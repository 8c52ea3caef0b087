"""One small GPT-2-like training step (2 layers, built from a config: no
download), in this fresh process, under whatever allocator the process
has: native, or cachealloc switched on from outside (`cachealloc run --
python ...`). Prints one JSON line: the allocator's mode and glue file (when
cachealloc is in use), the losses and torch.cuda.memory_stats() after the
step. Run by tests/gpu/wheel_install_check.sh, which compares the two runs'
stats; it imports only what the installed package offers (no source tree
on sys.path), as a user's program would.
"""
import json
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def glue_file():
    """The glue library this process loaded, from its memory map."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libcachealloc_torch" in line:
                return line.split()[-1]
    return None


def main():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_head=4, n_embd=256, vocab_size=2000, n_positions=256)
    model = GPT2LMHeadModel(config).cuda()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    for _ in range(2):
        ids = torch.randint(0, config.vocab_size, (8, 256), device="cuda", generator=generator)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss))
        del ids, loss
    torch.cuda.synchronize()
    ca = sys.modules.get("cachealloc")
    print(json.dumps({
        "mode": ca.mode() if ca else "native",
        "cachealloc": ca.__file__ if ca else None,
        "glue": glue_file(),
        "torch": torch.__version__,
        "losses": losses,
        "memory_stats": dict(torch.cuda.memory_stats()),
    }))


if __name__ == "__main__":
    main()
