"""Training workloads for checking the memory predictor against the GPU.

Each builder takes a batch size (and a device, a dtype and model-size knobs)
and returns a `step` callable that runs ONE training step: forward, loss,
backward, optimizer.step(), zero_grad(set_to_none=True). The same code runs
on a real GPU (the truth) and on the predictor's fake CUDA device; so the
builders avoid .item(), streams, torch.compile and host syncs inside a step.

`step.model` and `step.optimizer` are kept on the callable so MemTracker
(the baseline) can be told about them.

Everything is built from config: nothing is downloaded. ResNet-50 and the
ViT are written here (no torchvision: its PyPI wheels do not match every
local torch). GPT-2 and Llama need `transformers`; without it those two
builders raise ImportError naming the package, and `available()` leaves them
out.

Seeds are fixed so two runs of one workload issue the same requests."""
from __future__ import annotations

from typing import Callable, Dict

import torch
from torch import nn
import torch.nn.functional as F


def _seed() -> None:
    torch.manual_seed(0)


def _make_step(model: nn.Module, opt: torch.optim.Optimizer,
               loss_fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
    def step() -> None:
        loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    step.model = model
    step.optimizer = opt
    return step


# --- GPT-2 small (transformers), bf16 weights, AdamW ---------------------------------

def gpt2(batch: int, device="cuda", dtype=torch.bfloat16, seq: int = 1024,
         n_layer: int = 12, n_embd: int = 768, n_head: int = 12,
         attn: str = "eager"):
    """GPT-2 small by default (124 M parameters). `attn` picks transformers'
    attention implementation: "eager" is plain aten ops (matmul, softmax,
    dropout) and so fully visible to a fake device; "sdpa" uses the fused
    kernels whose scratch memory depends on the backend chosen."""
    from transformers import GPT2Config, GPT2LMHeadModel
    _seed()
    cfg = GPT2Config(n_positions=max(seq, 1024), n_layer=n_layer, n_embd=n_embd,
                     n_head=n_head)
    cfg._attn_implementation = attn
    model = GPT2LMHeadModel(cfg).to(device=device, dtype=dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    return _make_step(model, opt, lambda: model(input_ids=ids, labels=ids).loss)


# --- Llama-style decoder (transformers LlamaConfig), bf16, AdamW --------------------

def llama(batch: int, device="cuda", dtype=torch.bfloat16, seq: int = 512,
          hidden: int = 512, layers: int = 8, heads: int = 8, kv_heads: int = 4,
          intermediate: int = 1408, vocab: int = 32000, attn: str = "eager"):
    """A small Llama (RMSNorm, rotary embeddings, SwiGLU, grouped-query
    attention): about 50 M parameters by default."""
    from transformers import LlamaConfig, LlamaForCausalLM
    _seed()
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=max(seq, 512))
    cfg._attn_implementation = attn
    model = LlamaForCausalLM(cfg).to(device=device, dtype=dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    return _make_step(model, opt, lambda: model(input_ids=ids, labels=ids).loss)


# --- Transformer encoder (nn.TransformerEncoder), fp32, Adam -----------------------

def encoder(batch: int, device="cuda", dtype=torch.float32, seq: int = 512,
            d_model: int = 512, nhead: int = 8, layers: int = 6, ff: int = 2048,
            classes: int = 16):
    """nn.TransformerEncoder over random embeddings, mean-pooled into a
    classifier (training mode, so PyTorch's inference fast path is off)."""
    _seed()
    layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.1, batch_first=True)
    model = nn.Sequential()
    model.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    model.head = nn.Linear(d_model, classes)
    model = model.to(device=device, dtype=dtype)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, d_model, device=device, dtype=dtype)
    y = torch.randint(0, classes, (batch,), device=device)

    def loss():
        return F.cross_entropy(model.head(model.enc(x).mean(dim=1)), y)
    return _make_step(model, opt, loss)


# --- ResNet-50, fp32, SGD with momentum ---------------------------------------------

class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    """The standard ResNet-50 layout (3, 4, 6, 3 bottlenecks; 25.6 M
    parameters with 1000 classes), written out so no torchvision is needed."""

    def __init__(self, classes: int = 1000, blocks=(3, 4, 6, 3)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], 64
        for i, n in enumerate(blocks):
            width = 64 * 2 ** i
            for j in range(n):
                stages.append(_Bottleneck(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * 4
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50(batch: int, device="cuda", dtype=torch.float32, image: int = 224,
             classes: int = 1000):
    _seed()
    model = ResNet50(classes).to(device=device, dtype=dtype)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, image, image, device=device, dtype=dtype)
    y = torch.randint(0, classes, (batch,), device=device)
    return _make_step(model, opt, lambda: F.cross_entropy(model(x), y))


# --- ViT (own choice): patch embedding + pre-norm encoder, fp32, AdamW -------------

class ViT(nn.Module):
    """A ViT-S/16-like classifier: a strided conv cuts patches, a class token
    and learned positions are added, pre-norm GELU encoder layers follow."""

    def __init__(self, image=224, patch=16, dim=384, depth=6, heads=6, classes=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.enc(x))[:, 0])


def vit(batch: int, device="cuda", dtype=torch.float32, image: int = 224,
        dim: int = 384, depth: int = 6, heads: int = 6, classes: int = 1000):
    _seed()
    model = ViT(image, 16, dim, depth, heads, classes).to(device=device, dtype=dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, 3, image, image, device=device, dtype=dtype)
    y = torch.randint(0, classes, (batch,), device=device)
    return _make_step(model, opt, lambda: F.cross_entropy(model(x), y))


# --- the registry -------------------------------------------------------------------

# name -> make(batch, device="cuda") -> step, with each workload's default sizes.
WORKLOADS: Dict[str, Callable[..., Callable[[], None]]] = {
    "gpt2": gpt2,
    "resnet50": resnet50,
    "encoder": encoder,
    "llama": llama,
    "vit": vit,
}

# The small transformer step bundled as tests/data/predict/encoder_small.*:
# encoder(batch=4, seq=128, d_model=256, nhead=4, layers=2, ff=1024), 3 steps.
SMALL_ENCODER = dict(seq=128, d_model=256, nhead=4, layers=2, ff=1024)


def encoder_small(batch: int, device="cuda", dtype=torch.float32):
    return encoder(batch, device, dtype, **SMALL_ENCODER)


WORKLOADS["encoder_small"] = encoder_small


def available() -> Dict[str, Callable[..., Callable[[], None]]]:
    """The workloads whose dependencies import here (transformers may be
    missing on a CPU machine)."""
    try:
        import transformers  # noqa: F401
        return dict(WORKLOADS)
    except ImportError:
        return {k: v for k, v in WORKLOADS.items() if k not in ("gpt2", "llama")}


# Unmodified training scripts (benchmarks/predict/scripts/), workloads issue 33
# does not name: name -> (script, its arguments, the argument carrying the
# batch). record_truth.py runs them on the GPU as __main__ (stopping after
# `steps` optimizer steps, as the predictor does); predict_all.py predicts
# them through cachealloc.predict with the same arguments.
SCRIPTS: Dict[str, tuple] = {
    "bert_sdpa": ("scripts/train_bert_mlm.py", ["--seq-len", "512", "--steps", "1000"],
                  "--batch-size"),
    "vit_amp_ckpt": ("scripts/train_vit_amp.py", ["--accum", "2", "--steps", "1000"],
                     "--batch-size"),
}


def script_path(name: str) -> str:
    import os
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), SCRIPTS[name][0])


def script_argv(name: str, batch: int) -> list:
    """The script's argv (script first) at this batch, as predict's
    --batch-arg appends it."""
    _, args, batch_arg = SCRIPTS[name]
    return [script_path(name)] + list(args) + [batch_arg, str(batch)]
