"""What every trainer shares: the model cache (code version, fingerprints, keys, files), seeding,
padding, the ``info`` dict and its one-paragraph description.

A trained model is cached under ``<cache root>/models/<kind>-<key>.pt`` (``$CMIX_CACHE`` replaces
``.cmix_cache``). The key (:func:`cache_key`) hashes everything that determines the weights: the
base model (a fingerprint of its weights), a fingerprint of the training data, every setting, and
:data:`CODE_VERSION`, a hash of the source the weights depend on (:func:`code_version`), so that
any change to that code trains anew and no version is ever bumped by hand.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from cmixlib.models import arch
from cmixlib import cache as _cache
from cmixlib.cache import cache_root, jsonable, stable_hash
from cmixlib.models.devices import model_device

#: The parts of cmixlib whose source the trained weights depend on, hashed into
#: :data:`CODE_VERSION`: ``training`` (the loop, losses, masking, head initialisation),
#: ``batching`` (batches and padding), ``arch`` (which modules form the MLM head and the layer
#: stack: what is trained and pruned) and ``models`` (how the models are loaded: ``loading``,
#: ``hub`` and ``devices``, and the classifiers' seeded heads built; the head is not in the
#: base-model fingerprint). Left out on
#: purpose: the data loaders (the texts enter the key through their fingerprints),
#: ``mlm_adapted`` (its weights enter through the base model's fingerprint) and ``cache`` (only
#: the keys depend on it, and a changed key retrains anyway).
VERSION_SOURCES = ("training", "models/arch", "models/loading.py", "models/hub.py",
                   "models/devices.py", "forward/batching.py")


def code_version(sources: Sequence[str] = VERSION_SOURCES) -> str:
    """``"training-<hash>"``: :func:`cmixlib.cache.source_hash` of ``sources`` (sub-packages or
    modules of cmixlib)."""
    return "training-" + _cache.source_hash(*sources)


#: Version of the training code (:func:`code_version`, computed at import); part of every cache key.
CODE_VERSION = code_version()


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
        for k in ("_name_or_path", "transformers_version", "_attn_implementation_autoset",
                  "id2label", "label2id"):
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
    """Where the artefact ``kind`` with ``key`` is stored (``<model cache>/<kind>-<key>.pt``)."""
    return model_cache_dir() / f"{kind}-{key}.pt"


def save_cached(path: Path, state_dict: dict, info: dict) -> None:
    """Write ``state_dict`` and ``info`` to ``path`` atomically (plus ``info`` as a JSON file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save({"state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
                "info": jsonable(info)}, tmp)
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(json.dumps(jsonable(info), indent=2))


def load_cached(path: Path) -> tuple[dict, dict] | None:
    """``(state_dict, info)`` stored at ``path``, or None (missing or unreadable: retrain)."""
    if not path.exists():
        return None
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a corrupt file is retrained
        warnings.warn(f"cmixlib: ignoring unreadable cache file {path} ({exc}); retraining.")
        return None
    return blob["state_dict"], blob["info"]


def cached_json(kind: str, key: str, compute: Callable[[], dict], use_cache: bool = True) -> dict:
    """Small JSON cache for evaluations (``<cache root>/evals``); the file name hashes ``key``
    with :data:`CODE_VERSION`, so a change to the evaluation code recomputes."""
    path = cache_root() / "evals" / f"{kind}-{stable_hash([CODE_VERSION, key])}.json"
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
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


def progress_bar(iterable=None, **kw):
    """A ``tqdm.auto`` bar (``disable=True`` for none)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, **kw)


def pad_id(model, tokenizer=None) -> int:
    """The tokenizer's padding id, else the config's, else 0."""
    if tokenizer is not None and getattr(tokenizer, "pad_token_id", None) is not None:
        return int(tokenizer.pad_token_id)
    pid = getattr(model.config, "pad_token_id", None)
    return int(pid) if pid is not None else 0


def bundle_parts(bundle) -> tuple[Any, Any, str, str, bool]:
    """(model, tokenizer, name, source, is_fallback) from a ModelBundle or a (model, tokenizer) pair."""
    if isinstance(bundle, tuple):
        model, tok = bundle
        name = getattr(model.config, "_name_or_path", "") or type(model).__name__
        return model, tok, name, name, False
    return (bundle.model, bundle.tokenizer, getattr(bundle, "name", "?"),
            getattr(bundle, "source", "?"), bool(getattr(bundle, "is_fallback", False)))


def base_info(kind: str, model, name: str, source: str, is_fallback: bool) -> dict:
    """The ``info`` fields every trainer fills in first (model, size, code version, device)."""
    try:
        layers = arch.num_layers(model)
    except arch.UnsupportedModelError:
        layers = None
    return {"kind": kind, "model": name, "source": source, "is_fallback": is_fallback,
            "architecture": type(model).__name__, "layers": layers,
            "hidden": getattr(model.config, "hidden_size", None),
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
        parts.append(f"training wall time {info['train_wall_s']:.0f} s on "
                     f"{info.get('torch_threads')} thread(s)"
                     + (" (loaded from cache)" if info.get("from_cache") else ""))
    return "; ".join(parts) + "."
