"""The strand suite: workloads where PyTorch's native allocator may leave
memory unused (issue 48), by name. Each is a class taking (size, device,
seed) with a step(i) method (one training or serving step, returning a
float: a loss or a checksum), in its own file here; `size` is in the
workload's finest unit (UNIT: tokens, or KV tokens per sequence) and is a
multiple of grain(device).

    import suite
    w = suite.build("finetune_padding", 4096, "cuda")
    for i in range(10): w.step(i)

START: a size to begin the search for the largest size at, per device (the
driver scales from there); TINY: a size that runs in well under a second
on the CPU (the tests run every workload at it).
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from typing import Dict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Spec:
    module: str
    cls: str
    kwargs: dict
    start_cuda: int  # a first guess at a size near a few GiB on the GPU
    tiny: int        # a size that runs in well under a second on the CPU

    def load(self):
        return importlib.import_module(self.module)

    @property
    def unit(self) -> str:
        return self.load().UNIT

    def grain(self, device: str) -> int:
        return self.load().grain(device)


WORKLOADS: Dict[str, Spec] = {
    "finetune_padding": Spec("finetune_padding", "FinetunePadding", {}, 16384, 64),
    "finetune_padding_ckpt": Spec("finetune_padding", "FinetunePadding", {"checkpoint": True},
                                  32768, 64),
    "kv_generation": Spec("kv_generation", "KVGeneration", {}, 8192, 24),
    "rl_loop": Spec("rl_loop", "RLLoop", {}, 4096, 24),
    "moe_routing": Spec("moe_routing", "MoERouting", {}, 16384, 64),
    "pipeline_1f1b": Spec("pipeline_1f1b", "Pipeline1F1B", {}, 4096, 32),
    "pipeline_1f1b_recompute": Spec("pipeline_1f1b", "Pipeline1F1B", {"recompute": True},
                                    8192, 32),
    "two_streams": Spec("two_streams", "TwoStreams", {}, 16384, 64),
}


def spec(name: str) -> Spec:
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}: known workloads are {', '.join(WORKLOADS)}")
    return WORKLOADS[name]


def build(name: str, size: int, device: str, seed: int = 0):
    """The workload, set up (model made, optimizer ready) at this size."""
    s = spec(name)
    g = s.grain(device)
    if size <= 0 or size % g:
        raise ValueError(f"{name}: size {size} is not a positive multiple of {g} ({s.unit})")
    return getattr(s.load(), s.cls)(size, device, seed=seed, **s.kwargs)


def run(name: str, size: int, steps: int, device: str, seed: int = 0) -> list:
    """Runs steps 0..steps-1; returns their results (one float each)."""
    w = build(name, size, device, seed)
    return [w.step(i) for i in range(steps)]


def names() -> list:
    return list(WORKLOADS)

