"""Language models of the zoo, from transformers configs written here
(random weights, nothing downloaded): causal LMs (GPT-2, Llama, Mistral,
Qwen2, OPT, GPT-Neo), masked LMs (BERT, RoBERTa) and sequence-to-sequence
models (T5, BART), trained on random token ids with the model's own loss
(labels = inputs).

Encoders get an all-ones attention_mask, as a tokenizer gives for a packed,
unpadded batch; decoders get none (causal). The attention implementation is
the regime's, else transformers' default; the builder records which ran as
`step.attn_implementation`."""
from __future__ import annotations

from . import libs
from .regime import Regime, make_step, prepare


def hf(model_class: str, config_class: str, attn=None, **cfg):
    """A zero-argument builder of transformers.<model_class>(<config_class>(**cfg))."""
    def build():
        t = libs.transformers()
        c = getattr(t, config_class)(**cfg)
        if attn:
            c._attn_implementation = attn
        return getattr(t, model_class)(c)
    return build


def _finish(step, model):
    step.attn_implementation = model.config._attn_implementation
    return step


def causal_lm(batch: int, device="cuda", *, build, regime: Regime, seq: int, vocab: int,
              checkpointing=None):
    import torch
    model = prepare(regime, build, device, checkpointing)
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    return _finish(make_step(model, regime, lambda: model(input_ids=ids, labels=ids).loss), model)


def masked_lm(batch: int, device="cuda", *, build, regime: Regime, seq: int, vocab: int,
              checkpointing=None):
    import torch
    model = prepare(regime, build, device, checkpointing)
    # Ids from 5 up: clear of the special tokens (RoBERTa's padding id is 1).
    ids = torch.randint(5, vocab, (batch, seq), device=device)
    mask = torch.ones_like(ids)
    return _finish(make_step(model, regime, lambda: model(input_ids=ids, attention_mask=mask,
                                                          labels=ids).loss), model)


def seq2seq(batch: int, device="cuda", *, build, regime: Regime, src: int, tgt: int, vocab: int,
            checkpointing=None):
    import torch
    model = prepare(regime, build, device, checkpointing)
    ids = torch.randint(5, vocab, (batch, src), device=device)
    mask = torch.ones_like(ids)
    labels = torch.randint(5, vocab, (batch, tgt), device=device)
    return _finish(make_step(model, regime, lambda: model(input_ids=ids, attention_mask=mask,
                                                          labels=labels).loss), model)
