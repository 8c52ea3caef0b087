"""A 1F1B pipeline schedule emulated on one GPU: the model is cut into
stages (embedding and first blocks on stage 0, head and loss on the last),
each micro-batch's forward and backward on each stage run in the order a
real pipeline would run them (each stage's own 1F1B list: warm-up
forwards, then one forward and one backward alternately, then the
cool-down backwards; stages advance in lockstep ticks, a stage waiting for
its input), with the tensor passed between stages detached as a pipeline's
send/receive would. So activations are freed in an order unlike the one
they were allocated in: stage 0 holds up to `stages` micro-batches while
the last stage holds one. With `recompute`, each block is recomputed in
the backward pass (as Megatron's full recomputation), which STAlloc
reports as the worst case for native's expandable segments.

Size: tokens per micro-batch (micro-batch sequences x sequence length;
the sequence length is size // sequences, a multiple of 8).
"""
from __future__ import annotations

import common

UNIT = "tokens"
MB_SEQUENCES = 4  # sequences per micro-batch on the GPU (1 on the CPU)


def grain(device: str) -> int:
    return (1 if device == "cpu" else MB_SEQUENCES) * 8


def stage_orders(stages: int, micro: int):
    """Each stage's own 1F1B list of ("F" | "B", micro-batch)."""
    orders = []
    for s in range(stages):
        warm = min(stages - s - 1, micro)
        ops = [("F", m) for m in range(warm)]
        for m in range(warm, micro):
            ops += [("F", m), ("B", m - warm)]
        ops += [("B", m) for m in range(micro - warm, micro)]
        orders.append(ops)
    return orders


def schedule(stages: int, micro: int):
    """The global order [(stage, "F" | "B", micro-batch)] of a lockstep
    pipeline: at each tick every stage runs its next op if its input is
    ready (F needs the previous stage's F of that micro-batch done at an
    earlier tick; B needs the next stage's B, or for the last stage its own
    F); ops of one tick run in stage order."""
    orders = stage_orders(stages, micro)
    pos = [0] * stages
    done = set()
    out = []
    while any(pos[s] < len(orders[s]) for s in range(stages)):
        tick = []
        for s in range(stages):
            if pos[s] == len(orders[s]):
                continue
            kind, m = orders[s][pos[s]]
            need = ((s - 1, "F", m) if s > 0 else None) if kind == "F" else \
                ((s + 1, "B", m) if s < stages - 1 else (s, "F", m))
            if need is None or need in done:
                tick.append((s, kind, m))
        if not tick:
            raise RuntimeError("1F1B schedule deadlocked")  # cannot happen for a valid order
        for op in tick:
            pos[op[0]] += 1
        done.update(tick)
        out += tick
    return out


class Pipeline1F1B:
    def __init__(self, size: int, device: str, seed: int = 0, recompute: bool = False):
        import torch

        self.d = common.dims_for(device)
        self.seqs = 1 if device == "cpu" else MB_SEQUENCES
        self.seq_len = (size // self.seqs) // 8 * 8
        if self.seq_len < 8:
            raise ValueError(f"size {size}: below one micro-batch of 8-token sequences "
                             f"({self.seqs * 8})")
        self.device, self.seed, self.recompute = device, seed, recompute
        common.seed_all(seed)
        self.lm = common.make_lm(self.d).to(device)
        blocks = list(self.lm["blocks"])
        per = -(-len(blocks) // self.d.stages)
        self.stage_blocks = [blocks[s * per:(s + 1) * per] for s in range(self.d.stages)]
        self.order = schedule(self.d.stages, self.d.micro_batches)
        self.opt = torch.optim.AdamW(self.lm.parameters(), lr=1e-4)

    def run_stage(self, s: int, x, tokens):
        import torch.utils.checkpoint as ckpt

        with common.autocast(self.device):
            if s == 0:
                x = self.lm["embed"](tokens[:, :-1])
            for block in self.stage_blocks[s]:
                x = ckpt.checkpoint(block, x, use_reentrant=False) if self.recompute else block(x)
            if s == self.d.stages - 1:
                logits = self.lm["head"](self.lm["norm"](x))
        if s == self.d.stages - 1:
            return common.lm_loss(logits, tokens[:, 1:]) / self.d.micro_batches
        return x

    def step(self, i: int) -> float:
        import torch

        g = torch.Generator().manual_seed(self.seed * 7919 + i)
        tokens = [torch.randint(0, self.d.vocab, (self.seqs, self.seq_len + 1), generator=g)
                  .to(self.device) for _ in range(self.d.micro_batches)]
        outs, ins, grads = {}, {}, {}  # keyed (stage, micro-batch)
        total = 0.0
        last = self.d.stages - 1
        for s, kind, m in self.order:
            if kind == "F":
                x = None
                if s > 0:  # "receive": a detached copy's storage, as over a link
                    x = outs[(s - 1, m)].detach().requires_grad_()
                    ins[(s, m)] = x
                outs[(s, m)] = self.run_stage(s, x, tokens[m])
                if s == last:
                    total += outs[(s, m)].item()
            else:
                out = outs.pop((s, m))
                if s == last:
                    out.backward()
                else:
                    out.backward(grads.pop((s + 1, m)))
                if s > 0:
                    grads[(s, m)] = ins.pop((s, m)).grad
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return total
