"""Two CUDA streams with record_stream, as training loops with a side
stream use them: the next batch is made on a side stream while the current
one trains (it is used on the main stream: record_stream(main)), and after
each forward pass a slow consumer on the side stream reads the logits
(metrics: the per-token entropy; record_stream(side)), kept busy with a
GPU sleep, so that the logits' memory, freed by the main stream at the end
of the step, waits on the side stream's event while the next step
allocates. Sequence lengths are long-tailed per batch (dynamic padding), so
the blocks waiting on events rarely match the next request exactly.

Size: tokens of the longest batch = batch x maximum length, as in
finetune_padding. On the CPU there are no streams: the same work runs in
order (the workload exists there for tests).
"""
from __future__ import annotations

import common

UNIT = "tokens"
SIDE_SLEEP_CYCLES = 4_000_000  # about 2 ms at the H100's clock: the side consumer's delay


def grain(device: str) -> int:
    return common.dims_for(device).batch * 8


class TwoStreams:
    def __init__(self, size: int, device: str, seed: int = 0):
        import torch

        self.d = common.dims_for(device)
        self.max_len = (size // self.d.batch) // 8 * 8
        if self.max_len < 8:
            raise ValueError(f"size {size} tokens is below one batch of 8-token sequences "
                             f"({self.d.batch * 8})")
        self.device, self.seed = device, seed
        self.cuda = device != "cpu"
        common.seed_all(seed)
        self.lm = common.make_lm(self.d).to(device)
        self.opt = torch.optim.AdamW(self.lm.parameters(), lr=1e-4)
        self.side = torch.cuda.Stream() if self.cuda else None
        self.next = None  # (step index, tokens made on the side stream)
        self.metric = None

    def length(self, i: int) -> int:
        if i == 1:
            return self.max_len
        return common.long_tail(common.step_rng(self.seed, i), 8, self.max_len)

    def make_batch(self, i: int):
        """Step i's tokens, made on the side stream (generated there, as a
        loader's decode or a host copy would be)."""
        import torch

        g = torch.Generator(device=self.device).manual_seed(self.seed * 7919 + i)
        shape = (self.d.batch, self.length(i) + 1)
        if not self.cuda:
            return torch.randint(0, self.d.vocab, shape, generator=g)
        with torch.cuda.stream(self.side):
            return torch.randint(0, self.d.vocab, shape, generator=g, device=self.device)

    def step(self, i: int) -> float:
        import torch

        if self.next is None or self.next[0] != i:
            self.next = (i, self.make_batch(i))
        tokens = self.next[1]
        if self.cuda:
            torch.cuda.current_stream().wait_stream(self.side)
            tokens.record_stream(torch.cuda.current_stream())
        with common.autocast(self.device):
            logits = common.lm_forward(self.lm, tokens[:, :-1])
        if self.cuda:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                torch.cuda._sleep(SIDE_SLEEP_CYCLES)
                p = torch.softmax(logits.detach().float(), -1)
                self.metric = -(p * torch.log(p + 1e-9)).sum(-1).mean()
                del p
            logits.record_stream(self.side)
        else:
            p = torch.softmax(logits.detach().float(), -1)
            self.metric = -(p * torch.log(p + 1e-9)).sum(-1).mean()
            del p
        loss = common.lm_loss(logits, tokens[:, 1:])
        del logits
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.next = (i + 1, self.make_batch(i + 1))  # prefetch while this step's work runs
        return loss.item()
