"""Training the models the book analyses, with a disk cache so that each is trained only once.

Three conditions are needed by the papers and cannot be downloaded offline:

* **"Pre-trained" MLM** (Value Zeroing, pre-trained condition). When the checkpoint has its own
  MLM head (``bert-base-uncased`` online) it is used as is. The packaged offline encoder
  (``all-MiniLM-L6-v2``) has none, so :func:`train_mlm_head` trains the usual BERT head
  (dense + GELU + LayerNorm transform, decoder tied to the word embeddings, output bias) on
  top of the **frozen** encoder. Only the head's own parameters are trained; the tied decoder
  matrix *is* the (frozen) word-embedding matrix.
* **"Fine-tuned" MLM** (Value Zeroing, fine-tuned condition): :func:`finetune_prompt` is the
  paper's prompt fine-tuning: full fine-tuning, cross-entropy over the two logits
  ``[target, foil]`` at the ``[MASK]`` position only, AdamW lr 3e-5, linear schedule with 10%
  warm-up, seed 42.
* **Sequence classifiers** (GlobEnc): :func:`train_classifier` fine-tunes the whole encoder plus a
  fresh classification head on SST-2, MNLI or HateXplain with GlobEnc's batch size 32 and learning
  rate 3e-5; epochs and training-set size are reduced for CPU and recorded.

Every trained model is cached under ``.cmix_cache/models/`` in the repository root (``$CMIX_CACHE``
replaces ``.cmix_cache``). The file name holds a hash of everything that determines the weights:
the base model (name, source and a fingerprint of its weights), the task, a fingerprint of the
training data, every setting, and :data:`CODE_VERSION`. A later call with the same inputs loads
the file instead of training; any changed setting trains a new model. Only what is needed is
saved: the head's parameters when the encoder is frozen, the full ``state_dict`` otherwise.

Every function returns, next to the model, an ``info`` dict (model name, data sizes, settings,
accuracy, wall time, cache key) that the book prints with :func:`format_info`.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from .cache import cache_root, jsonable, stable_hash
from .models import model_device

#: Bump when a change to this module changes the weights it produces (invalidates the cache).
CODE_VERSION = "training-1"
from .cache import CACHE_ENV_VAR  # noqa: E402  (re-exported)

#: Label orders (index = class id). MNLI follows GLUE/HF; HateXplain follows the authors' LabelEncoder.
LABELS = {
    "sst2": ["negative", "positive"],
    "mnli": ["entailment", "neutral", "contradiction"],
    "hatexplain": ["hatespeech", "normal", "offensive"],
}
#: MNLI: only dev-matched is available (9,815 rows). It is split once, with this seed, into a
#: held-out "dev" part of :data:`MNLI_DEV_SIZE` rows and a training pool (the rest).
MNLI_SPLIT_SEED = 42
MNLI_DEV_SIZE = 2000

#: Text for training the offline MLM head: SST-2 *train* phrases with at least this many words.
MLM_MIN_WORDS = 8


# ============================================================================================
# Cache
# ============================================================================================
def model_cache_dir() -> Path:
    """Folder holding trained weights: ``<cache root>/models``."""
    return cache_root() / "models"


def fingerprint_texts(texts: Iterable[Any]) -> str:
    """Hash of a sequence of texts (strings, pairs of strings, or token-id lists), order included."""
    h = hashlib.sha256()
    for t in texts:
        h.update(json.dumps(jsonable(t)).encode())
        h.update(b"\x00")
    return h.hexdigest()[:16]


_EXAMPLE_KEYS = ("input_ids", "target_index", "target_id", "foil_id")


def fingerprint_examples(examples: Sequence[dict]) -> str:
    """Hash of agreement examples (the fields that enter training: ids, target index, target/foil)."""
    return fingerprint_texts([[ex[k] for k in _EXAMPLE_KEYS] for ex in examples])


def fingerprint_model(model: torch.nn.Module) -> str:
    """Hash of a model's config and all its weights (so a changed base model retrains)."""
    h = hashlib.blake2b(digest_size=16)
    cfg = getattr(model, "config", None)
    if cfg is not None:
        h.update(type(model).__name__.encode())
        d = cfg.to_dict()
        for k in ("_name_or_path", "transformers_version", "_attn_implementation_autoset", "id2label", "label2id"):
            d.pop(k, None)
        h.update(json.dumps(jsonable(d), sort_keys=True).encode())
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def cache_key(kind: str, **parts: Any) -> str:
    """Cache key for a trained artefact: hash of ``kind``, ``parts`` and :data:`CODE_VERSION`."""
    return stable_hash({"kind": kind, "code_version": CODE_VERSION, **parts})


def cache_file(kind: str, key: str) -> Path:
    return model_cache_dir() / f"{kind}-{key}.pt"


def _save_cached(path: Path, state_dict: dict, info: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save({"state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
                "info": jsonable(info)}, tmp)
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(json.dumps(jsonable(info), indent=2))


def _load_cached(path: Path) -> tuple[dict, dict] | None:
    if not path.exists():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a corrupt file is retrained
        warnings.warn(f"cmixlib: ignoring unreadable cache file {path} ({exc}); retraining.")
        return None
    return blob["state_dict"], blob["info"]


def _cached_json(kind: str, key: str, compute: Callable[[], dict], use_cache: bool = True) -> dict:
    """Small JSON cache for evaluations (``<cache root>/evals``)."""
    path = cache_root() / "evals" / f"{kind}-{key}.json"
    if use_cache and path.exists():
        try:
            return json.loads(path.read_text())
        except Exception:  # noqa: BLE001
            pass
    value = jsonable(compute())
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(value, indent=2))
        os.replace(tmp, path)
    return value


# ============================================================================================
# Small utilities
# ============================================================================================
def set_seed(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators."""
    import random

    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


def linear_schedule_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """LR multiplier of the linear schedule with warm-up (same as HF ``get_linear_schedule_with_warmup``).

    Rises linearly from 0 to 1 over ``warmup_steps``, then decays linearly to 0 at ``total_steps``.
    """
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def warmup_steps_for(total_steps: int, warmup: float) -> int:
    """Number of warm-up steps for a warm-up *ratio* (rounded up, as HF ``TrainingArguments``)."""
    return int(math.ceil(total_steps * warmup))


def make_linear_scheduler(optimizer, total_steps: int, warmup: float):
    """``LambdaLR`` implementing :func:`linear_schedule_factor` with ``warmup`` as a ratio."""
    w = warmup_steps_for(total_steps, warmup)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: linear_schedule_factor(s, total_steps, w))


def _tqdm(iterable=None, **kw):
    from tqdm.auto import tqdm

    return tqdm(iterable, **kw)


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` ``(B, n)`` long tensors of token-id sequences, right-padded
    with ``pad_id``, on ``device``."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        att[i, : len(s)] = 1
    return ids.to(device), att.to(device)


def _pad_id(model, tokenizer=None) -> int:
    if tokenizer is not None and getattr(tokenizer, "pad_token_id", None) is not None:
        return int(tokenizer.pad_token_id)
    pid = getattr(model.config, "pad_token_id", None)
    return int(pid) if pid is not None else 0


def _bundle_parts(bundle) -> tuple[Any, Any, str, str, bool]:
    """(model, tokenizer, name, source, is_fallback) from a ModelBundle or a (model, tokenizer) pair."""
    if isinstance(bundle, tuple):
        model, tok = bundle
        name = getattr(model.config, "_name_or_path", "") or type(model).__name__
        return model, tok, name, name, False
    return (bundle.model, bundle.tokenizer, getattr(bundle, "name", "?"),
            getattr(bundle, "source", "?"), bool(getattr(bundle, "is_fallback", False)))


def _base_info(kind: str, model, name: str, source: str, is_fallback: bool) -> dict:
    cfg = model.config
    return {"kind": kind, "model": name, "source": source, "is_fallback": is_fallback,
            "architecture": type(model).__name__,
            "layers": getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layers", None)),
            "hidden": getattr(cfg, "hidden_size", getattr(cfg, "dim", None)),
            "code_version": CODE_VERSION, "torch_threads": torch.get_num_threads(),
            "device": str(model_device(model))}


def format_info(info: dict) -> str:
    """One short paragraph describing a trained model, for printing in the book."""
    parts = [f"{info.get('kind')}: {info.get('model')}"]
    if info.get("is_fallback"):
        parts[0] += " (offline fallback)"
    data = info.get("data") or {}
    if data:
        parts.append("data: " + ", ".join(f"{k}={v}" for k, v in data.items()))
    s = info.get("settings") or {}
    if s:
        parts.append("settings: " + ", ".join(f"{k}={v}" for k, v in s.items()))
    m = info.get("metrics") or {}
    if m:
        parts.append("metrics: " + ", ".join(
            f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items()))
    if info.get("trained_on"):
        parts.append(f"trained once on {info['trained_on']} in {info['train_wall_s']:.0f} s "
                     "(weights committed to the repository)")
    elif info.get("train_wall_s") is not None:
        parts.append(f"training wall time {info['train_wall_s']:.0f} s on {info.get('torch_threads')} thread(s)"
                     + (" (loaded from cache)" if info.get("from_cache") else ""))
    return "; ".join(parts) + "."


# ============================================================================================
# MLM heads: logits at chosen positions, for BERT / RoBERTa / ELECTRA / DistilBERT
# ============================================================================================
def mlm_head_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """Vocabulary logits from final hidden states (any leading shape) through the model's MLM head
    (:func:`cmixlib.models.mlm_head`)."""
    from .models import mlm_head

    transform, decoder = mlm_head(model)
    return decoder(transform(hidden))


def mlm_head_param_names(model) -> list[str]:
    """Names of the MLM head's *own* parameters (everything outside the base encoder).

    The tied decoder matrix is not among them: it is the word-embedding matrix of the encoder.
    """
    prefix = model.base_model_prefix + "."
    return [n for n, _ in model.named_parameters() if not n.startswith(prefix)]


def decoder_is_tied(model) -> bool:
    """True when the output (decoder) matrix is the very same tensor as the input word embeddings."""
    out = model.get_output_embeddings()
    return out is not None and out.weight is model.get_input_embeddings().weight


def logits_at(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              positions: torch.Tensor) -> torch.Tensor:
    """Vocabulary logits at one position per row (``positions``: (batch,)); shape (batch, vocab)."""
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    picked = hidden[torch.arange(hidden.shape[0], device=hidden.device), positions]
    return mlm_head_logits(model, picked)


def _as_mlm(model):
    """The model itself if it has an MLM head, else a ``*ForMaskedLM`` built around its encoder."""
    if model.get_output_embeddings() is not None and hasattr(model, "base_model_prefix") \
            and hasattr(model, model.base_model_prefix):
        return model
    from transformers import AutoModelForMaskedLM

    mlm = AutoModelForMaskedLM.from_config(model.config, attn_implementation="eager")
    base = mlm.base_model
    src = model.base_model
    missing, _ = base.load_state_dict(src.state_dict(), strict=False)
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


def _length_batches(n_items: Sequence[int], batch_size: int) -> list[list[int]]:
    order = sorted(range(len(n_items)), key=lambda i: n_items[i])
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


@torch.no_grad()
def _masked_features(model, masked: list, pad_id: int, batch_size: int, progress: bool,
                     desc: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Final hidden states at every masked position (frozen encoder, eval mode) and their labels."""
    base = model.base_model
    was_training = base.training
    base.eval()
    dev = model_device(model)
    feats, labels = [], []
    batches = _length_batches([len(m[0]) for m in masked], batch_size)
    for b in _tqdm(batches, desc=desc, disable=not progress, leave=False):
        ids, att = pad_sequences([masked[i][0] for i in b], pad_id, dev)
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
    feats, labels = _masked_features(model, masked, _pad_id(model, tokenizer), batch_size, progress,
                                     "masked-word eval")
    was = model.training
    model.eval()
    with torch.no_grad():
        correct = 0
        for i in range(0, len(feats), 512):
            x = feats[i:i + 512].to(model_device(model))
            correct += int((mlm_head_logits(model, x).argmax(-1).cpu() == labels[i:i + 512]).sum())
    model.train(was)
    return {"accuracy": correct / max(1, len(labels)), "n_masked": int(len(labels)), "n_texts": len(masked)}


# ============================================================================================
# 1. "Pre-trained" condition: an MLM head on a frozen encoder
# ============================================================================================
def train_mlm_head(bundle, texts: Sequence[Any], *, steps: int = 400, batch_size: int = 128,
                   lr: float = 5e-3, seed: int = 42, mask_prob: float = 0.15, warmup: float = 0.05,
                   weight_decay: float = 0.0, max_length: int = 64, encode_batch_size: int = 64,
                   data_name: str = "custom texts", use_cache: bool = True, progress: bool = True):
    """Train the MLM head of ``bundle`` on ``texts`` with the encoder frozen. Returns ``(model, info)``.

    ``bundle`` is a :class:`~cmixlib.models.ModelBundle` (or a ``(model, tokenizer)`` pair) whose
    model is a ``*ForMaskedLM`` (a bare encoder is wrapped into one). The head's own parameters
    (for BERT: transform dense + LayerNorm and the output bias) are re-initialised (seeded) and
    trained; the decoder stays tied to the frozen word embeddings, so nothing in the encoder moves.

    Because the encoder is frozen, each text gets one fixed (seeded) masking pattern, the encoder is
    run once over all masked texts, and the head is trained for ``steps`` AdamW steps of
    ``batch_size`` masked positions on those features (linear schedule, ``warmup`` ratio). The
    model is modified in place and returned. Cached: only the head's parameters are stored.
    """
    model, tok, name, source, is_fb = _bundle_parts(bundle)
    model = _as_mlm(model)
    if not decoder_is_tied(model):
        warnings.warn("cmixlib: the MLM decoder is not tied to the word embeddings; it is trained as part of the head.")
    head_names = mlm_head_param_names(model)
    settings = dict(steps=steps, batch_size=batch_size, lr=lr, seed=seed, mask_prob=mask_prob,
                    warmup=warmup, weight_decay=weight_decay, max_length=max_length,
                    optimizer="AdamW", schedule="linear", masking="static, all [MASK]")
    key = cache_key("mlm-head", model=fingerprint_model(model.base_model), texts=fingerprint_texts(texts),
                    head=head_names, **settings)
    path = cache_file("mlm-head", key)
    cached = _load_cached(path) if use_cache else None
    if cached is not None:
        state, info = cached
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or set(state) != set(head_names):
            raise RuntimeError(f"Cache file {path} does not match this model's head.")
        info.update(from_cache=True, cache_file=str(path))
        model.eval()
        return model, info

    info = _base_info("mlm-head", model, name, source, is_fb)
    t0 = time.perf_counter()
    set_seed(seed)
    _init_head(model, head_names, seed)
    for n, p in model.named_parameters():
        p.requires_grad_(n in head_names)
    seqs = _encode_texts(tok, texts, max_length)
    masked = static_masking(seqs, mask_prob=mask_prob, mask_id=tok.mask_token_id,
                            special_ids=set(tok.all_special_ids), seed=seed)
    feats, labels = _masked_features(model, masked, _pad_id(model, tok), encode_batch_size, progress,
                                     "encoding (frozen encoder)")
    t_enc = time.perf_counter() - t0
    dev = model_device(model)
    params = [p for n, p in model.named_parameters() if n in head_names]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = make_linear_scheduler(opt, steps, warmup)
    g = torch.Generator().manual_seed(seed)
    perm, ptr = torch.randperm(len(labels), generator=g), 0
    model.eval()  # the head has no dropout; the encoder is not run any more
    losses = []
    bar = _tqdm(range(steps), desc="training MLM head", disable=not progress)
    for step in bar:
        if ptr + batch_size > len(perm):
            perm, ptr = torch.randperm(len(labels), generator=g), 0
        idx = perm[ptr:ptr + batch_size]
        ptr += batch_size
        logits = mlm_head_logits(model, feats[idx].to(dev))
        loss = torch.nn.functional.cross_entropy(logits, labels[idx].to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
    for p in model.parameters():
        p.requires_grad_(True)
    wall = time.perf_counter() - t0
    info.update(
        data={"texts": data_name, "n_texts": len(masked), "n_masked_positions": int(len(labels)),
              "epochs_over_positions": round(steps * batch_size / max(1, len(labels)), 2)},
        settings={**settings, "trained_params": head_names, "encoder": "frozen"},
        metrics={"final_train_loss": float(np.mean(losses[-50:])) if losses else None},
        train_wall_s=wall, encode_wall_s=t_enc, from_cache=False, cache_key=key, cache_file=str(path))
    state = {n: p for n, p in model.state_dict().items() if n in head_names}
    if use_cache:
        _save_cached(path, state, info)
    model.eval()
    return model, info


def default_mlm_texts(n_train: int = 6000, n_heldout: int = 1000, seed: int = 42,
                      min_words: int = MLM_MIN_WORDS) -> tuple[list[str], list[str], str]:
    """SST-2 **train** phrases with at least ``min_words`` words, de-duplicated and shuffled (seeded).

    Returns ``(train_texts, heldout_texts, description)``; the two parts are disjoint. SST-2 train is
    not an evaluation split anywhere in the book (the SST-2 evaluations use the dev set).
    """
    from . import data

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


def mlm_agreement_scores(model, examples: Sequence[dict], *, batch_size: int = 64,
                         pad_token_id: int | None = None, progress: bool = False) -> np.ndarray:
    """``logit(target) - logit(foil)`` at the ``[MASK]`` position for each agreement example."""
    pad = _pad_id(model) if pad_token_id is None else pad_token_id
    dev = model_device(model)
    was = model.training
    model.eval()
    out = np.empty(len(examples), dtype=np.float64)
    with torch.no_grad():
        for b in _tqdm(_length_batches([len(e["input_ids"]) for e in examples], batch_size),
                       desc="agreement eval", disable=not progress, leave=False):
            ids, att = pad_sequences([examples[i]["input_ids"] for i in b], pad, dev)
            pos = torch.as_tensor([int(examples[i]["target_index"]) for i in b], device=dev)
            lg = logits_at(model, ids, att, pos)
            t = torch.as_tensor([int(examples[i]["target_id"]) for i in b], device=dev)
            f = torch.as_tensor([int(examples[i]["foil_id"]) for i in b], device=dev)
            r = torch.arange(len(b), device=dev)
            out[b] = (lg[r, t] - lg[r, f]).double().cpu().numpy()
    model.train(was)
    return out


def mlm_agreement_accuracy(model, examples: Sequence[dict], **kw) -> float:
    """Share of examples with p(target) > p(foil) at ``[MASK]`` (the VZ paper: 0.96 pre-trained BERT)."""
    return float((mlm_agreement_scores(model, examples, **kw) > 0).mean())


def load_mlm_model(name: str | None = None, *, steps: int = 400, batch_size: int = 128,
                   lr: float = 5e-3, seed: int = 42, mask_prob: float = 0.15, n_texts: int = 6000,
                   n_heldout: int = 1000, evaluate: bool = True, use_cache: bool = True,
                   progress: bool = True, **load_kw):
    """The "pre-trained" MLM of the VZ experiments. Returns ``(bundle, info)``.

    ``bundle.model`` is a ``*ForMaskedLM``. Three cases, recorded in ``info["kind"]``:

    * the checkpoint ships an MLM head (``bert-base-uncased`` where it loads): used unchanged
      (``"mlm-pretrained-head"``);
    * the offline fallback (the packaged all-MiniLM-L6-v2): the committed MLM adaptation of
      :mod:`cmixlib.mlm_adapted` is applied (checksums verified) (``"mlm-adapted"``);
      ``bundle.describe()`` and ``info["description"]`` say exactly what it is;
    * any other checkpoint without a head: a BERT head is trained on the frozen encoder with
      :func:`train_mlm_head` on :func:`default_mlm_texts` (``"mlm-head"``, with a warning: a
      head alone does not make a sentence encoder a language model).

    With ``evaluate``, ``info["metrics"]`` holds the masked-word top-1 accuracy on held-out
    passages (:func:`cmixlib.mlm_adapted.heldout_texts`, static masking of ``mask_prob``) and the
    BLiMP agreement accuracy on the test split, overall and per subset (all cached on disk).
    """
    from .models import load_model

    bundle = load_model(name, task="mlm", **load_kw)
    if bundle.head_is_pretrained:
        info = _base_info("mlm-pretrained-head", bundle.model, bundle.name, bundle.source,
                          bundle.is_fallback)
        info.update(data={}, settings={"head": "from the checkpoint"}, metrics={},
                    train_wall_s=None, from_cache=False,
                    cache_key=fingerprint_model(bundle.model)[:16],
                    description=f"{bundle.name} with its own MLM head")
    elif bundle.is_fallback or _is_packaged(bundle.source):
        from . import mlm_adapted

        mlm_adapted.apply_adapted_weights(bundle.model)
        bundle.model.eval()
        m = mlm_adapted.manifest()
        desc = mlm_adapted.description()
        bundle.name = mlm_adapted.SHORT_NAME
        bundle.variant = desc.removeprefix(mlm_adapted.SHORT_NAME).strip()
        info = _base_info("mlm-adapted", bundle.model, bundle.name, bundle.source,
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
    from .models import packaged_model_path

    pkg = packaged_model_path()
    return pkg is not None and Path(source).exists() and Path(source).resolve() == pkg


def mlm_metrics(bundle, key: str, *, mask_prob: float = 0.15, seed: int = 42,
                use_cache: bool = True, progress: bool = False) -> dict:
    """Masked-word top-1 accuracy on the held-out passages of ``data/mlm_heldout`` (per source)
    and BLiMP agreement accuracy (logit of the right word > logit of the foil at ``[MASK]``) on
    the test split, overall and per subset. Cached under ``key`` (the model's identity)."""
    from . import data
    from .mlm_adapted import HELDOUT_SOURCES, heldout_texts

    out: dict[str, Any] = {}
    for source in HELDOUT_SOURCES:
        texts = heldout_texts(source)
        mw = _cached_json("mlm-maskacc", stable_hash([key, fingerprint_texts(texts), mask_prob,
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

    agr = _cached_json("mlm-agreement-by-subset", stable_hash([key, fingerprint_examples(test)]),
                       agreement, use_cache)
    out.update(masked_word_accuracy_heldout=out["masked_word_accuracy_eltec"],
               agreement_accuracy_test=agr["accuracy"], n_agreement_test=agr["n"],
               agreement_by_subset=agr["by_subset"], n_agreement_by_subset=agr["n_by_subset"])
    return out


# ============================================================================================
# 2. "Fine-tuned" condition: prompt fine-tuning on agreement (Mohebbi et al. 2023)
# ============================================================================================
def prompt_loss(vocab_logits: torch.Tensor, target_ids: torch.Tensor, foil_ids: torch.Tensor) -> torch.Tensor:
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
    with a generator seeded by ``seed``. With ``test_examples``, ``info["accuracy"]`` is the share
    of test examples with logit(target) > logit(foil) (paper: 0.99 for BERT). Cached (full weights).
    """
    model = copy.deepcopy(mlm_model)
    pad = _pad_id(model) if pad_token_id is None else pad_token_id
    settings = dict(epochs=epochs, batch_size=batch_size, lr=lr, warmup=warmup, seed=seed,
                    weight_decay=weight_decay, optimizer="AdamW", schedule="linear",
                    loss="CE over [target, foil] logits at [MASK]")
    key = cache_key("mlm-prompt-ft", model=fingerprint_model(model),
                    data=fingerprint_examples(train_examples), pad=pad, **settings)
    path = cache_file("mlm-prompt-ft", key)
    cached = _load_cached(path) if use_cache else None
    if cached is not None:
        state, info = cached
        model.load_state_dict(state, strict=True)
        model.eval()
        info.update(from_cache=True, cache_file=str(path))
    else:
        info = _base_info("mlm-prompt-finetuned", model, model_name or
                          getattr(model.config, "_name_or_path", "") or type(model).__name__,
                          getattr(model.config, "_name_or_path", ""), False)
        t0 = time.perf_counter()
        set_seed(seed)
        dev = model_device(model)
        n = len(train_examples)
        steps_per_epoch = math.ceil(n / batch_size)
        total = steps_per_epoch * epochs
        for p in model.parameters():
            p.requires_grad_(True)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        sched = make_linear_scheduler(opt, total, warmup)
        g = torch.Generator().manual_seed(seed)
        model.train()
        losses, epoch_loss = [], []
        bar = _tqdm(total=total, desc="prompt fine-tuning", disable=not progress)
        for ep in range(epochs):
            perm = torch.randperm(n, generator=g).tolist()
            el = []
            for s in range(steps_per_epoch):
                b = perm[s * batch_size:(s + 1) * batch_size]
                ids, att = pad_sequences([train_examples[i]["input_ids"] for i in b], pad, dev)
                pos = torch.as_tensor([int(train_examples[i]["target_index"]) for i in b], device=dev)
                t = torch.as_tensor([int(train_examples[i]["target_id"]) for i in b], device=dev)
                f = torch.as_tensor([int(train_examples[i]["foil_id"]) for i in b], device=dev)
                loss = prompt_loss(logits_at(model, ids, att, pos), t, f)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                losses.append(loss.item())
                el.append(loss.item())
                bar.update(1)
                bar.set_postfix(epoch=ep + 1, loss=f"{np.mean(losses[-20:]):.3f}")
            epoch_loss.append(float(np.mean(el)))
        bar.close()
        model.eval()
        info.update(data={"n_train": n, "train_fingerprint": fingerprint_examples(train_examples)},
                    settings={**settings, "total_steps": total,
                              "warmup_steps": warmup_steps_for(total, warmup)},
                    metrics={"train_loss_per_epoch": [round(x, 4) for x in epoch_loss]},
                    train_wall_s=time.perf_counter() - t0, from_cache=False, cache_key=key,
                    cache_file=str(path))
        if use_cache:
            _save_cached(path, model.state_dict(), info)
    if test_examples is not None:
        acc = _cached_json("mlm-agreement", stable_hash([key, fingerprint_examples(test_examples)]),
                           lambda: {"accuracy": mlm_agreement_accuracy(model, test_examples, pad_token_id=pad,
                                                                        progress=progress),
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

    Starts from :func:`load_mlm_model` (or ``pretrained``, a ``(bundle, info)`` pair from it) and
    prompt-fine-tunes it on the BLiMP agreement *train* split; ``info["accuracy"]`` is the
    agreement accuracy on the *test* split. ``max_train_examples`` (seeded subset) shortens training.
    """
    from . import data

    bundle, pinfo = pretrained if pretrained is not None else load_mlm_model(
        name, use_cache=use_cache, progress=progress, evaluate=False, **mlm_kw)
    train = data.load_blimp_agreement(bundle.tokenizer, split="train", seed=42)
    test = data.load_blimp_agreement(bundle.tokenizer, split="test", seed=42)
    if max_train_examples is not None and max_train_examples < len(train):
        idx = np.random.default_rng(seed).permutation(len(train))[:max_train_examples]
        train = [train[i] for i in sorted(idx)]
    model, info = finetune_prompt(bundle.model, train, epochs=epochs, batch_size=batch_size, lr=lr,
                                  warmup=warmup, seed=seed, test_examples=test,
                                  pad_token_id=bundle.tokenizer.pad_token_id, model_name=bundle.name,
                                  use_cache=use_cache, progress=progress)
    info.update(model=bundle.name, source=bundle.source, is_fallback=bundle.is_fallback,
                base_mlm=pinfo.get("kind"))
    info["data"] = {"train": "BLiMP agreement train split (load_blimp_agreement, seed 42)", **info["data"]}
    from .models import ModelBundle

    ft = ModelBundle(model=model, tokenizer=bundle.tokenizer, requested=bundle.requested, source=bundle.source,
                     name=bundle.name, task="mlm", is_fallback=bundle.is_fallback,
                     head_is_pretrained=bundle.head_is_pretrained,
                     notes=list(bundle.notes) + ["Prompt-fine-tuned on BLiMP agreement (train split)."],
                     variant="; ".join(v for v in (bundle.variant, "prompt-fine-tuned on BLiMP "
                                                   "agreement (train split)") if v))
    return ft, info


# ============================================================================================
# 3. Sequence classifiers (GlobEnc)
# ============================================================================================
CLASSIFIER_TASKS = ("sst2", "mnli", "hatexplain")


def _label_ids(values, task: str) -> list[int]:
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
    from . import data

    task = task.lower().replace("-", "")
    if task == "sst2":
        tr, dv = data.load_sst2(split="train"), data.load_sst2(split="dev")
        xtr, xdv = list(tr["sentence"].astype(str)), list(dv["sentence"].astype(str))
        ytr, ydv = _label_ids(tr["label"], task), _label_ids(dv["label"], task)
        desc = "SST-2 (GLUE train / dev)"
    elif task == "mnli":
        df = data.load_mnli()
        order = np.random.default_rng(MNLI_SPLIT_SEED).permutation(len(df))
        dv, tr = df.iloc[order[:MNLI_DEV_SIZE]], df.iloc[order[MNLI_DEV_SIZE:]]
        xtr = list(zip(tr["premise"].astype(str), tr["hypothesis"].astype(str)))
        xdv = list(zip(dv["premise"].astype(str), dv["hypothesis"].astype(str)))
        ytr, ydv = _label_ids(tr["label"], task), _label_ids(dv["label"], task)
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
        ytr, ydv = _label_ids(tr["label"], task), _label_ids(dv["label"], task)
        desc = "HateXplain (official train / validation, majority label)"
    else:
        raise ValueError(f"Unknown task {task!r}; choose one of {CLASSIFIER_TASKS}.")
    pool = len(xtr)
    if max_train_examples is not None and max_train_examples < len(xtr):
        idx = sorted(np.random.default_rng(seed).permutation(len(xtr))[:max_train_examples].tolist())
        xtr, ytr = [xtr[i] for i in idx], [ytr[i] for i in idx]
    if max_dev_examples is not None:
        xdv, ydv = xdv[:max_dev_examples], ydv[:max_dev_examples]
    return {"train": (xtr, ytr), "dev": (xdv, ydv), "train_pool": pool, "description": desc}


def _tokenize(tok, inputs, max_length: int) -> list[list[int]]:
    if inputs and isinstance(inputs[0], (tuple, list)) and len(inputs[0]) == 2 and isinstance(inputs[0][0], str):
        enc = tok([a for a, _ in inputs], [b for _, b in inputs], truncation=True, max_length=max_length)
    else:
        enc = tok(list(inputs), truncation=True, max_length=max_length)
    out = [list(x) for x in enc["input_ids"]]
    if "token_type_ids" in enc:
        return [(ids, list(tt)) for ids, tt in zip(out, enc["token_type_ids"])]
    return [(ids, None) for ids in out]


def _cls_batch(encoded, idx, pad, dev):
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
    pad = _pad_id(model, tokenizer)
    was = model.training
    model.eval()
    correct = 0
    for b in _tqdm(_length_batches([len(e[0]) for e in enc], batch_size), desc="dev eval",
                   disable=not progress, leave=False):
        pred = model(**_cls_batch(enc, b, pad, dev)).logits.argmax(-1).cpu()
        correct += int((pred == torch.as_tensor([labels[i] for i in b])).sum())
    model.train(was)
    return correct / max(1, len(labels))


def keep_encoder_layers(model, keep: Sequence[int]) -> list[int]:
    """Keep only the encoder layers ``keep`` (0-based, strictly increasing), in place; returns them.

    This is how DistilBERT's student was initialised from BERT (Sanh et al. 2019: "taking one
    layer out of two"); e.g. ``keep=range(0, L, 2)``. The embeddings, the remaining layers' weights
    and any head are untouched; the config's layer count is updated. BERT, RoBERTa, ELECTRA and
    DistilBERT layouts (base model or with a head).
    """
    base = model.base_model
    if hasattr(base, "encoder") and hasattr(base.encoder, "layer"):
        holder, cfg_key = base.encoder, "num_hidden_layers"
    elif hasattr(base, "transformer") and hasattr(base.transformer, "layer"):
        holder, cfg_key = base.transformer, "n_layers"
    else:
        raise ValueError(f"Cannot find the encoder layers of {type(model).__name__}.")
    layers = list(holder.layer)
    keep = [int(k) for k in keep]
    if not keep or any(not 0 <= k < len(layers) for k in keep) or any(a >= b for a, b in zip(keep, keep[1:])):
        raise ValueError(f"keep_layers={keep} must be strictly increasing indices in 0..{len(layers) - 1}.")
    holder.layer = torch.nn.ModuleList([layers[k] for k in keep])
    setattr(model.config, cfg_key, len(keep))
    if hasattr(holder, "n_layers"):
        holder.n_layers = len(keep)
    return keep


def train_classifier(task_name: str, name: str | None = None, *, max_train_examples: int | None = 1500,
                     epochs: int = 2, batch_size: int = 32, lr: float = 3e-5, warmup: float = 0.0,
                     weight_decay: float = 0.0, max_length: int = 128, seed: int = 42,
                     max_dev_examples: int | None = None, use_cache: bool = True,
                     progress: bool = True, bundle=None, task_data: dict | None = None,
                     keep_layers: Sequence[int] | None = None, **load_kw):
    """Fine-tune a sequence classifier as in GlobEnc. Returns ``(bundle, info)``; ``info["accuracy"]`` = dev accuracy.

    GlobEnc: BERT-base, batch 32, lr 3e-5, 3-5 epochs (paper §4.1). Here: full fine-tuning of the
    encoder plus a fresh (seeded) classification head, AdamW without weight decay, linear decay
    with no warm-up (the HF ``Trainer`` defaults; GlobEnc ships no training code), dropout on,
    ``max_length`` tokens, and for CPU a seeded subset of ``max_train_examples`` training examples
    and ``epochs`` epochs (both recorded in ``info``). ``bundle`` (a ``ModelBundle`` from
    ``load_model(task="sequence-classification", num_labels=...)``, or any model with
    ``num_labels`` outputs plus tokenizer) replaces loading ``name``, and ``task_data`` (same format
    as :func:`classification_data`) replaces the task's data (both used by the tests).
    Cached: the full ``state_dict``; the key uses the *encoder's* fingerprint (the head is seeded).
    ``keep_layers`` (default None: all layers) first prunes the pre-trained encoder to those layers
    (:func:`keep_encoder_layers`, a DistilBERT-style student); it then enters the cache key (only
    when given, so the keys of full-depth classifiers do not change).
    """
    from .models import load_model

    task = task_name.lower().replace("-", "")
    if task not in CLASSIFIER_TASKS:
        raise ValueError(f"Unknown task {task_name!r}; choose one of {CLASSIFIER_TASKS}.")
    labels = LABELS[task]
    d = task_data or classification_data(task, max_train_examples=max_train_examples,
                                                          max_dev_examples=max_dev_examples, seed=seed)
    set_seed(seed)  # the fresh head's initialisation happens while loading
    if bundle is None:
        bundle = load_model(name, task="sequence-classification", num_labels=len(labels),
                            id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)},
                            **load_kw)
    model, tok, mname, source, is_fb = _bundle_parts(bundle)
    settings = dict(epochs=epochs, batch_size=batch_size, lr=lr, warmup=warmup, weight_decay=weight_decay,
                    max_length=max_length, seed=seed, max_train_examples=max_train_examples,
                    optimizer="AdamW", schedule="linear", encoder="fine-tuned (all parameters)")
    if keep_layers is not None:
        settings["keep_layers"] = keep_encoder_layers(model, keep_layers)
    xtr, ytr = d["train"]
    xdv, ydv = d["dev"]
    key = cache_key("classifier", task=task, model=fingerprint_model(model.base_model),
                    data=fingerprint_texts(list(zip(xtr, ytr))), **settings)
    path = cache_file(f"classifier-{task}", key)
    cached = _load_cached(path) if use_cache else None
    if cached is not None:
        state, info = cached
        model.load_state_dict(state, strict=True)
        info.update(from_cache=True, cache_file=str(path))
    else:
        info = _base_info(f"classifier-{task}", model, mname, source, is_fb)
        t0 = time.perf_counter()
        set_seed(seed)
        dev = model_device(model)
        pad = _pad_id(model, tok)
        enc = _tokenize(tok, xtr, max_length)
        n = len(enc)
        spe = math.ceil(n / batch_size)
        total = spe * epochs
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        sched = make_linear_scheduler(opt, total, warmup)
        g = torch.Generator().manual_seed(seed)
        y = torch.as_tensor(ytr, dtype=torch.long)
        model.train()
        losses = []
        bar = _tqdm(total=total, desc=f"fine-tuning {task}", disable=not progress)
        for ep in range(epochs):
            perm = torch.randperm(n, generator=g).tolist()
            for s in range(spe):
                b = perm[s * batch_size:(s + 1) * batch_size]
                out = model(**_cls_batch(enc, b, pad, dev))
                loss = torch.nn.functional.cross_entropy(out.logits, y[b].to(dev))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(epoch=ep + 1, loss=f"{np.mean(losses[-20:]):.3f}")
        bar.close()
        wall = time.perf_counter() - t0
        model.eval()
        acc = classifier_accuracy(model, tok, xdv, ydv, max_length=max_length, progress=progress)
        counts = np.bincount(ytr, minlength=len(labels)).tolist()
        info.update(data={"dataset": d["description"], "train_pool": d["train_pool"], "n_train": n,
                          "n_dev": len(ydv), "train_label_counts": dict(zip(labels, counts))},
                    settings={**settings, "total_steps": total},
                    metrics={"dev_accuracy": acc,
                             "dev_majority_baseline": float(np.bincount(ydv).max() / max(1, len(ydv))),
                             "final_train_loss": float(np.mean(losses[-20:])) if losses else None},
                    accuracy=acc, train_wall_s=wall, from_cache=False, cache_key=key, cache_file=str(path))
        if use_cache:
            _save_cached(path, model.state_dict(), info)
    model.eval()
    if hasattr(bundle, "head_is_pretrained"):
        bundle.head_is_pretrained = False
        if keep_layers is not None:
            bundle.notes.append(f"Only encoder layers {settings['keep_layers']} of the pre-trained model were kept "
                                "(DistilBERT-style student, no distillation).")
        bundle.notes.append(f"Fine-tuned on {task} by cmixlib.training (dev accuracy {info['accuracy']:.3f}).")
    return bundle, info


__all__ = [
    "CODE_VERSION", "pad_sequences", "cache_root", "model_cache_dir", "cache_key", "cache_file", "stable_hash",
    "fingerprint_texts", "fingerprint_examples", "fingerprint_model", "format_info",
    "linear_schedule_factor", "warmup_steps_for", "make_linear_scheduler", "set_seed",
    "mlm_head_logits", "mlm_head_param_names", "decoder_is_tied", "logits_at", "static_masking",
    "masked_word_accuracy", "train_mlm_head", "default_mlm_texts", "load_mlm_model", "mlm_metrics",
    "mlm_agreement_scores", "mlm_agreement_accuracy", "prompt_loss", "finetune_prompt",
    "load_finetuned_mlm", "classification_data", "classifier_accuracy", "train_classifier", "keep_encoder_layers",
    "CLASSIFIER_TASKS", "LABELS",
]
