"""The "fine-tuned" masked LM of the Value Zeroing experiments: prompt fine-tuning on BLiMP
number agreement (Mohebbi et al. 2023): :func:`prompt_loss`, :func:`finetune_prompt` and the model
the chapters load, :func:`load_finetuned_mlm`.

The paper's recipe: full fine-tuning, cross-entropy over the two logits ``[target, foil]`` at the
``[MASK]`` position only, AdamW lr 3e-5, linear schedule with 10% warm-up, seed 42.
"""
from __future__ import annotations

import copy
import math
import time
from typing import Sequence

import numpy as np
import torch

from ..cache import stable_hash
from ..models import model_device
from .common import (base_info, cache_file, cache_key, cached_json, fingerprint_examples,
                     fingerprint_model, load_cached, pad_id, save_cached, set_seed)
from ..batching import pad_sequences
from .loop import epoch_batches, fit, warmup_steps_for
from .mlm import load_mlm_model, logits_at, mlm_agreement_accuracy


def prompt_loss(vocab_logits: torch.Tensor, target_ids: torch.Tensor,
                foil_ids: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the two logits ``[target, foil]`` only, with the target as the right class.

    ``vocab_logits``: (batch, vocab) logits at the ``[MASK]`` position. No other vocabulary entry
    enters the loss (its gradient is exactly zero).
    """
    r = torch.arange(vocab_logits.shape[0], device=vocab_logits.device)
    two = torch.stack([vocab_logits[r, target_ids], vocab_logits[r, foil_ids]], dim=-1)
    return torch.nn.functional.cross_entropy(two, torch.zeros_like(target_ids))


def finetune_prompt(mlm_model, train_examples: Sequence[dict], *, epochs: int = 5,
                    batch_size: int = 64, lr: float = 3e-5, warmup: float = 0.1, seed: int = 42,
                    weight_decay: float = 0.0, test_examples: Sequence[dict] | None = None,
                    pad_token_id: int | None = None, model_name: str | None = None,
                    use_cache: bool = True, progress: bool = True):
    """Prompt fine-tuning as in the VZ paper. Returns ``(model, info)``; the input model is not changed.

    Full fine-tuning of a copy of ``mlm_model`` (every parameter, dropout on) with cross-entropy over
    ``[logit(target), logit(foil)]`` at ``target_index`` (:func:`prompt_loss`), AdamW (no weight
    decay), linear schedule with ``warmup`` ratio of warm-up steps, examples reshuffled every epoch
    with a generator seeded by ``seed`` (:func:`~cmixlib.training.fit` over
    :func:`~cmixlib.training.epoch_batches`). With ``test_examples``, ``info["accuracy"]`` is the
    share of test examples with logit(target) > logit(foil) (paper: 0.99 for BERT). Cached (full
    weights).
    """
    model = copy.deepcopy(mlm_model)
    pad = pad_id(model) if pad_token_id is None else pad_token_id
    settings = dict(epochs=epochs, batch_size=batch_size, lr=lr, warmup=warmup, seed=seed,
                    weight_decay=weight_decay, optimizer="AdamW", schedule="linear",
                    loss="CE over [target, foil] logits at [MASK]")
    key = cache_key("mlm-prompt-ft", model=fingerprint_model(model),
                    data=fingerprint_examples(train_examples), pad=pad, **settings)
    path = cache_file("mlm-prompt-ft", key)
    cached = load_cached(path) if use_cache else None
    if cached is not None:
        state, info = cached
        model.load_state_dict(state, strict=True)
        model.eval()
        info.update(from_cache=True, cache_file=str(path))
    else:
        info = base_info("mlm-prompt-finetuned", model, model_name or
                         getattr(model.config, "_name_or_path", "") or type(model).__name__,
                         getattr(model.config, "_name_or_path", ""), False)
        t0 = time.perf_counter()
        set_seed(seed)
        dev = model_device(model)
        n = len(train_examples)
        total = math.ceil(n / batch_size) * epochs
        for p in model.parameters():
            p.requires_grad_(True)
        model.train()

        def loss_fn(b: list[int]) -> torch.Tensor:
            exs = [train_examples[i] for i in b]
            ids, att = pad_sequences([ex["input_ids"] for ex in exs], pad, dev)
            pos = torch.as_tensor([int(ex["target_index"]) for ex in exs], device=dev)
            t = torch.as_tensor([int(ex["target_id"]) for ex in exs], device=dev)
            f = torch.as_tensor([int(ex["foil_id"]) for ex in exs], device=dev)
            return prompt_loss(logits_at(model, ids, att, pos), t, f)

        run = fit(model.parameters(), loss_fn, epoch_batches(n, batch_size, epochs, seed),
                  total_steps=total, lr=lr, weight_decay=weight_decay, warmup=warmup,
                  name="prompt fine-tuning", progress=progress)
        model.eval()
        info.update(data={"n_train": n, "train_fingerprint": fingerprint_examples(train_examples)},
                    settings={**settings, "total_steps": total,
                              "warmup_steps": warmup_steps_for(total, warmup)},
                    metrics={"train_loss_per_epoch": [round(x, 4) for x in run.epoch_losses]},
                    train_wall_s=time.perf_counter() - t0, from_cache=False, cache_key=key,
                    cache_file=str(path))
        if use_cache:
            save_cached(path, model.state_dict(), info)
    if test_examples is not None:
        acc = cached_json("mlm-agreement", stable_hash([key, fingerprint_examples(test_examples)]),
                          lambda: {"accuracy": mlm_agreement_accuracy(
                              model, test_examples, pad_token_id=pad, progress=progress),
                              "n": len(test_examples)}, use_cache)
        info["data"] = {**info.get("data", {}), "n_test": acc["n"]}
        info["metrics"] = {**info.get("metrics", {}), "agreement_accuracy_test": acc["accuracy"]}
        info["accuracy"] = acc["accuracy"]
    return model, info


def load_finetuned_mlm(name: str | None = None, *, epochs: int = 5, batch_size: int = 64,
                       lr: float = 3e-5, warmup: float = 0.1, seed: int = 42,
                       max_train_examples: int | None = None, use_cache: bool = True,
                       progress: bool = True, pretrained=None, **mlm_kw):
    """The "fine-tuned" MLM of the VZ experiments. Returns ``(bundle, info)``.

    Starts from :func:`~cmixlib.training.load_mlm_model` (or ``pretrained``, a ``(bundle, info)``
    pair from it) and prompt-fine-tunes it on the BLiMP agreement *train* split;
    ``info["accuracy"]`` is the agreement accuracy on the *test* split. ``max_train_examples``
    (seeded subset) shortens training.
    """
    from .. import data
    from ..models import ModelBundle

    bundle, pinfo = pretrained if pretrained is not None else load_mlm_model(
        name, use_cache=use_cache, progress=progress, evaluate=False, **mlm_kw)
    train = data.load_blimp_agreement(bundle.tokenizer, split="train", seed=42)
    test = data.load_blimp_agreement(bundle.tokenizer, split="test", seed=42)
    if max_train_examples is not None and max_train_examples < len(train):
        idx = np.random.default_rng(seed).permutation(len(train))[:max_train_examples]
        train = [train[i] for i in sorted(idx)]
    model, info = finetune_prompt(bundle.model, train, epochs=epochs, batch_size=batch_size, lr=lr,
                                  warmup=warmup, seed=seed, test_examples=test,
                                  pad_token_id=bundle.tokenizer.pad_token_id,
                                  model_name=bundle.name, use_cache=use_cache, progress=progress)
    info.update(model=bundle.name, source=bundle.source, is_fallback=bundle.is_fallback,
                base_mlm=pinfo.get("kind"))
    info["data"] = {"train": "BLiMP agreement train split (load_blimp_agreement, seed 42)",
                    **info["data"]}
    variant = "prompt-fine-tuned on BLiMP agreement (train split)"
    ft = ModelBundle(model=model, tokenizer=bundle.tokenizer, requested=bundle.requested,
                     source=bundle.source, name=bundle.name, task="mlm",
                     is_fallback=bundle.is_fallback, head_is_pretrained=bundle.head_is_pretrained,
                     notes=list(bundle.notes) + ["Prompt-fine-tuned on BLiMP agreement (train split)."],
                     variant="; ".join(v for v in (bundle.variant, variant) if v))
    return ft, info
