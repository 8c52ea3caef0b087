"""Sleep mode for a training or inference process, as inference engines do
it: the memory of a tagged pool goes back to the device while the process
sleeps, and comes back at the same addresses when it wakes.

    allocator = SleepAllocator("build-sleep/libsleep_allocator.so")
    with allocator.tagged(WEIGHTS):
        model = Model().cuda()          # weights live in the tag's pages
    allocator.sleep(WEIGHTS, keep=list(model.parameters()))
    ...                                 # the device has that memory back
    allocator.wake(WEIGHTS)             # same addresses, values restored

The pool is torch.cuda.MemPool(allocator=...) over sleep_allocator.cpp's
CUDAPluggableAllocator, so the caching allocator in charge (PyTorch's
native one, or cachealloc with its glue) keeps its segments and blocks
as usual: sleeping changes no address and no allocator state.

Run as a script, it trains a small MLP twice in one process, once without
sleeping and once sleeping half way, and prints one JSON line: the losses
of both runs, the device's free bytes around the sleep, and whether the
kept tensors came back (tests/gpu/test_sleep_mode_gpu.py compares runs
under native and under cachealloc).
    python3 examples/sleep_mode/sleep_mode.py LIBRARY [native|cachealloc]
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import sys
from typing import Iterable, Iterator

import torch


class SleepAllocator:
    """A MemPool whose pages can be released and restored by tag."""

    def __init__(self, library: str):
        self.lib = ctypes.CDLL(library)
        self.lib.sleep_bytes.restype = ctypes.c_size_t
        self.lib.sleep_bytes.argtypes = [ctypes.c_int, ctypes.c_int]
        self.lib.sleep_set_capacity.argtypes = [ctypes.c_size_t]
        self.lib.sleep_last_error.restype = ctypes.c_char_p
        self.pluggable = torch.cuda.memory.CUDAPluggableAllocator(library, "sleep_alloc",
                                                                  "sleep_free")
        self.pool = torch.cuda.MemPool(self.pluggable.allocator())
        self._kept: dict = {}  # tag -> [(tensor, cpu copy)]

    @contextlib.contextmanager
    def tagged(self, tag: int) -> Iterator[None]:
        """Allocations of this thread inside the block come from the pool's
        pages, under `tag`."""
        self.lib.sleep_set_tag(tag)
        try:
            with torch.cuda.use_mem_pool(self.pool):
                yield
        finally:
            self.lib.sleep_set_tag(0)

    def bytes(self, tag: int, mapped_only: bool = True) -> int:
        return self.lib.sleep_bytes(tag, int(mapped_only))

    def sleep(self, tag: int, keep: Iterable[torch.Tensor] = ()) -> None:
        """Copies `keep` to the CPU, then releases the tag's physical pages.
        Every other tensor in them is lost (its memory stays addressable
        only after wake, with undefined contents)."""
        tensors = list(keep)
        self._kept[tag] = [(t, t.detach().to("cpu", copy=True)) for t in tensors]
        torch.cuda.synchronize()  # no kernel may touch the pages now
        if self.lib.sleep_unmap(tag) != 0:
            raise RuntimeError("sleep_unmap: " + self.lib.sleep_last_error().decode())

    def wake(self, tag: int) -> None:
        """Maps new pages at the tag's addresses and copies the kept
        tensors back."""
        if self.lib.sleep_remap(tag) != 0:
            raise RuntimeError("sleep_remap: " + self.lib.sleep_last_error().decode())
        for tensor, saved in self._kept.pop(tag, []):
            tensor.data.copy_(saved)  # .data: parameters need no autograd here
        torch.cuda.synchronize()


WEIGHTS = 1


def _train(allocator: SleepAllocator, steps: int, sleep_at: int | None) -> dict:
    """Trains an MLP for `steps` steps with its weights and optimizer state
    in the tagged pool; sleeps and wakes before step `sleep_at`."""
    torch.manual_seed(0)
    out: dict = {"losses": []}
    with allocator.tagged(WEIGHTS):
        model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                    torch.nn.Linear(4096, 1024)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        for step in range(steps):
            if step == sleep_at:
                opt.zero_grad(set_to_none=True)  # grads are not kept
                keep = list(model.parameters()) + [opt.state[p]["momentum_buffer"]
                                                   for p in model.parameters()]
                before = [t.clone().cpu() for t in keep]
                torch.cuda.synchronize()
                out["free_before_sleep"] = torch.cuda.mem_get_info()[0]
                out["pool_bytes"] = allocator.bytes(WEIGHTS)
                allocator.sleep(WEIGHTS, keep)
                out["free_asleep"] = torch.cuda.mem_get_info()[0]
                out["bytes_asleep"] = allocator.bytes(WEIGHTS)
                allocator.wake(WEIGHTS)
                out["free_after_wake"] = torch.cuda.mem_get_info()[0]
                out["kept_values_back"] = all(torch.equal(b, t.cpu()) for b, t in zip(before, keep))
            g = torch.Generator(device="cuda").manual_seed(step)
            x = torch.randn(256, 1024, device="cuda", generator=g)
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            out["losses"].append(loss.item())
    del model, opt
    return out


def main(argv: list) -> None:
    library, mode = argv[1], argv[2] if len(argv) > 2 else "native"
    if mode == "cachealloc":
        import cachealloc

        cachealloc.install()
    allocator = SleepAllocator(library)
    plain = _train(allocator, 12, None)
    slept = _train(allocator, 12, 6)
    print(json.dumps({"mode": mode, "losses_without_sleep": plain["losses"], **slept}))


if __name__ == "__main__":
    main(sys.argv)
