"""The "fine-tuned" masked LM of the Value Zeroing experiments: prompt fine-tuning on BLiMP number
agreement (Mohebbi et al. 2023): :func:`prompt_loss`, :func:`finetune_prompt` and the model the
chapters load, :func:`load_finetuned_mlm`.

The paper's recipe: full fine-tuning, cross-entropy over the two logits ``[target, foil]`` at the
``[MASK]`` position only, AdamW lr 3e-5, linear schedule with 10% warm-up, seed 42. **This
project's recipe** keeps the loss, the data, the optimiser, the schedule and the seed, but trains
low-rank adapters (LoRA rank 16, alpha 32, ``cmixlib.training.lora``) on every linear map of every
layer plus, in full, every LayerNorm and the MLM head's own parameters, at a learning rate chosen
on a validation part of the training split (``PROMPT_LR``; the sweep is in
``cmixlib/assets/minilm_mlm_prompt/manifest.json``), as the committed sentence classifiers are
trained. The reason is the build: what the recipe trains is a few MB in float16, so the weights for
the packaged MLM are committed (``cmixlib/assets/minilm_mlm_prompt/``, ``make prompt-mlm-weights``)
and loaded in seconds, where full fine-tuning took about 6 minutes of every cold build (its float16
delta, about 45 MB, is too large for the repository).
"""
from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from cmixlib.cache import stable_hash
from cmixlib.models.devices import model_device
from cmixlib.models.loading import ModelBundle
from cmixlib.training.common import (base_info, cache_file, cache_key, cached_json,
                                     fingerprint_examples, fingerprint_model, load_cached, pad_id,
                                     save_cached, set_seed)
from cmixlib.forward.batching import pad_sequences
from cmixlib.training.lora import (add_lora, layer_linear_names, layer_norm_param_names,
                                   trainable_state)
from cmixlib.training.loop import epoch_batches, fit, warmup_steps_for
from cmixlib.training.mlm import load_mlm_model
from cmixlib.training.mlm_scores import logits_at, mlm_agreement_accuracy, mlm_head_param_names

#: Learning rate of the LoRA recipe (chosen on a validation part of the BLiMP train split:
#: ``tools/train_prompt_mlm.py --sweep``; the paper's 3e-5 is for full fine-tuning).
PROMPT_LR = 1e-3
#: Adapter rank and alpha (scale alpha / r), as the committed classifiers.
PROMPT_LORA_R, PROMPT_LORA_ALPHA = 16, 32
#: The committed prompt-fine-tuned weights of the packaged MLM (adapters, LayerNorms, head).
COMMITTED_DIR = Path(__file__).resolve().parents[1] / "assets" / "minilm_mlm_prompt"


def prompt_loss(vocab_logits: torch.Tensor, target_ids: torch.Tensor,
                foil_ids: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the two logits ``[target, foil]`` only, with the target as the right class.

    ``vocab_logits``: (batch, vocab) logits at the ``[MASK]`` position. No other vocabulary entry
    enters the loss (its gradient is exactly zero).
    """
    r = torch.arange(vocab_logits.shape[0], device=vocab_logits.device)
    two = torch.stack([vocab_logits[r, target_ids], vocab_logits[r, foil_ids]], dim=-1)
    return torch.nn.functional.cross_entropy(two, torch.zeros_like(target_ids))


def prompt_trainable_names(model) -> tuple[list[str], list[str]]:
    """``(adapters, full)``: the linear maps of every layer that get LoRA adapters, and the
    parameters trained in full (every LayerNorm and the MLM head's own parameters; the tied
    decoder matrix, i.e. the word embeddings, stays frozen)."""
    full = list(dict.fromkeys(layer_norm_param_names(model) + mlm_head_param_names(model)))
    return layer_linear_names(model), full


def recipe_identity(model, train_examples: Sequence[dict], pad: int, settings: dict) -> str:
    """What determines the recipe's weights, without the code version: the base model's weights,
    the training examples, the padding id and every setting. The committed weights are used for a
    call whose identity equals their manifest's ``identity``."""
    return stable_hash({"kind": "mlm-prompt-ft", "model": fingerprint_model(model),
                        "data": fingerprint_examples(train_examples), "pad": pad, **settings})


def committed_prompt_state(identity: str, folder: Path | None = None):
    """``(state, manifest)`` of the committed prompt-fine-tuned weights if their manifest's
    ``identity`` is ``identity`` (sha256 of every file checked), else None."""
    from cmixlib.models.classifiers import verified_state

    folder = COMMITTED_DIR if folder is None else Path(folder)
    path = folder / "manifest.json"
    if not path.exists() or json.loads(path.read_text()).get("identity") != identity:
        return None
    return verified_state(folder)


def finetune_prompt(mlm_model, train_examples: Sequence[dict], *, epochs: int = 5,
                    batch_size: int = 64, lr: float = PROMPT_LR, warmup: float = 0.1,
                    seed: int = 42, weight_decay: float = 0.0, lora_r: int = PROMPT_LORA_R,
                    lora_alpha: float = PROMPT_LORA_ALPHA,
                    test_examples: Sequence[dict] | None = None,
                    pad_token_id: int | None = None, model_name: str | None = None,
                    use_cache: bool = True, use_committed: bool = True, progress: bool = True):
    """Prompt fine-tuning (the VZ paper's loss, data and schedule; LoRA, see the module
    docstring). Returns ``(model, info)``; the input model is not changed.

    A copy of ``mlm_model`` gets LoRA adapters (``prompt_trainable_names``), dropout on, and
    is trained with cross-entropy over ``[logit(target), logit(foil)]`` at ``target_index``
    (:func:`prompt_loss`), AdamW (no weight decay), linear schedule with ``warmup`` ratio of
    warm-up steps, examples reshuffled every epoch with a generator seeded by ``seed``
    (:func:`~cmixlib.training.fit` over :func:`~cmixlib.training.epoch_batches`). The trained
    tensors are rounded to float16 and merged into another copy,
    :math:`W' = W + \\frac{\\alpha}{r} B A` (:func:`cmixlib.models.classifiers.merge_weights`), so the
    result is a plain model. Where the committed weights were made by this very call
    (``recipe_identity``; ``use_committed``), they are loaded instead of training; otherwise
    the trained tensors are cached. With ``test_examples``, ``info["accuracy"]`` is the share of
    test examples with logit(target) > logit(foil) (paper: 0.99 for BERT).
    """
    from cmixlib.models.classifiers import merge_weights

    model = copy.deepcopy(mlm_model)
    pad = pad_id(model) if pad_token_id is None else pad_token_id
    settings = dict(epochs=epochs, batch_size=batch_size, lr=lr, warmup=warmup, seed=seed,
                    weight_decay=weight_decay, optimizer="AdamW", schedule="linear",
                    loss="CE over [target, foil] logits at [MASK]", method="LoRA",
                    lora_r=lora_r, lora_alpha=lora_alpha)
    identity = recipe_identity(model, train_examples, pad, settings)
    key = cache_key("mlm-prompt-ft", identity=identity)
    path = cache_file("mlm-prompt-ft", key)
    committed = committed_prompt_state(identity) if use_committed else None
    cached = load_cached(path) if use_cache and committed is None else None
    if committed is not None:
        state, man = committed
        info = {**man["info"], "from_cache": True, "committed": str(COMMITTED_DIR),
                "trained_on": man.get("hardware", "?"), "cache_key": key}
    elif cached is not None:
        state, info = cached
        info.update(from_cache=True, cache_file=str(path))
    else:
        info = base_info("mlm-prompt-finetuned", model, model_name or
                         getattr(model.config, "_name_or_path", "") or type(model).__name__,
                         getattr(model.config, "_name_or_path", ""), False)
        t0 = time.perf_counter()
        set_seed(seed)
        work = copy.deepcopy(model)
        dev = model_device(work)
        adapters, full = prompt_trainable_names(work)
        params = add_lora(work, adapters, full, lora_r, lora_alpha)
        work.train()
        n = len(train_examples)
        total = math.ceil(n / batch_size) * epochs

        def loss_fn(b: list[int]) -> torch.Tensor:
            exs = [train_examples[i] for i in b]
            ids, att = pad_sequences([ex["input_ids"] for ex in exs], pad, dev)
            pos = torch.as_tensor([int(ex["target_index"]) for ex in exs], device=dev)
            t = torch.as_tensor([int(ex["target_id"]) for ex in exs], device=dev)
            f = torch.as_tensor([int(ex["foil_id"]) for ex in exs], device=dev)
            return prompt_loss(logits_at(work, ids, att, pos), t, f)

        run = fit(list(params.values()), loss_fn, epoch_batches(n, batch_size, epochs, seed),
                  total_steps=total, lr=lr, weight_decay=weight_decay, warmup=warmup,
                  name="prompt fine-tuning", progress=progress)
        state = trainable_state(params)
        info.update(data={"n_train": n, "train_fingerprint": fingerprint_examples(train_examples)},
                    settings={**settings, "total_steps": total,
                              "warmup_steps": warmup_steps_for(total, warmup),
                              "trained_in_full": "every LayerNorm, the MLM head's own parameters",
                              "adapters": len(adapters)},
                    metrics={"train_loss_per_epoch": [round(x, 4) for x in run.epoch_losses]},
                    train_wall_s=time.perf_counter() - t0, from_cache=False, cache_key=key,
                    cache_file=str(path), identity=identity)
        if use_cache:
            save_cached(path, state, info)
    merge_weights(model, state, float(lora_alpha) / lora_r)
    model.eval()
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
                       lr: float = PROMPT_LR, warmup: float = 0.1, seed: int = 42,
                       max_train_examples: int | None = None, use_cache: bool = True,
                       use_committed: bool = True, progress: bool = True, pretrained=None,
                       **mlm_kw):
    """The "fine-tuned" MLM of the VZ experiments. Returns ``(bundle, info)``.

    Starts from :func:`~cmixlib.training.load_mlm_model` (or ``pretrained``, a ``(bundle, info)``
    pair from it) and prompt-fine-tunes it on the BLiMP agreement *train* split;
    ``info["accuracy"]`` is the agreement accuracy on the *test* split. ``max_train_examples``
    (seeded subset) shortens training. For the packaged MLM with the default settings the
    committed weights are loaded (:func:`finetune_prompt`, ``use_committed``).
    """
    from cmixlib import data

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
                                  model_name=bundle.name, use_cache=use_cache,
                                  use_committed=use_committed, progress=progress)
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
