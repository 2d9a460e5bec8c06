"""The public entry point :func:`context_mixing`: one call, any context-mixing method of the
registry (:data:`METHODS`, from :mod:`cmixlib.registry`), any supported encoder."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Callable

import numpy as np
import torch

from . import norms
from .registry import ALL_METHODS, MIXING_KINDS, Method
from .attention import attention_flow, normalize_rows, rollout
from .encoder import (LayerState, encoder_layers, iter_sentences, layer_states, max_positions,
                      run_and_capture)
from .value_zeroing import DISTANCES, value_zeroing_layer


class InputError(ValueError):
    """Bad input text or ids; the message says what to do.

    Examples
    --------
    >>> import cmixlib
    >>> cmixlib.context_mixing(cmixlib.random_model(), None, "")
    Traceback (most recent call last):
    ...
    cmixlib.core.InputError: Empty text '': context mixing needs at least one word.
    """


#: The context-mixing methods (from :mod:`cmixlib.registry`, which also holds the baselines).
METHODS: dict[str, Method] = {n: m for n, m in ALL_METHODS.items() if m.kind in MIXING_KINDS}

_LAYER_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "attention": norms.attention_mean,
    "attn_norm": norms.attn_norm,
    "attn_norm_res": norms.attn_norm_res,
    "attn_norm_res_ln": norms.attn_norm_res_ln,
    "globenc_layer": norms.globenc_layer,
    "w_fixedres": norms.w_fixedres,
    "n_fixedres": norms.n_fixedres,
    "w_res": norms.w_res,
    "alti_layer": norms.alti_layer,
}


def check_methods(methods: Sequence[str] | str | None) -> list[str]:
    """Validate method names (None = all); unknown names raise with the list of valid ones.

    Examples
    --------
    >>> from cmixlib import check_methods
    >>> check_methods("alti_layer")
    ['alti_layer']
    >>> len(check_methods(None)) == len(__import__("cmixlib").METHODS)
    True
    """
    if methods is None:
        return list(METHODS)
    if isinstance(methods, str):
        methods = [methods]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"Unknown method(s) {unknown}. Valid names: {', '.join(METHODS)}.")
    return list(methods)


def _unpack_model(model, tokenizer):
    if hasattr(model, "model") and hasattr(model, "tokenizer") and not isinstance(model, torch.nn.Module):
        return model.model, tokenizer or model.tokenizer
    return model, tokenizer


def encode(model, tokenizer, text) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Turn ``text`` (str, list of str, or a mapping with ``input_ids``) into padded ids and mask.

    Returns (input_ids (B, n), attention_mask (B, n), is_batch).
    """
    limit = max_positions(model)
    if isinstance(text, Mapping):
        if "input_ids" not in text:
            raise InputError("A mapping input must hold 'input_ids' (shape 1 x n or B x n).")
        ids = torch.as_tensor(text["input_ids"])
        if ids.ndim == 1:
            ids = ids[None]
        mask = torch.as_tensor(text["attention_mask"]) if text.get("attention_mask") is not None \
            else torch.ones_like(ids)
        if mask.ndim == 1:
            mask = mask[None]
        is_batch = ids.shape[0] > 1
    else:
        is_batch = not isinstance(text, str)
        texts = [text] if isinstance(text, str) else list(text)
        if not texts:
            raise InputError("No text given: pass a non-empty string or a list of strings.")
        for t in texts:
            if not isinstance(t, str) or not t.strip():
                raise InputError(f"Empty text {t!r}: context mixing needs at least one word.")
        if tokenizer is None:
            raise InputError("Pass the tokenizer (or a ModelBundle) to analyse raw text.")
        enc = tokenizer(texts, return_tensors="pt", padding=True, truncation=False)
        ids, mask = enc["input_ids"], enc["attention_mask"]
    if ids.numel() == 0 or ids.shape[1] == 0:
        raise InputError("Empty input_ids: nothing to analyse.")
    lengths = mask.sum(dim=1)
    if int(lengths.max()) > limit:
        raise InputError(f"Input has {int(lengths.max())} tokens but the model accepts at most {limit}: "
                         "shorten the text or split it into sentences.")
    return ids.long(), mask.long(), is_batch


def tokens(tokenizer, input_ids) -> list[str]:
    r"""Token strings of one sequence of ids (for plot labels): :math:`w_1, \dots, w_n`.

    Examples
    --------
    >>> import cmixlib
    >>> bundle = cmixlib.load_model()                    # doctest: +SKIP
    >>> ids = bundle.tokenizer("The keys are here.")["input_ids"]   # doctest: +SKIP
    >>> cmixlib.tokens(bundle.tokenizer, ids)            # doctest: +SKIP
    ['[CLS]', 'the', 'keys', 'are', 'here', '.', '[SEP]']
    """
    ids = torch.as_tensor(input_ids).flatten().tolist()
    return tokenizer.convert_ids_to_tokens(ids)


def _layer_maps(states: list[LayerState], name: str, options: dict) -> torch.Tensor:
    if name == "value_zeroing":
        return torch.stack([value_zeroing_layer(st, options["vz_distance"], options["vz_standardize"])
                            for st in states])
    fn = _LAYER_FUNCTIONS[name]
    return torch.stack([fn(st) for st in states])


def _place_rows(maps: np.ndarray, rows: np.ndarray | None, n: int) -> np.ndarray:
    if rows is None:
        return maps
    full = np.full((maps.shape[0], n, n), np.nan, dtype=maps.dtype)
    full[:, rows] = maps
    return full


def _check_rows(rows, n: int) -> np.ndarray | None:
    if rows is None:
        return None
    arr = np.atleast_1d(np.asarray(rows, dtype=np.int64))
    if arr.size == 0 or arr.min() < -n or arr.max() >= n:
        raise InputError(f"rows={list(arr)} out of range for a sequence of {n} tokens.")
    return np.unique(arr % n)


def _one_sentence(mods, capture, b, keep, methods, rows, options) -> dict[str, np.ndarray]:
    n = len(keep)
    rows = _check_rows(rows, n)
    row_t = None if rows is None else torch.as_tensor(rows, device=keep.device)
    full_states = layer_states(capture, mods, b, keep)
    row_states = full_states if row_t is None else layer_states(capture, mods, b, keep, rows=row_t)
    specs = [METHODS[m] for m in methods]
    need_full = {s.base for s in specs if s.kind == "aggregated"}
    raw: dict[str, np.ndarray] = {}          # un-normalised maps over the selected rows
    full: dict[str, np.ndarray] = {}         # un-normalised maps over all rows
    for name in need_full:
        full[name] = _layer_maps(full_states, name, options).cpu().numpy()
    for s in specs:
        if s.kind != "layer":
            continue
        if s.name in full:
            raw[s.name] = full[s.name] if rows is None else full[s.name][:, rows]
        else:
            raw[s.name] = _layer_maps(row_states, s.name, options).cpu().numpy()
    result: dict[str, np.ndarray] = {}
    for s in specs:
        if s.kind == "layer":
            maps = normalize_rows(raw[s.name]) if options["normalize"] else raw[s.name]
            result[s.name] = _place_rows(maps, rows, n)
        elif s.name == "attention_rollout":
            result[s.name] = rollout(full["attention"], add_identity=True)
        elif s.name == "attention_flow":
            flow = attention_flow(full["attention"], add_identity=True, rows=rows)
            result[s.name] = normalize_rows(np.nan_to_num(flow)) if rows is None else \
                _place_rows(normalize_rows(flow[:, rows]), rows, n)
        else:
            result[s.name] = rollout(full[s.base], add_identity=False, normalize=options["rollout_normalize"])
            if not options["rollout_normalize"]:
                result[s.name] = normalize_rows(result[s.name])
    return result


def context_mixing(model, tokenizer, text, methods: Sequence[str] | str | None = None, *,
                   normalize: bool = True, rows=None, vz_distance: str = "cosine", vz_standardize=None,
                   rollout_normalize: bool = True) -> dict[str, np.ndarray] | list[dict[str, np.ndarray]]:
    r"""Context-mixing maps of every requested method for one text (or a batch of texts).

    Each layer-wise method gives one map per layer, :math:`C^{\ell}_{ij}` = how much token
    :math:`j` (column) contributes to token :math:`i` (row) at layer :math:`\ell`; e.g.
    ``attention`` :math:`A^{\ell} = \frac{1}{H}\sum_h \alpha^{\ell,h}`, ``attn_norm``
    :math:`\lVert F_{ij}\rVert`, ``attn_norm_res_ln`` :math:`\lVert T_i(x_j)\rVert`, ``alti_layer``
    :math:`c_{ij} = \max(0, \lVert y_i\rVert_1 - \lVert y_i - T_i(x_j)\rVert_1)`, ``value_zeroing``
    the distance between :math:`o_i` and :math:`o^{\neg j}_i`. With ``normalize`` the rows sum to 1,

    .. math:: C^{\ell}_{ij} \leftarrow C^{\ell}_{ij} \Big/ \sum_k C^{\ell}_{ik},

    and aggregated methods return the rollout :math:`\hat{C}^{\ell} = \tilde{C}^{\ell}\,
    \hat{C}^{\ell-1}` (:func:`rollout`, :func:`attention_flow`).

    Parameters
    ----------
    model, tokenizer:
        A Hugging Face BERT / RoBERTa / ELECTRA / DistilBERT model (base or with a head) loaded with
        eager attention, and its tokenizer; or a :class:`~cmixlib.models.ModelBundle` and None.
    text:
        A string, a list of strings (padded batch; returns a list of dicts, one per text), or a
        mapping holding ``input_ids`` of shape (1, n) (optionally ``attention_mask``).
    methods:
        Names from :data:`METHODS` (None = all of them).
    normalize:
        Row-normalise layer-wise maps (rows sum to 1). Aggregated maps are always rollouts of
        row-normalised layer maps, without identity except ``attention_rollout``/``attention_flow``.
    rows:
        Only these query rows (e.g. the [MASK] position). Layer-wise maps get NaN in the other rows;
        aggregated maps still need (and compute) every row of their layer maps. For a batch, a
        list of one entry per sentence (``[[3], [5], None]``) gives each sentence its own rows.
    vz_distance, vz_standardize:
        Value Zeroing distance (``"cosine"``, ``"euclidean"``, ``"spearman"``) and optional
        standardisation of representations (True, or a (mean, std) pair; Appendix A.1).
    rollout_normalize:
        False multiplies the raw (un-normalised) layer maps in GlobEnc/ALTI/VZ rollouts, as
        GlobEnc's original code does; the final rows are then normalised.

    Returns
    -------
    dict name -> float array (num_layers, n, n); row i = receiving token, column j = contributor.

    Examples
    --------
    >>> import torch, cmixlib
    >>> model = cmixlib.random_model("bert", layers=2)   # tiny and random: runs in a second
    >>> ids = {"input_ids": torch.tensor([[1, 5, 6, 7, 2]])}
    >>> maps = cmixlib.context_mixing(model, None, ids, ["alti_layer", "value_zeroing", "alti"])
    >>> maps["alti_layer"].shape                         # (layers, n, n)
    (2, 5, 5)
    >>> bool(abs(maps["alti"].sum(axis=-1) - 1).max() < 1e-5)   # rows sum to 1
    True

    With a pretrained model and text (``load_model`` falls back to the packaged model offline):

    >>> bundle = cmixlib.load_model()                    # doctest: +SKIP
    >>> maps = cmixlib.context_mixing(bundle, None, "The keys to the cabinet are here.")  # doctest: +SKIP
    """
    model, tokenizer = _unpack_model(model, tokenizer)
    methods = check_methods(methods)
    if vz_distance not in DISTANCES:
        raise ValueError(f"Unknown Value Zeroing distance {vz_distance!r}; choose one of {DISTANCES}.")
    mods = encoder_layers(model)
    ids, mask, is_batch = encode(model, tokenizer, text)
    capture = run_and_capture(model, ids, mask)
    options = dict(normalize=normalize, vz_distance=vz_distance, vz_standardize=vz_standardize,
                   rollout_normalize=rollout_normalize)
    sentences = iter_sentences(capture)
    per_rows = _per_sentence_rows(rows, len(sentences)) if is_batch else [rows]
    with torch.no_grad():
        results = [_one_sentence(mods, capture, b, keep, methods, r, options)
                   for (b, keep), r in zip(enumerate(sentences), per_rows)]
    return results if is_batch else results[0]


def _per_sentence_rows(rows, batch: int) -> list:
    """``rows`` for a batch: the same rows for every sentence, or one entry per sentence when
    ``rows`` is a list of ``batch`` lists / arrays / None (e.g. ``[[3], [5], None]``)."""
    nested = isinstance(rows, (list, tuple)) and len(rows) > 0 and all(
        r is None or isinstance(r, (list, tuple, np.ndarray, torch.Tensor)) for r in rows)
    if not nested:
        return [rows] * batch
    if len(rows) != batch:
        raise InputError(f"rows has {len(rows)} per-sentence entries for a batch of {batch} sentences.")
    return list(rows)


def context_mixing_ratio(model, tokenizer, text, kind: str = "attn_norm_res_ln") -> np.ndarray | list[np.ndarray]:
    r"""Context-mixing ratio per layer and token, (num_layers, n) (Kobayashi et al. 2021):
    r_i = ||sum_{j!=i} v_ij|| / (||sum_{j!=i} v_ij|| + ||v_ii||), v the vectors of ``kind``
    (``attn_norm_res``, ``attn_norm_res_ln`` (default) or ``globenc_layer``).

    .. math::

       r_i = \frac{\lVert \sum_{j \ne i} v_{ij} \rVert}
                  {\lVert \sum_{j \ne i} v_{ij} \rVert + \lVert v_{ii} \rVert},
       \qquad v_{ij} = z_{ij},\ T_i(x_j) \text{ or } T'_i(x_j).

    Examples
    --------
    >>> import torch, cmixlib
    >>> model = cmixlib.random_model("bert", layers=2)
    >>> r = cmixlib.context_mixing_ratio(model, None, {"input_ids": torch.tensor([[1, 5, 6, 2]])})
    >>> r.shape                                          # (layers, n)
    (2, 4)
    >>> bool(((r >= 0) & (r <= 1)).all())
    True
    """
    model, tokenizer = _unpack_model(model, tokenizer)
    mods = encoder_layers(model)
    ids, mask, is_batch = encode(model, tokenizer, text)
    capture = run_and_capture(model, ids, mask)
    out = []
    with torch.no_grad():
        for b, keep in enumerate(iter_sentences(capture)):
            states = layer_states(capture, mods, b, keep)
            out.append(torch.stack([norms.mixing_ratio(st, kind) for st in states]).cpu().numpy())
    return out if is_batch else out[0]
