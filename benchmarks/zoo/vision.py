"""Image classifiers of the zoo: torchvision and timm models by name, and
transformers' ViT from a config, with random weights (nothing downloaded),
trained on random 224 x 224 images with a 1000-class cross-entropy.

A factory here returns a zero-argument function that builds the model on
the CPU; regime.prepare() moves it. `checkpointing(model)` switches on the
library's own gradient checkpointing (timm's set_grad_checkpointing,
transformers' gradient_checkpointing_enable; torchvision has none)."""
from __future__ import annotations

from . import libs
from .regime import Regime, input_dtype, make_step, prepare


def torchvision_model(name: str, **kw):
    def build():
        return libs.torchvision().models.get_model(name, weights=None, **kw)
    return build


def timm_model(name: str, **kw):
    def build():
        return libs.timm().create_model(name, pretrained=False, **kw)
    return build


def timm_checkpointing(model) -> None:
    model.set_grad_checkpointing(True)


def hf_checkpointing(model) -> None:
    # use_reentrant given explicitly: its default changed across releases.
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def hf_vit(attn=None, **cfg):
    """transformers' ViTForImageClassification from a ViTConfig (ViT-B/16
    by default: 86 M parameters), 1000 labels."""
    def build():
        t = libs.transformers()
        c = t.ViTConfig(num_labels=1000, **cfg)
        if attn:
            c._attn_implementation = attn
        return t.ViTForImageClassification(c)
    return build


def image_classifier(batch: int, device="cuda", *, build, regime: Regime, image: int = 224,
                     classes: int = 1000, checkpointing=None, hf: bool = False):
    """One training step of `build()`'s classifier on `batch` random images."""
    import torch
    import torch.nn.functional as F
    model = prepare(regime, build, device, checkpointing)
    x = torch.randn(batch, 3, image, image, device=device, dtype=input_dtype(regime))
    if regime.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), device=device)
    if hf:
        def loss():
            return model(pixel_values=x, labels=y).loss
    else:
        def loss():
            return F.cross_entropy(model(x), y)
    step = make_step(model, regime, loss)
    if hf:
        step.attn_implementation = model.config._attn_implementation
    return step
