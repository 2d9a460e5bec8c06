"""The maps of one encoder sentence: every requested method of :data:`LAYER_FUNCTIONS` (one map
per layer, from :mod:`cmixlib.methods.norms` and :mod:`cmixlib.methods.value_zeroing`) and the
aggregated methods of the registry (rollouts and attention flow, :mod:`cmixlib.methods.aggregation`),
over all rows or selected ones. :func:`cmixlib.context_mixing` (:mod:`cmixlib.methods.dispatch`)
calls :func:`sentence_maps` once per sentence of a post-LN encoder; a pre-LN decoder goes to
:mod:`cmixlib.methods.decoder` instead.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from cmixlib.forward.encoder import LayerState, layer_states
from cmixlib.methods import aggregation, norms
from cmixlib.methods.aggregation import normalize_rows
from cmixlib.methods.registry import ALL_METHODS
from cmixlib.methods.value_zeroing import value_zeroing_heads, value_zeroing_layer

__all__ = ["LAYER_FUNCTIONS", "layer_maps", "place_rows", "final_rows_maps", "sentence_maps",
           "HEAD_FUNCTIONS", "head_layer_maps", "sentence_head_maps"]

#: The layer-wise methods of an encoder other than Value Zeroing: name -> function of a
#: :class:`~cmixlib.forward.encoder.LayerState` giving its un-normalised (r, n) map.
LAYER_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
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


def layer_maps(states: list[LayerState], name: str, options: dict) -> torch.Tensor:
    """Un-normalised maps of layer-wise method ``name`` for ``states``, stacked (L, r, n);
    ``options`` holds Value Zeroing's ``vz_distance``, ``vz_standardize`` and ``vz_method``
    (from :func:`cmixlib.methods.options.resolve_methods`)."""
    if name == "value_zeroing":
        return torch.stack([value_zeroing_layer(st, options["vz_distance"], options["vz_standardize"],
                                                method=options["vz_method"])
                            for st in states])
    fn = LAYER_FUNCTIONS[name]
    return torch.stack([fn(st) for st in states])


def place_rows(maps: np.ndarray, rows: np.ndarray | None, n: int) -> np.ndarray:
    """(..., r, n) maps of rows ``rows`` placed in (..., n, n) maps (e.g. (L, r, n) in
    (L, n, n), or per head (L, H, r, n) in (L, H, n, n)), NaN in the other rows (``rows``
    None: the maps as given)."""
    if rows is None:
        return maps
    full = np.full(maps.shape[:-2] + (n, n), np.nan, dtype=maps.dtype)
    full[..., rows, :] = maps
    return full


def final_rows_maps(full_states, last_state, name: str, options: dict,
                    final: np.ndarray) -> np.ndarray:
    """Maps of every layer but the last over all rows, of the last over rows ``final`` (NaN in
    its other rows) from ``last_state``, the last layer's state restricted to those rows."""
    n = full_states[0].x.shape[0]
    last = layer_maps([last_state], name, options).cpu().numpy()
    out = np.full((len(full_states), n, n), np.nan, dtype=last.dtype)
    if len(full_states) > 1:
        out[:-1] = layer_maps(full_states[:-1], name, options).cpu().numpy()
    out[-1, final] = last[0]
    return out


def sentence_maps(mods, capture, b, keep, methods, rows, options,
                  final=None) -> dict[str, np.ndarray]:
    """Maps of every method of ``methods`` for sentence ``b`` of ``capture`` (cropped to
    positions ``keep``; ``mods`` the encoder's layers): layer-wise maps at rows ``rows`` (None:
    all; NaN elsewhere), row-normalised with ``options["normalize"]``, and the aggregated maps;
    ``final``: the last layer's rows (``final_rows`` of :func:`cmixlib.context_mixing`)."""
    n = len(keep)
    row_t = None if rows is None else torch.as_tensor(rows, device=keep.device)
    full_states = layer_states(capture, mods, b, keep)
    row_states = full_states if row_t is None else layer_states(capture, mods, b, keep, rows=row_t)
    specs = [ALL_METHODS[m] for m in methods]
    need_full = {s.base for s in specs if s.kind == "aggregated"}
    last_state = None
    if final is not None:                    # the last layer, at rows final only (one state:
        if rows is None:                     # its shared work is done once for every method)
            need_full |= {s.name for s in specs if s.kind == "layer"}
        last_state = layer_states(capture, mods, b, keep,
                                  rows=torch.as_tensor(final, device=keep.device))[-1]
    raw: dict[str, np.ndarray] = {}          # un-normalised maps over the selected rows
    full: dict[str, np.ndarray] = {}         # un-normalised maps over all rows
    for name in need_full:
        # attention is captured whole (and attention flow needs every row)
        full[name] = (layer_maps(full_states, name, options).cpu().numpy()
                      if last_state is None or name == "attention" else
                      final_rows_maps(full_states, last_state, name, options, final))
    for s in specs:
        if s.kind != "layer":
            continue
        if s.name in full:
            raw[s.name] = full[s.name] if rows is None else full[s.name][:, rows]
        else:
            raw[s.name] = layer_maps(row_states, s.name, options).cpu().numpy()
    result: dict[str, np.ndarray] = {}
    for s in specs:
        if s.kind == "layer":
            maps = normalize_rows(raw[s.name]) if options["normalize"] else raw[s.name]
            result[s.name] = place_rows(maps, rows, n)
            if final is not None and s.name == "attention":   # computed whole, read at final
                result[s.name] = result[s.name].copy()
                result[s.name][-1, np.setdiff1d(np.arange(n), final)] = np.nan
        elif s.name == "attention_rollout":
            result[s.name] = aggregation.rollout(full["attention"], add_identity=True, rows=final)
        elif s.name == "attention_flow":
            flow = aggregation.attention_flow(full["attention"], add_identity=True, rows=rows)
            result[s.name] = normalize_rows(np.nan_to_num(flow)) if rows is None else \
                place_rows(normalize_rows(flow[:, rows]), rows, n)
        else:
            norm = options["rollout_normalize"].get(s.name, True)
            result[s.name] = aggregation.rollout(full[s.base], add_identity=False,
                                                 normalize=norm, rows=final)
            if not norm:
                result[s.name] = normalize_rows(result[s.name])
    return result


#: The per-head layer maps of an encoder (``context_mixing(..., heads=True)``): name ->
#: function of a :class:`~cmixlib.forward.encoder.LayerState` and the options giving the
#: un-normalised (H, r, n) maps (definitions in :mod:`cmixlib.methods.layer_math`,
#: :mod:`cmixlib.methods.norms`, :func:`cmixlib.methods.value_zeroing.value_zeroing_heads`).
HEAD_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "attention": lambda st, options: norms.attention_heads(st),
    "attn_norm": lambda st, options: norms.attn_norm_heads(st),
    "alti_layer": lambda st, options: norms.alti_heads(st),
    "value_zeroing": lambda st, options: value_zeroing_heads(st, options["vz_distance"],
                                                             options["vz_standardize"]),
}


def head_layer_maps(states: list[LayerState], name: str, options: dict) -> np.ndarray:
    """Un-normalised per-head maps of method ``name`` (:data:`HEAD_FUNCTIONS`) for ``states``,
    (L, H, r, n)."""
    return torch.stack([HEAD_FUNCTIONS[name](st, options) for st in states]).cpu().numpy()


def sentence_head_maps(mods, capture, b, keep, methods, rows, options,
                       final=None) -> dict[str, np.ndarray]:
    """Per-head maps (L, H, n, n) of every method of ``methods`` (names of
    :data:`HEAD_FUNCTIONS`) for sentence ``b`` of ``capture``, as :func:`sentence_maps` gives
    per-layer maps: rows ``rows`` (None: all; NaN elsewhere), each head's rows normalised with
    ``options["normalize"]``; ``final``: the last layer's rows (NaN in its other rows)."""
    n = len(keep)
    row_t = None if rows is None else torch.as_tensor(rows, device=keep.device)
    states = layer_states(capture, mods, b, keep, rows=row_t)
    last = None
    if final is not None and rows is None:          # the last layer at rows final only
        last = layer_states(capture, mods, b, keep,
                            rows=torch.as_tensor(final, device=keep.device))[-1]
    result: dict[str, np.ndarray] = {}
    def normalized(raw):
        return normalize_rows(raw) if options["normalize"] else raw

    for name in methods:
        below = states if last is None else states[:-1]
        parts = [place_rows(normalized(head_layer_maps(below, name, options)), rows, n)
                 ] if below else []
        if last is not None:
            parts.append(place_rows(normalized(head_layer_maps([last], name, options)),
                                    final, n))
        maps = np.concatenate(parts)
        if last is None and final is not None:      # rows given: NaN outside final too
            maps = maps.copy()
            maps[-1, :, np.setdiff1d(np.arange(n), final)] = np.nan
        result[name] = maps
    return result
