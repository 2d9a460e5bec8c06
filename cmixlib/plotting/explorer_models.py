r"""One model's block of the static explorer (:mod:`cmixlib.plotting.explorer`).

For each sentence, :func:`model_block` stores, as integers (value x 10^3, see
:func:`~cmixlib.plotting.explorer_packing.pack_maps`):

* every context-mixing method the model supports (:data:`cmixlib.METHODS` for encoders,
  :data:`cmixlib.methods.decoder.DECODER_METHOD_NAMES` for decoders, less ``alti_logit``,
  which is in logit units and explains one chosen target), at every layer:
  :math:`C^{\ell}_{ij}`, rows normalised (:func:`cmixlib.context_mixing`);
* the rollout of each layer-wise method that the registry gives no aggregated counterpart
  (:func:`rollout_names`): :math:`\hat C^{\ell} = \mathrm{rownorm}(C^{\ell})\,\hat C^{\ell-1}`
  (:func:`cmixlib.rollout` without identity, the experiments' ``"rollout:X"``);
* the attention of every head, :math:`\alpha^{\ell,h}_{ij}` (the model's own
  ``output_attentions``; their mean over heads is ``attention``);
* optionally (:func:`baseline_rows`) the gradient and erasure baselines, one score per token for
  one explained position: :math:`s_j / \max_k |s_k|`, with the scale :math:`\max_k |s_k|`.

A decoder's block carries a note on its first column (:func:`decoder_note`), computed from its
attention maps.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from cmixlib.experiments.common import predicted_classes
from cmixlib.experiments.saliency import example_rows, text_example
from cmixlib.forward.decoder_inputs import decoder_text_ids
from cmixlib.methods.aggregation import rollout
from cmixlib.methods.decoder import DECODER_METHOD_NAMES
from cmixlib.methods.dispatch import METHODS, context_mixing, tokens
from cmixlib.methods.registry import ALL_METHODS, ROLLOUT_PREFIX, resolve
from cmixlib.models.arch import is_decoder_lm
from cmixlib.models.classifiers import load_classifier
from cmixlib.plotting.explorer_packing import DECIMALS, pack_maps, pack_row
from cmixlib.training.mlm import load_mlm_model

__all__ = ["BASELINE_METHODS", "BASELINE_SETTINGS", "mixing_methods", "rollout_names",
           "model_text", "head_attentions", "baseline_rows",
           "decoder_note", "model_block"]

#: The baselines shown, by the names :func:`cmixlib.experiments.saliency.example_rows` takes.
BASELINE_METHODS = ("grad_l2", "grad_x_input", "grad_x_input_abs", "integrated_gradients",
                    "deeplift", "blank_out")
#: Their settings (:func:`cmixlib.experiments.saliency.example_rows`): the library's defaults but 32
#: integrated-gradient steps (the book's ALTI Figure 7 run).
BASELINE_SETTINGS = {"ig_steps": 32}
_MASK = "[MASK]"


def _is_decoder(bundle) -> bool:
    return bool(is_decoder_lm(bundle.model))


def mixing_methods(bundle) -> list[str]:
    """The context-mixing methods of ``bundle``'s model family (see the module docstring)."""
    if _is_decoder(bundle):
        return [m for m in DECODER_METHOD_NAMES if m in METHODS]
    return list(METHODS)


def rollout_names(methods: list[str]) -> list[str]:
    """``"rollout:X"`` for each layer-wise X of ``methods`` that no aggregated method of
    ``methods`` rolls out (its registry ``base``)."""
    rolled = {ALL_METHODS[m].base for m in methods if ALL_METHODS[m].kind == "aggregated"}
    return [ROLLOUT_PREFIX + m for m in methods
            if ALL_METHODS[m].kind == "layer" and m not in rolled]


def model_text(bundle, text: str) -> tuple[str, str | None]:
    """``text`` for ``bundle``: ``[MASK]`` becomes the tokenizer's mask token; a tokenizer
    without one (a decoder) gets the text up to the mask, where it would predict the masked
    word. Returns the text and a note saying so (None when nothing was cut)."""
    mask = getattr(bundle.tokenizer, "mask_token", None)
    if _MASK not in text:
        return text, None
    if mask:
        return text.replace(_MASK, mask), None
    cut = text.split(_MASK)[0].rstrip()
    return cut, "cut before the masked word (a decoder reads left to right)"


def head_attentions(bundle, ids: list[int]) -> np.ndarray:
    r"""Attention of every head, :math:`\alpha^{\ell,h}_{ij}`, shape (L, H, n, n), from the
    model's own ``output_attentions`` (eager attention, one unpadded sentence)."""
    with torch.no_grad():
        out = bundle.model(input_ids=torch.tensor([ids]), output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).double().cpu().numpy()


def baseline_rows(sentence: dict[str, Any], ids: list[int], mlm, clf,
                  decimals: int) -> dict[str, Any] | None:
    """The gradient and erasure rows of one sentence, or None: with the MLM ``mlm`` at the mask
    for a sentence with ``target_word``/``foil_word`` (:math:`\\sigma(z_t - z_f)`), with the
    classifier ``clf`` at ``[CLS]`` for the class it predicts for an ``sst2`` sentence. Only when
    that model tokenizes the sentence into ``ids`` (the map's tokens)."""
    text = sentence["text"]
    if sentence.get("target_word") and mlm is not None:
        ex = text_example(mlm.tokenizer, text, target_word=sentence["target_word"],
                          foil_word=sentence["foil_word"])
        bundle = mlm
        explains = (f"p({ex['target_word']} | {ex['target_word']}, {ex['foil_word']}) at the "
                    f"mask, blank-out replacing a token by [UNK]")
    elif sentence.get("task") == "sst2" and clf is not None:
        ex = text_example(clf.tokenizer, text)
        bundle = clf
        label = clf.model.config.id2label[int(predicted_classes(clf, [ex])[0])]
        explains = f"p({label}), the predicted class, at the first token"
    else:
        return None
    if list(ex["input_ids"]) != list(ids):
        return None
    rows = example_rows(bundle, ex, list(BASELINE_METHODS), BASELINE_SETTINGS)
    packed, scale = {}, {}
    for name, row in rows.items():
        packed[resolve(name)], scale[resolve(name)] = pack_row(row, decimals)
    return {"model": bundle.describe(), "target": int(ex["target_index"]), "explains": explains,
            "rows": packed, "scale": scale}


def decoder_note(block: dict[str, Any], bos: bool) -> str:
    """What the first column of a decoder's maps is, with the attention it gets in ``block``
    (rule: the mean over sentences, layers and rows i >= 2 of the head-averaged attention
    A_i1, beside the mean of 1/i, what uniform attention over the visible tokens gives)."""
    scale = 10 ** block["decimals"]
    got, uniform = [], []
    for s in block["sentences"]:
        a = np.asarray(s["maps"]["attention"], dtype=np.float64) / scale      # (L, n, n)
        n = a.shape[-1]
        if n < 2:
            continue
        got.append(a[:, 1:, 0].mean())
        uniform.append((1.0 / np.arange(2, n + 1)).mean())
    first = ("the beginning-of-sequence token" if bos else
             "the first token (this tokenizer adds no beginning-of-sequence token)")
    text = (f"{block['model']} is a decoder: token i sees tokens 1..i only, so its maps are "
            f"lower-triangular (0 above the diagonal). The first column is {first}, which every "
            f"later token sees: decoders often park attention there when no other token is "
            f"useful (an 'attention sink'), so that column can be dark for reasons unrelated "
            f"to the words.")
    if got:
        text += (f" Here it receives {np.mean(got):.0%} of the head-averaged attention of "
                 f"tokens 2..n (mean over layers and the {len(got)} sentences shown); attention "
                 f"spread evenly over the visible tokens would give it {np.mean(uniform):.0%}.")
    if any(t.startswith("\u0120") for s in block["sentences"] for t in s["tokens"]):
        text += (" A token written with a leading \u0120 starts with a space (this byte-level "
                 "vocabulary's marker).")
    return text


def model_block(bundle, sentences: list[dict[str, Any]], *, baselines: bool = True,
                progress: bool = True, decimals: int | None = None,
                baseline_models: tuple | None = None) -> dict[str, Any]:
    """One model's explorer data: ``{"model", "family", "layers", "heads", "methods",
    "decimals", "note", "sentences": [{"text", "source", "tokens", "maps", "heads",
    "baselines"?, "pair"?, "grammatical"?, "cut"?}], "baseline_methods"?}`` (see the module
    docstring); ``baselines`` loads the offline MLM and the SST-2 classifier for an encoder
    (or takes ``baseline_models`` = (mlm bundle, classifier bundle), either None) and keeps
    their rows where they tokenize as ``bundle`` does."""
    decimals = DECIMALS if decimals is None else decimals
    decoder = _is_decoder(bundle)
    mix = mixing_methods(bundle)
    rolls = rollout_names(mix)
    mlm = clf = None
    if baselines and not decoder and baseline_models is not None:
        mlm, clf = baseline_models
    elif baselines and not decoder:
        mlm = load_mlm_model(progress=False)[0]
        clf = load_classifier("sst2")
    cfg = bundle.model.config
    out = []
    for s in tqdm(sentences, desc=f"explorer: {bundle.describe()}", disable=not progress):
        text, cut = model_text(bundle, s["text"])
        ids = decoder_text_ids(bundle.tokenizer, text) if decoder else \
            list(bundle.tokenizer(text)["input_ids"])     # the ids context_mixing runs on
        with torch.no_grad():
            maps = context_mixing(bundle, None, text, methods=mix)
        for r in rolls:
            maps[r] = rollout(maps[r.split(":", 1)[1]], add_identity=False, normalize=True)
        entry = {"text": text, "source": s.get("source", ""), "tokens": tokens(bundle.tokenizer, ids),
                 "maps": pack_maps(maps, decimals),
                 "heads": pack_maps({"h": head_attentions(bundle, ids)}, decimals)["h"]}
        for k in ("pair", "grammatical"):
            if k in s:
                entry[k] = s[k]
        if cut:
            entry["cut"] = cut
        if mlm is not None or clf is not None:
            b = baseline_rows(dict(s, text=text), ids, mlm, clf, decimals)
            if b is not None:
                entry["baselines"] = b
        out.append(entry)
    block = {"model": bundle.describe(), "family": "decoder" if decoder else "encoder",
             "layers": int(cfg.num_hidden_layers), "heads": int(cfg.num_attention_heads),
             "decimals": decimals, "methods": mix + rolls, "sentences": out, "note": None}
    names = [resolve(m) for m in BASELINE_METHODS]
    block["baselines"] = any("baselines" in s for s in out)
    block["baseline_methods"] = names if block["baselines"] else []
    if decoder:
        bos = getattr(bundle.tokenizer, "bos_token_id", None)
        block["note"] = decoder_note(block, bool(out) and bos is not None and
                                     all(tokens(bundle.tokenizer, [bos])[0] == e["tokens"][0]
                                         for e in out))
    return block
