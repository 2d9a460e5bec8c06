r"""The papers' example sentences on further models: an MPNet encoder and a decoder LM.

Chapter 14 recomputes the papers' qualitative figures on the book's own models. This module
shows the same example sentences on the further offline models of :func:`cmixlib.load_model`
(:data:`FURTHER_MODELS`): for one explained position :math:`t` of each sentence, the row
:math:`C^{\ell}_{t,:}` of every method at every layer (:func:`example_layer_rows`), and a
sentence that says, by a written rule, which token each method ranks first
(:func:`top_tokens`, :func:`describe_top_tokens`).

* The explained position: an encoder's mask (the masked word, as Value Zeroing's Figure 4 and
  ALTI's SVA tables), else its first token (``[CLS]``/``<s>``, as ALTI's SST-2 tables); a
  decoder has no mask, so a masked text is cut before the mask
  (:func:`cmixlib.plotting.explorer_models.model_text`) and the explained position is the last
  token, the one whose output predicts the masked word; an unmasked text's last token likewise.
* The methods: the layer-wise methods of Value Zeroing's Figures A.5-A.18 and their rollouts
  (:data:`FIGURE_PAIRS`), those the model supports (a decoder has no N-ResLN or GlobEnc,
  :data:`cmixlib.methods.decoder.UNSUPPORTED`); a ``"rollout:X"`` is
  :math:`\hat C^{\ell} = \mathrm{rownorm}(C^{\ell})\,\hat C^{\ell-1}` (:func:`cmixlib.rollout`
  without identity).

Results are cached on disk (:func:`cmixlib.cache.cache_root`), keyed by the model, the text, the
methods and the library's code version, so a stale result is never reused.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cmixlib.cache import PACKAGE_DIR, cache_root, code_text, stable_hash
from cmixlib.experiments import code_version
from cmixlib.forward.decoder_inputs import decoder_text_ids
from cmixlib.methods.aggregation import rollout
from cmixlib.methods.dispatch import context_mixing, tokens
from cmixlib.methods.registry import method_label
from cmixlib.models.arch import is_decoder_lm
from cmixlib.plotting.explorer_models import mixing_methods, model_text

__all__ = ["FURTHER_MODELS", "FIGURE_PAIRS", "figure_methods", "explained_position",
           "example_layer_rows", "top_tokens", "describe_top_tokens"]

#: The further models, by :func:`cmixlib.load_model` name.
FURTHER_MODELS = ("all-mpnet-base-v2", "smollm2")
#: Value Zeroing's Figures A.5-A.18: each layer-wise method and its rollout.
FIGURE_PAIRS = (("attention", "attention_rollout"), ("attn_norm", "rollout:attn_norm"),
                ("attn_norm_res", "rollout:attn_norm_res"),
                ("attn_norm_res_ln", "rollout:attn_norm_res_ln"), ("globenc_layer", "globenc"),
                ("alti_layer", "alti"), ("value_zeroing", "value_zeroing_rollout"))


def figure_methods(bundle) -> list[str]:
    """The methods of :data:`FIGURE_PAIRS` that ``bundle``'s model supports, pair by pair (a
    pair is kept when its layer-wise method is supported)."""
    ok = set(mixing_methods(bundle))
    return [m for a, b in FIGURE_PAIRS if a in ok for m in (a, b)]


def explained_position(bundle, ids: Sequence[int]) -> int:
    """The explained token of a sentence (module docstring): the mask, else the first token
    for an encoder; the last token for a decoder."""
    if is_decoder_lm(bundle.model):
        return len(ids) - 1
    mask = getattr(bundle.tokenizer, "mask_token_id", None)
    return list(ids).index(mask) if mask is not None and mask in ids else 0


def _key(bundle, text: str, methods: list[str]) -> str:
    return stable_hash({"what": "model-examples", "model": bundle.describe(), "text": text,
                        "methods": methods, "code_version": code_version(),
                        "code": [code_text(Path(__file__)),     # plotting is not in the
                                 code_text(PACKAGE_DIR / "plotting"  # code version
                                           / "explorer_models.py")]})


def example_layer_rows(bundle, text: str, *, use_cache: bool = True) -> dict[str, Any]:
    r"""The explained row of every figure method at every layer for ``text`` (``[MASK]`` for
    the masked word): ``{"model", "family", "text", "cut", "tokens", "position", "rows":
    {method: (L, n) array}}``, ``rows[m][l] =`` :math:`C^{\ell+1}_{t,:}` (rows normalised; for
    a rollout, the rollout up to layer :math:`\ell+1`). Cached (module docstring)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string (with [MASK] for a masked word).")
    methods = figure_methods(bundle)
    path = cache_root() / "model_examples" / f"{_key(bundle, text, methods)}.json"
    if use_cache and path.exists():
        out = json.loads(path.read_text())
        out["rows"] = {m: np.asarray(v) for m, v in out["rows"].items()}
        return out
    shown, cut = model_text(bundle, text)
    ids = decoder_text_ids(bundle.tokenizer, shown) if is_decoder_lm(bundle.model) else \
        list(bundle.tokenizer(shown)["input_ids"])        # the ids context_mixing runs on
    t = explained_position(bundle, ids)
    plain = [m for m in methods if ":" not in m]
    with torch.no_grad():
        maps = context_mixing(bundle, None, shown, methods=plain, final_rows=[t])
    rows = {}
    for m in methods:
        full = (rollout(maps[m.split(":", 1)[1]], add_identity=False, normalize=True, rows=[t])
                if m.startswith("rollout:") else maps[m])
        rows[m] = np.asarray(full[:, t, :], dtype=np.float64)
    out = {"model": bundle.describe(), "family": "decoder" if is_decoder_lm(bundle.model) else "encoder",
           "text": shown, "cut": cut, "tokens": tokens(bundle.tokenizer, ids), "position": t,
           "rows": rows}
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**out, "rows": {m: r.tolist() for m, r in rows.items()}}))
    return out


def top_tokens(result: dict[str, Any], layer: int = -1) -> dict[str, str]:
    """For each method, the token with the largest score in the explained row at ``layer``
    (default the last), the explained token itself left out (it always keeps much of its own
    representation); ties go to the earlier token."""
    t, toks = result["position"], result["tokens"]
    keep = [j for j in range(len(toks)) if j != t]
    if not keep:
        raise ValueError("the sentence has only the explained token: nothing to rank.")
    out = {}
    for m, rows in result["rows"].items():
        r = np.asarray(rows)[layer, keep]
        out[m] = toks[keep[int(np.argmax(r))]]
    return out


def describe_top_tokens(result: dict[str, Any], layer: int = -1) -> str:
    """One sentence from :func:`top_tokens`: each token ranked first, with the methods (labels
    from the registry) that rank it first, tokens ordered by how many methods pick them."""
    top = top_tokens(result, layer)
    by: dict[str, list[str]] = {}
    for m, tok in top.items():
        by.setdefault(tok, []).append(method_label(m))
    order = sorted(by, key=lambda k: (-len(by[k]), list(top.values()).index(k)))
    n_layers = len(next(iter(result["rows"].values())))
    which = n_layers if layer == -1 else (layer % n_layers) + 1
    parts = [f"{tok!r} by {len(by[tok])} of {len(top)} ({', '.join(by[tok])})" for tok in order]
    return (f"{result['model']}, layer {which}, row of {result['tokens'][result['position']]!r} "
            f"(itself left out): the first-ranked token is " + "; ".join(parts) + ".")
