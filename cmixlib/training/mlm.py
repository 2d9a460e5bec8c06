"""The "pre-trained" masked LM of the Value Zeroing experiments: masking,
training a head on a frozen encoder (:func:`train_mlm_head`), the model every chapter loads
(:func:`load_mlm_model`) and its metrics (masked-word accuracy, BLiMP agreement: the head's
logits and the agreement scores are :mod:`cmixlib.training.mlm_scores`).

When the checkpoint has its own MLM head (``bert-base-uncased`` online) it is used as is; the
packaged offline encoder gets the committed adaptation of :mod:`cmixlib.models.mlm_adapted`; any other
head-less checkpoint gets the usual BERT head (dense + GELU + LayerNorm transform, decoder tied to
the word embeddings, output bias) trained on top of the **frozen** encoder.
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from cmixlib.cache import stable_hash
from cmixlib.models import mlm_adapted
from cmixlib.models.devices import model_device
from cmixlib.models.loading import load_model, packaged_model_path
from cmixlib.models.mlm_adapted import HELDOUT_SOURCES, heldout_texts
from cmixlib.training.common import (base_info, bundle_parts, cache_file, cache_key, cached_json,
                                     fingerprint_examples, fingerprint_model, fingerprint_texts,
                                     load_cached, pad_id, progress_bar, save_cached, set_seed)
from cmixlib.forward.batching import length_batches, pad_sequences
from cmixlib.training.loop import fit, stream_batches
from cmixlib.training.mlm_scores import (decoder_is_tied, mlm_agreement_scores, mlm_head_logits,
                                         mlm_head_param_names)

#: Text for training the offline MLM head: SST-2 *train* phrases with at least this many words.
MLM_MIN_WORDS = 8


def _as_mlm(model):
    """The model itself if it has an MLM head, else a ``*ForMaskedLM`` built around its encoder."""
    if model.get_output_embeddings() is not None and hasattr(model, "base_model_prefix") \
            and hasattr(model, model.base_model_prefix):
        return model
    from transformers import AutoModelForMaskedLM

    mlm = AutoModelForMaskedLM.from_config(model.config, attn_implementation="eager")
    missing, _ = mlm.base_model.load_state_dict(model.base_model.state_dict(), strict=False)
    if missing:
        raise ValueError(f"Could not transfer the encoder weights: missing {missing[:5]}")
    return mlm.to(model_device(model)).eval()


def _init_head(model, names: Sequence[str], seed: int) -> None:
    """Deterministic BERT-style init of the head's own parameters (normal(0, init_range) / 1 / 0)."""
    std = float(getattr(model.config, "initializer_range", 0.02))
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in names:
            p = params[n]
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif n.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()


# ============================================================================================
# Masking
# ============================================================================================
def _encode_texts(tokenizer, texts: Sequence[Any], max_length: int) -> list[list[int]]:
    """Token ids with special tokens; ``texts`` may already be lists of ids."""
    if len(texts) and not isinstance(texts[0], str):
        return [list(map(int, t))[:max_length] for t in texts]
    enc = tokenizer(list(texts), truncation=True, max_length=max_length, add_special_tokens=True)
    return [list(x) for x in enc["input_ids"]]


def static_masking(seqs: Sequence[Sequence[int]], *, mask_prob: float, mask_id: int,
                   special_ids: set[int], seed: int) -> list[tuple[list[int], list[int], list[int]]]:
    """One fixed masking pattern per sequence: ``(masked_ids, positions, original_ids)``.

    ``round(mask_prob * n)`` (at least 1) of the ``n`` non-special tokens are replaced by ``[MASK]``.
    All chosen tokens become ``[MASK]`` (no 80/10/10): the head is only ever queried at ``[MASK]``.
    """
    rng = np.random.default_rng(seed)
    out = []
    for s in seqs:
        cand = [i for i, t in enumerate(s) if t not in special_ids]
        if not cand:
            continue
        k = max(1, int(round(mask_prob * len(cand))))
        pos = sorted(rng.choice(cand, size=min(k, len(cand)), replace=False).tolist())
        masked = list(s)
        for p in pos:
            masked[p] = mask_id
        out.append((masked, pos, [s[p] for p in pos]))
    return out


@torch.no_grad()
def _masked_features(model, masked: list, pad: int, batch_size: int, progress: bool,
                     desc: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Final hidden states at every masked position (frozen encoder, eval mode) and their labels."""
    base = model.base_model
    was_training = base.training
    base.eval()
    dev = model_device(model)
    feats, labels = [], []
    batches = length_batches([len(m[0]) for m in masked], batch_size)
    for b in progress_bar(batches, desc=desc, disable=not progress, leave=False):
        ids, att = pad_sequences([masked[i][0] for i in b], pad, dev)
        h = base(input_ids=ids, attention_mask=att).last_hidden_state
        for row, i in enumerate(b):
            feats.append(h[row, masked[i][1]].float().cpu())
            labels.append(torch.as_tensor(masked[i][2], dtype=torch.long))
    base.train(was_training)
    return torch.cat(feats), torch.cat(labels)


def masked_word_accuracy(model, tokenizer, texts: Sequence[Any], *, mask_prob: float = 0.15,
                         seed: int = 0, max_length: int = 64, batch_size: int = 64,
                         progress: bool = False) -> dict:
    """Top-1 accuracy of the MLM at ``[MASK]`` positions of ``texts`` (static masking, seeded).

    Returns ``{"accuracy", "n_masked", "n_texts"}``.
    """
    seqs = _encode_texts(tokenizer, texts, max_length)
    masked = static_masking(seqs, mask_prob=mask_prob, mask_id=tokenizer.mask_token_id,
                            special_ids=set(tokenizer.all_special_ids), seed=seed)
    feats, labels = _masked_features(model, masked, pad_id(model, tokenizer), batch_size,
                                     progress, "masked-word eval")
    was = model.training
    model.eval()
    with torch.no_grad():
        correct = 0
        for i in range(0, len(feats), 512):
            x = feats[i:i + 512].to(model_device(model))
            correct += int((mlm_head_logits(model, x).argmax(-1).cpu() == labels[i:i + 512]).sum())
    model.train(was)
    return {"accuracy": correct / max(1, len(labels)), "n_masked": int(len(labels)),
            "n_texts": len(masked)}


# ============================================================================================
# An MLM head on a frozen encoder
# ============================================================================================
def train_mlm_head(bundle, texts: Sequence[Any], *, steps: int = 400, batch_size: int = 128,
                   lr: float = 5e-3, seed: int = 42, mask_prob: float = 0.15, warmup: float = 0.05,
                   weight_decay: float = 0.0, max_length: int = 64, encode_batch_size: int = 64,
                   data_name: str = "custom texts", use_cache: bool = True, progress: bool = True):
    """Train the MLM head of ``bundle`` on ``texts`` with the encoder frozen. Returns ``(model, info)``.

    ``bundle`` is a :class:`~cmixlib.models.loading.ModelBundle` (or a ``(model, tokenizer)`` pair) whose
    model is a ``*ForMaskedLM`` (a bare encoder is wrapped into one). The head's own parameters
    (for BERT: transform dense + LayerNorm and the output bias) are re-initialised (seeded) and
    trained; the decoder stays tied to the frozen word embeddings, so nothing in the encoder moves.

    Because the encoder is frozen, each text gets one fixed (seeded) masking pattern, the encoder is
    run once over all masked texts, and the head is trained (:func:`~cmixlib.training.fit`) for
    ``steps`` AdamW steps of ``batch_size`` masked positions on those features
    (:func:`~cmixlib.training.stream_batches`; linear schedule, ``warmup`` ratio). The model is
    modified in place and returned. Cached: only the head's parameters are stored.
    """
    model, tok, name, source, is_fb = bundle_parts(bundle)
    model = _as_mlm(model)
    if not decoder_is_tied(model):
        warnings.warn("cmixlib: the MLM decoder is not tied to the word embeddings; it is trained "
                      "as part of the head.")
    head_names = mlm_head_param_names(model)
    settings = dict(steps=steps, batch_size=batch_size, lr=lr, seed=seed, mask_prob=mask_prob,
                    warmup=warmup, weight_decay=weight_decay, max_length=max_length,
                    optimizer="AdamW", schedule="linear", masking="static, all [MASK]")
    key = cache_key("mlm-head", model=fingerprint_model(model.base_model),
                    texts=fingerprint_texts(texts), head=head_names, **settings)
    path = cache_file("mlm-head", key)
    cached = load_cached(path) if use_cache else None
    if cached is not None:
        state, info = cached
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or set(state) != set(head_names):
            raise RuntimeError(f"Cache file {path} does not match this model's head.")
        info.update(from_cache=True, cache_file=str(path))
        model.eval()
        return model, info

    info = base_info("mlm-head", model, name, source, is_fb)
    t0 = time.perf_counter()
    set_seed(seed)
    _init_head(model, head_names, seed)
    for n, p in model.named_parameters():
        p.requires_grad_(n in head_names)
    seqs = _encode_texts(tok, texts, max_length)
    masked = static_masking(seqs, mask_prob=mask_prob, mask_id=tok.mask_token_id,
                            special_ids=set(tok.all_special_ids), seed=seed)
    feats, labels = _masked_features(model, masked, pad_id(model, tok), encode_batch_size,
                                     progress, "encoding (frozen encoder)")
    t_enc = time.perf_counter() - t0
    dev = model_device(model)
    model.eval()  # the head has no dropout; the encoder is not run any more

    def loss_fn(idx: torch.Tensor) -> torch.Tensor:
        logits = mlm_head_logits(model, feats[idx].to(dev))
        return torch.nn.functional.cross_entropy(logits, labels[idx].to(dev))

    run = fit([p for n, p in model.named_parameters() if n in head_names], loss_fn,
              stream_batches(len(labels), batch_size, steps, seed), total_steps=steps, lr=lr,
              weight_decay=weight_decay, warmup=warmup, name="mlm-head", progress=progress,
              log_every=50, log_window=50)
    for p in model.parameters():
        p.requires_grad_(True)
    info.update(
        data={"texts": data_name, "n_texts": len(masked), "n_masked_positions": int(len(labels)),
              "epochs_over_positions": round(steps * batch_size / max(1, len(labels)), 2)},
        settings={**settings, "trained_params": head_names, "encoder": "frozen"},
        metrics={"final_train_loss": run.recent_loss(50)},
        train_wall_s=time.perf_counter() - t0, encode_wall_s=t_enc, from_cache=False,
        cache_key=key, cache_file=str(path))
    if use_cache:
        save_cached(path, {n: p for n, p in model.state_dict().items() if n in head_names}, info)
    model.eval()
    return model, info


def default_mlm_texts(n_train: int = 6000, n_heldout: int = 1000, seed: int = 42,
                      min_words: int = MLM_MIN_WORDS) -> tuple[list[str], list[str], str]:
    """SST-2 **train** phrases with at least ``min_words`` words, de-duplicated and shuffled (seeded).

    Returns ``(train_texts, heldout_texts, description)``; the two parts are disjoint. SST-2 train is
    not an evaluation split anywhere in the book (the SST-2 evaluations use the dev set).
    """
    from cmixlib import data

    df = data.load_sst2(split="train")
    sents = sorted({s.strip() for s in df["sentence"].astype(str) if len(s.split()) >= min_words})
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(sents))
    sents = [sents[i] for i in order]
    if n_train + n_heldout > len(sents):
        n_train = len(sents) - n_heldout
    desc = (f"SST-2 train phrases with >= {min_words} words ({len(sents)} unique; "
            f"{n_train} for training, {n_heldout} held out), shuffled with seed {seed}")
    return sents[:n_train], sents[n_train:n_train + n_heldout], desc


# ============================================================================================
# The "pre-trained" MLM of the VZ experiments
# ============================================================================================
def load_mlm_model(name: str | None = None, *, steps: int = 400, batch_size: int = 128,
                   lr: float = 5e-3, seed: int = 42, mask_prob: float = 0.15, n_texts: int = 6000,
                   n_heldout: int = 1000, evaluate: bool = True, use_cache: bool = True,
                   progress: bool = True, **load_kw):
    """The "pre-trained" MLM of the VZ experiments. Returns ``(bundle, info)``.

    ``bundle.model`` is a ``*ForMaskedLM``. Three cases, recorded in ``info["kind"]``:

    * the checkpoint ships an MLM head (``bert-base-uncased`` where it loads): used unchanged
      (``"mlm-pretrained-head"``);
    * the offline fallback (the packaged all-MiniLM-L6-v2): the committed MLM adaptation of
      :mod:`cmixlib.models.mlm_adapted` is applied (checksums verified) (``"mlm-adapted"``);
      ``bundle.describe()`` and ``info["description"]`` say exactly what it is;
    * any other checkpoint without a head: a BERT head is trained on the frozen encoder with
      :func:`train_mlm_head` on :func:`default_mlm_texts` (``"mlm-head"``, with a warning: a
      head alone does not make a sentence encoder a language model).

    With ``evaluate``, ``info["metrics"]`` holds the masked-word top-1 accuracy on held-out
    passages (:func:`cmixlib.models.mlm_adapted.heldout_texts`, static masking of ``mask_prob``) and the
    BLiMP agreement accuracy on the test split, overall and per subset (all cached on disk).
    """

    bundle = load_model(name, task="mlm", **load_kw)
    if bundle.head_is_pretrained:
        info = base_info("mlm-pretrained-head", bundle.model, bundle.name, bundle.source,
                         bundle.is_fallback)
        info.update(data={}, settings={"head": "from the checkpoint"}, metrics={},
                    train_wall_s=None, from_cache=False,
                    cache_key=fingerprint_model(bundle.model)[:16],
                    description=f"{bundle.name} with its own MLM head")
    elif bundle.is_fallback or _is_packaged(bundle.source):

        mlm_adapted.apply_adapted_weights(bundle.model)
        bundle.model.eval()
        m = mlm_adapted.manifest()
        desc = mlm_adapted.description()
        bundle.name = mlm_adapted.SHORT_NAME
        bundle.variant = desc.removeprefix(mlm_adapted.SHORT_NAME).strip()
        info = base_info("mlm-adapted", bundle.model, bundle.name, bundle.source,
                         bundle.is_fallback)
        info.update(data={"texts": mlm_adapted.CORPUS_NAME, "passages": m["corpus"]["passages"],
                          "tokens": m["corpus"]["tokens"]},
                    settings=m["settings"], steps=m["steps"],
                    tokens_seen=m["tokens_seen"], train_wall_s=m["train_wall_s"],
                    trained_on=m["device"], from_cache=True, description=desc,
                    cache_key=stable_hash(m["shard_sha256"]))
    else:
        warnings.warn(f"cmixlib: {bundle.name} has no MLM head; training one on the frozen encoder "
                      "(a head alone may not model English: check info['metrics']).", stacklevel=2)
        train_texts, _, desc = default_mlm_texts(n_texts, n_heldout, seed)
        model, info = train_mlm_head(bundle, train_texts, steps=steps, batch_size=batch_size,
                                     lr=lr, seed=seed, mask_prob=mask_prob, data_name=desc,
                                     use_cache=use_cache, progress=progress)
        bundle.model = model
        bundle.notes.append("MLM head trained by cmixlib.training on the frozen encoder: " + desc)
        info["description"] = f"{bundle.name} + MLM head trained on the frozen encoder"
    if evaluate:
        info["metrics"] = {**info.get("metrics", {}),
                           **mlm_metrics(bundle, info["cache_key"], mask_prob=mask_prob,
                                         seed=seed, use_cache=use_cache, progress=progress)}
        info["accuracy"] = info["metrics"]["agreement_accuracy_test"]
    return bundle, info


def _is_packaged(source: str) -> bool:
    """True when ``source`` is the folder of the packaged all-MiniLM-L6-v2."""

    pkg = packaged_model_path()
    return pkg is not None and Path(source).exists() and Path(source).resolve() == pkg


def mlm_metrics(bundle, key: str, *, mask_prob: float = 0.15, seed: int = 42,
                use_cache: bool = True, progress: bool = False) -> dict:
    """Masked-word top-1 accuracy on the held-out passages of ``data/mlm_heldout`` (per source)
    and BLiMP agreement accuracy (logit of the right word > logit of the foil at ``[MASK]``) on
    the test split, overall and per subset. Cached under ``key`` (the model's identity)."""
    from cmixlib import data

    out: dict[str, Any] = {}
    for source in HELDOUT_SOURCES:
        texts = heldout_texts(source)
        mw = cached_json("mlm-maskacc", stable_hash([key, fingerprint_texts(texts), mask_prob,
                                                     seed]),
                         lambda: masked_word_accuracy(bundle.model, bundle.tokenizer, texts,
                                                      mask_prob=mask_prob, seed=seed + 1,
                                                      max_length=128),
                         use_cache)
        out[f"masked_word_accuracy_{source}"] = mw["accuracy"]
        out[f"n_masked_{source}"] = mw["n_masked"]
    test = data.load_blimp_agreement(bundle.tokenizer, split="test", seed=42, progress=False)

    def agreement() -> dict:
        ok = mlm_agreement_scores(bundle.model, test, progress=progress) > 0
        by: dict[str, list[bool]] = {}
        for e, o in zip(test, ok):
            by.setdefault(e["uid"], []).append(bool(o))
        return {"accuracy": float(ok.mean()), "n": len(test),
                "by_subset": {k: float(np.mean(v)) for k, v in sorted(by.items())},
                "n_by_subset": {k: len(v) for k, v in sorted(by.items())}}

    agr = cached_json("mlm-agreement-by-subset", stable_hash([key, fingerprint_examples(test)]),
                      agreement, use_cache)
    out.update(masked_word_accuracy_heldout=out["masked_word_accuracy_eltec"],
               agreement_accuracy_test=agr["accuracy"], n_agreement_test=agr["n"],
               agreement_by_subset=agr["by_subset"], n_agreement_by_subset=agr["n_by_subset"])
    return out
