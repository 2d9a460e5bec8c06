"""The sequence classifiers of the GlobEnc and ALTI chapters: their data
(:func:`classification_data`), fine-tuning (:func:`train_classifier`), dev accuracy
(:func:`classifier_accuracy`) and layer pruning for a DistilBERT-style student
(:func:`keep_encoder_layers`).

GlobEnc fine-tunes the whole encoder plus a fresh classification head on SST-2, MNLI or
HateXplain with batch size 32 and learning rate 3e-5; epochs and training-set size are reduced
for CPU and recorded in ``info``.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np
import torch

from cmixlib.models import arch
from cmixlib.models.devices import model_device
from cmixlib.models.loading import load_model
from cmixlib.training.common import (base_info, bundle_parts, cache_file, cache_key,
                                     fingerprint_model, fingerprint_texts, load_cached, pad_id,
                                     progress_bar, save_cached, set_seed)
from cmixlib.forward.batching import length_batches, pad_sequences
from cmixlib.training.loop import epoch_batches, fit

CLASSIFIER_TASKS = ("sst2", "mnli", "hatexplain")
#: Label orders (index = class id). MNLI follows GLUE/HF; HateXplain follows the authors' LabelEncoder.
LABELS = {
    "sst2": ["negative", "positive"],
    "mnli": ["entailment", "neutral", "contradiction"],
    "hatexplain": ["hatespeech", "normal", "offensive"],
}
#: MNLI: only dev-matched is available (9,815 rows). It is split once, with this seed, into a
#: held-out "dev" part of :data:`MNLI_DEV_SIZE` rows and a training pool (the rest).
MNLI_SPLIT_SEED = 42
#: Rows of MNLI dev-matched held out as the "dev" part (see :data:`MNLI_SPLIT_SEED`).
MNLI_DEV_SIZE = 2000


def label_ids(values, task: str) -> list[int]:
    """Class ids (indices into :data:`LABELS` ``[task]``) of labels given as names (any case) or ids."""
    names = LABELS[task]
    out = []
    for v in values:
        if isinstance(v, str) and not v.lstrip("-").isdigit():
            out.append(names.index(v.strip().lower()))
        else:
            out.append(int(v))
    return out


def classification_data(task: str, *, max_train_examples: int | None = None,
                        max_dev_examples: int | None = None, seed: int = 42) -> dict:
    """Train and dev data for a GlobEnc task: ``{"train": (inputs, labels), "dev": ..., "description"}``.

    ``inputs`` are strings (SST-2, HateXplain) or ``(premise, hypothesis)`` pairs (MNLI).

    * SST-2: GLUE train (67,349 phrases) / dev (872 sentences).
    * MNLI: only dev-matched (9,815) exists here; it is split with seed :data:`MNLI_SPLIT_SEED` into
      a dev part of :data:`MNLI_DEV_SIZE` rows and a training pool of the rest.
    * HateXplain: the official train / validation split (majority labels, 3 classes).

    The training set is a seeded random subset of ``max_train_examples``; dev is the first
    ``max_dev_examples`` rows (all by default).
    """
    from cmixlib import data

    task = task.lower().replace("-", "")
    if task == "sst2":
        tr, dv = data.load_sst2(split="train"), data.load_sst2(split="dev")
        xtr, xdv = list(tr["sentence"].astype(str)), list(dv["sentence"].astype(str))
        desc = "SST-2 (GLUE train / dev)"
    elif task == "mnli":
        df = data.load_mnli()
        order = np.random.default_rng(MNLI_SPLIT_SEED).permutation(len(df))
        dv, tr = df.iloc[order[:MNLI_DEV_SIZE]], df.iloc[order[MNLI_DEV_SIZE:]]
        xtr = list(zip(tr["premise"].astype(str), tr["hypothesis"].astype(str)))
        xdv = list(zip(dv["premise"].astype(str), dv["hypothesis"].astype(str)))
        desc = (f"MNLI dev-matched ({len(df)} rows) split with seed {MNLI_SPLIT_SEED}: "
                f"{len(tr)} train pool / {len(dv)} dev")
    elif task == "hatexplain":
        tr = data.load_hatexplain("train")
        dv = None
        for name in ("val", "validation", "dev"):
            try:
                dv = data.load_hatexplain(name)
                break
            except Exception:  # noqa: BLE001
                continue
        if dv is None:
            raise RuntimeError("cmixlib.data.load_hatexplain has no validation split")
        xtr, xdv = list(tr["text"].astype(str)), list(dv["text"].astype(str))
        desc = "HateXplain (official train / validation, majority label)"
    else:
        raise ValueError(f"Unknown task {task!r}; choose one of {CLASSIFIER_TASKS}.")
    ytr, ydv = label_ids(tr["label"], task), label_ids(dv["label"], task)
    pool = len(xtr)
    if max_train_examples is not None and max_train_examples < len(xtr):
        idx = sorted(np.random.default_rng(seed).permutation(len(xtr))[:max_train_examples].tolist())
        xtr, ytr = [xtr[i] for i in idx], [ytr[i] for i in idx]
    if max_dev_examples is not None:
        xdv, ydv = xdv[:max_dev_examples], ydv[:max_dev_examples]
    return {"train": (xtr, ytr), "dev": (xdv, ydv), "train_pool": pool, "description": desc}


def _tokenize(tok, inputs, max_length: int) -> list[tuple[list[int], list[int] | None]]:
    """``(input_ids, token_type_ids or None)`` per input (a string or a pair of strings)."""
    if inputs and isinstance(inputs[0], (tuple, list)) and len(inputs[0]) == 2 \
            and isinstance(inputs[0][0], str):
        enc = tok([a for a, _ in inputs], [b for _, b in inputs], truncation=True,
                  max_length=max_length)
    else:
        enc = tok(list(inputs), truncation=True, max_length=max_length)
    out = [list(x) for x in enc["input_ids"]]
    if "token_type_ids" in enc:
        return [(ids, list(tt)) for ids, tt in zip(out, enc["token_type_ids"])]
    return [(ids, None) for ids in out]


def _cls_batch(encoded, idx, pad, dev) -> dict:
    """Model inputs (ids, attention mask, token types if any) for the examples ``idx``."""
    ids, att = pad_sequences([encoded[i][0] for i in idx], pad, dev)
    kw = {"input_ids": ids, "attention_mask": att}
    if encoded[idx[0]][1] is not None:
        tt = torch.zeros_like(ids)
        for r, i in enumerate(idx):
            tt[r, : len(encoded[i][1])] = torch.as_tensor(encoded[i][1])
        kw["token_type_ids"] = tt
    return kw


@torch.no_grad()
def classifier_accuracy(model, tokenizer, inputs, labels, *, max_length: int = 128,
                        batch_size: int = 64, progress: bool = False) -> float:
    """Accuracy of a sequence classifier on ``inputs`` (strings or (a, b) pairs)."""
    enc = _tokenize(tokenizer, inputs, max_length)
    dev = model_device(model)
    pad = pad_id(model, tokenizer)
    was = model.training
    model.eval()
    correct = 0
    for b in progress_bar(length_batches([len(e[0]) for e in enc], batch_size), desc="dev eval",
                          disable=not progress, leave=False):
        pred = model(**_cls_batch(enc, b, pad, dev)).logits.argmax(-1).cpu()
        correct += int((pred == torch.as_tensor([labels[i] for i in b])).sum())
    model.train(was)
    return correct / max(1, len(labels))


def keep_encoder_layers(model, keep: Sequence[int]) -> list[int]:
    """Keep only the encoder layers ``keep`` (0-based, strictly increasing), in place; returns them.

    This is how DistilBERT's student was initialised from BERT (Sanh et al. 2019: "taking one
    layer out of two"); e.g. ``keep=range(0, L, 2)``. The embeddings, the remaining layers' weights
    and any head are untouched; the config's layer count is updated. Any family of
    :mod:`cmixlib.models.arch` (base model or with a head).
    """
    holder, attr = arch.layer_holder(model)
    count_key = arch.family_of(model).layer_count_key
    layers = list(getattr(holder, attr))
    keep = [int(k) for k in keep]
    if not keep or any(not 0 <= k < len(layers) for k in keep) \
            or any(a >= b for a, b in zip(keep, keep[1:])):
        raise ValueError(f"keep_layers={keep} must be strictly increasing indices in "
                         f"0..{len(layers) - 1}.")
    setattr(holder, attr, torch.nn.ModuleList([layers[k] for k in keep]))
    setattr(model.config, count_key, len(keep))
    if hasattr(holder, count_key):  # a layer stack that keeps its own count (DistilBERT's)
        setattr(holder, count_key, len(keep))
    return keep


def train_classifier(task_name: str, name: str | None = None, *,
                     max_train_examples: int | None = 1500, epochs: int = 2, batch_size: int = 32,
                     lr: float = 3e-5, warmup: float = 0.0, weight_decay: float = 0.0,
                     max_length: int = 128, seed: int = 42, max_dev_examples: int | None = None,
                     use_cache: bool = True, progress: bool = True, bundle=None,
                     task_data: dict | None = None, keep_layers: Sequence[int] | None = None,
                     **load_kw):
    """Fine-tune a sequence classifier as in GlobEnc. Returns ``(bundle, info)``; ``info["accuracy"]`` = dev accuracy.

    GlobEnc: BERT-base, batch 32, lr 3e-5, 3-5 epochs (paper §4.1). Here: full fine-tuning of the
    encoder plus a fresh (seeded) classification head, AdamW without weight decay, linear decay
    with no warm-up (the HF ``Trainer`` defaults; GlobEnc ships no training code), dropout on,
    ``max_length`` tokens, and for CPU a seeded subset of ``max_train_examples`` training examples
    and ``epochs`` epochs (both recorded in ``info``); the steps are those of
    :func:`~cmixlib.training.fit` over :func:`~cmixlib.training.epoch_batches`. ``bundle`` (a
    ``ModelBundle`` from ``load_model(task="sequence-classification", num_labels=...)``, or any
    model with ``num_labels`` outputs plus tokenizer) replaces loading ``name``, and ``task_data``
    (same format as :func:`classification_data`) replaces the task's data (both used by the tests).
    Cached: the full ``state_dict``; the key uses the *encoder's* fingerprint (the head is seeded).
    ``keep_layers`` (default None: all layers) first prunes the pre-trained encoder to those layers
    (:func:`keep_encoder_layers`, a DistilBERT-style student); it then enters the cache key (only
    when given, so the keys of full-depth classifiers do not change).
    """

    task = task_name.lower().replace("-", "")
    if task not in CLASSIFIER_TASKS:
        raise ValueError(f"Unknown task {task_name!r}; choose one of {CLASSIFIER_TASKS}.")
    labels = LABELS[task]
    d = task_data or classification_data(task, max_train_examples=max_train_examples,
                                         max_dev_examples=max_dev_examples, seed=seed)
    set_seed(seed)  # the fresh head's initialisation happens while loading
    if bundle is None:
        bundle = load_model(name, task="sequence-classification", num_labels=len(labels),
                            id2label=dict(enumerate(labels)),
                            label2id={lab: i for i, lab in enumerate(labels)}, **load_kw)
    model, tok, mname, source, is_fb = bundle_parts(bundle)
    settings = dict(epochs=epochs, batch_size=batch_size, lr=lr, warmup=warmup,
                    weight_decay=weight_decay, max_length=max_length, seed=seed,
                    max_train_examples=max_train_examples, optimizer="AdamW", schedule="linear",
                    encoder="fine-tuned (all parameters)")
    if keep_layers is not None:
        settings["keep_layers"] = keep_encoder_layers(model, keep_layers)
    xtr, ytr = d["train"]
    xdv, ydv = d["dev"]
    key = cache_key("classifier", task=task, model=fingerprint_model(model.base_model),
                    data=fingerprint_texts(list(zip(xtr, ytr))), **settings)
    path = cache_file(f"classifier-{task}", key)
    cached = load_cached(path) if use_cache else None
    if cached is not None:
        state, info = cached
        model.load_state_dict(state, strict=True)
        info.update(from_cache=True, cache_file=str(path))
    else:
        info = base_info(f"classifier-{task}", model, mname, source, is_fb)
        t0 = time.perf_counter()
        set_seed(seed)
        dev = model_device(model)
        pad = pad_id(model, tok)
        enc = _tokenize(tok, xtr, max_length)
        n = len(enc)
        total = math.ceil(n / batch_size) * epochs
        y = torch.as_tensor(ytr, dtype=torch.long)
        model.train()

        def loss_fn(b: list[int]) -> torch.Tensor:
            out = model(**_cls_batch(enc, b, pad, dev))
            return torch.nn.functional.cross_entropy(out.logits, y[b].to(dev))

        run = fit(model.parameters(), loss_fn, epoch_batches(n, batch_size, epochs, seed),
                  total_steps=total, lr=lr, weight_decay=weight_decay, warmup=warmup,
                  name=f"fine-tuning {task}", progress=progress)
        wall = time.perf_counter() - t0
        model.eval()
        acc = classifier_accuracy(model, tok, xdv, ydv, max_length=max_length, progress=progress)
        counts = np.bincount(ytr, minlength=len(labels)).tolist()
        info.update(data={"dataset": d["description"], "train_pool": d["train_pool"], "n_train": n,
                          "n_dev": len(ydv), "train_label_counts": dict(zip(labels, counts))},
                    settings={**settings, "total_steps": total},
                    metrics={"dev_accuracy": acc,
                             "dev_majority_baseline": float(np.bincount(ydv).max() / max(1, len(ydv))),
                             "final_train_loss": run.recent_loss(20)},
                    accuracy=acc, train_wall_s=wall, from_cache=False, cache_key=key,
                    cache_file=str(path))
        if use_cache:
            save_cached(path, model.state_dict(), info)
    model.eval()
    if hasattr(bundle, "head_is_pretrained"):
        bundle.head_is_pretrained = False
        if keep_layers is not None:
            bundle.notes.append(f"Only encoder layers {settings['keep_layers']} of the pre-trained "
                                "model were kept (DistilBERT-style student, no distillation).")
        bundle.notes.append(f"Fine-tuned on {task} by cmixlib.training "
                            f"(dev accuracy {info['accuracy']:.3f}).")
    return bundle, info
