"""How a zoo setup trains: precision, attention, checkpointing, memory
format, cuDNN autotuning and optimizer (a Regime), and the one training
step every setup runs under it.

The step is what users write, in their order: the model is built on the
CPU (its initialisation runs there, as on a user's machine), then moved
with one `.to(device, dtype, memory_format)`; the optimizer is made after
the move; inputs are made on the device. One call = one training step:
forward (under autocast if asked), loss, backward (through GradScaler for
fp16), optimizer step, zero_grad(set_to_none=True). No .item(), no host
read in the step itself (GradScaler's own found-inf read is the library's,
as in every fp16 script). Seeds are fixed, so two runs make the same
requests.

`step.model` and `step.optimizer` are kept on the callable (as in
benchmarks/predict/workloads.py)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Optional

PRECISIONS = ("fp32", "bf16_autocast", "fp16_scaler", "bf16_weights")


@dataclass(frozen=True)
class Regime:
    # fp32: fp32 weights, no autocast. bf16_autocast: fp32 master weights,
    # bf16 autocast. fp16_scaler: fp32 weights, fp16 autocast, GradScaler.
    # bf16_weights: the model itself in bf16, no autocast.
    precision: str = "fp32"
    # transformers' attn_implementation ("sdpa", "eager"); None: the
    # library's default (recorded as what it picked). timm and torchvision
    # models have one attention each (noted per setup).
    attn: Optional[str] = None
    checkpointing: bool = False     # the library's own gradient checkpointing
    channels_last: bool = False     # model and input in channels_last
    cudnn_benchmark: bool = False   # torch.backends.cudnn.benchmark
    optimizer: str = "adamw"        # "adamw" or "sgd" (momentum 0.9)
    fused: bool = False             # AdamW(fused=True); else torch's default (foreach on CUDA)

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r}: one of {PRECISIONS}")
        if self.attn not in (None, "sdpa", "eager"):
            raise ValueError(f"attn {self.attn!r}: sdpa, eager or None")
        if self.optimizer not in ("adamw", "sgd"):
            raise ValueError(f"optimizer {self.optimizer!r}: adamw or sgd")
        if self.fused and self.optimizer != "adamw":
            raise ValueError("fused is AdamW's flag")

    def tags(self) -> list:
        """The regime as the words the split is checked against (every tag
        must appear in both halves)."""
        t = [self.precision]
        if self.attn:
            t.append(self.attn)
        t += [name for name, on in (("checkpointing", self.checkpointing),
                                    ("channels_last", self.channels_last),
                                    ("cudnn_benchmark", self.cudnn_benchmark),
                                    ("fused_adamw", self.fused)) if on]
        return t

    def describe(self) -> str:
        return ", ".join(self.tags() + ([self.optimizer] if self.optimizer != "adamw" else []))


def prepare(regime: Regime, build: Callable, device, checkpointing: Optional[Callable] = None):
    """Seeds, cuDNN flags, the model built on the CPU by `build()`, its
    gradient checkpointing switched on by `checkpointing(model)` when the
    regime asks, then moved to `device` in one call."""
    import torch
    torch.manual_seed(0)
    # Set both ways: a process that serves several setups must not inherit one.
    torch.backends.cudnn.benchmark = regime.cudnn_benchmark
    model = build()
    model.train()
    if regime.checkpointing:
        if checkpointing is None:
            raise ValueError("this model has no gradient checkpointing switch")
        checkpointing(model)
    kw = {"device": device}
    if regime.precision == "bf16_weights":
        kw["dtype"] = torch.bfloat16
    if regime.channels_last:
        kw["memory_format"] = torch.channels_last
    return model.to(**kw)


def input_dtype(regime: Regime):
    import torch
    return torch.bfloat16 if regime.precision == "bf16_weights" else torch.float32


def make_step(model, regime: Regime, loss_fn: Callable, lr: float = 1e-4):
    """The training step of `model` under `regime`; loss_fn() runs the
    forward and returns the scalar loss."""
    import torch
    params = [p for p in model.parameters() if p.requires_grad]
    if regime.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=0.9)
    elif regime.fused:
        opt = torch.optim.AdamW(params, lr=lr, fused=True)
    else:
        opt = torch.optim.AdamW(params, lr=lr)
    scaler = torch.amp.GradScaler("cuda") if regime.precision == "fp16_scaler" else None
    autocast_dtype = {"bf16_autocast": torch.bfloat16, "fp16_scaler": torch.float16}.get(
        regime.precision)

    def autocast():
        if autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=autocast_dtype)

    def step() -> None:
        with autocast():
            loss = loss_fn()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)

    step.model = model
    step.optimizer = opt
    step.scaler = scaler
    return step
