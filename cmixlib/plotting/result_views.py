"""Views of a user's own results (:class:`cmixlib.MixingResult`): a matplotlib figure of the
maps (:func:`plot_result`, what :meth:`MixingResult.plot` draws) and the book's explorer on the
user's sentences (:func:`results_block`, :func:`results_html`, what
:meth:`MixingResult.to_html` returns).

Nothing is recomputed: the figure and the page show the result's own maps, tokens and layers.
The explorer stores each map as integers (value x 10^3,
:func:`~cmixlib.plotting.explorer_packing.pack_maps`), so it shows the maps whose values are
non-negative; a signed map (ALTI-Logit, in logit units) is left out of the page and listed in
its note (:func:`plot_result` draws it, on a diverging scale).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from cmixlib.methods.registry import method_label
from cmixlib.plotting.explorer_packing import DECIMALS, pack_maps
from cmixlib.plotting.explorer_page import explorer_html, method_table
from cmixlib.validation import InputError, check_positions

__all__ = ["plot_result", "results_block", "results_data", "results_html"]


def _labels(res) -> list[str]:
    """The token labels of a result: its tokens, else its ids as text."""
    if res.tokens is not None:
        return [str(t) for t in res.tokens]
    if res.input_ids is not None:
        return [str(int(i)) for i in res.input_ids]
    n = int(np.shape(next(iter(res.values())))[-1])
    return [str(i) for i in range(n)]


def plot_result(res, method: str | Sequence[str] | None = None,
                layer: int | Sequence[int] | None = -1, *,
                head: int | Sequence[int] | None = None, **kwargs: Any):
    """A figure of ``res``'s maps (:func:`~cmixlib.plotting.maps.plot_layer_maps`): one panel
    per method and layer, tokens on both axes (up to 16 tokens); several methods at several
    layers: methods in rows, layers in columns; otherwise rows of 4 panels.

    ``method``: a name of ``res``, a list of names, or None (every method of ``res``).
    ``layer``: an index into ``res.layers`` (negative from the last; default -1, the last
    layer), a list of indices, or None (every layer). Panels are titled with the method's label
    and the layer's number (1-based, as ``res.layers``). Per-head maps (L, H, n, n) of a
    ``heads=True`` result get one panel per head (``head``: an index, a list, or None for every
    head; titled with the head's number from 1). Other keywords go to
    ``plot_layer_maps`` (``shared_scale``, ``cmap``, ``cell_size``). Returns the figure."""
    from cmixlib.plotting.maps import plot_layer_maps

    names = list(res) if method is None else [method] if isinstance(method, str) else list(method)
    unknown = [m for m in names if m not in res]
    if not names or unknown:
        raise InputError(f"method={method!r}: this result holds {list(res)}; pass one of them, "
                         "a list of them, or None for all.")
    idx = list(range(len(res.layers))) if layer is None else check_positions(
        [layer] if isinstance(layer, (int, np.integer)) else layer, len(res.layers), "layer",
        negative=True).tolist()
    arrays, titles, per_row = [], [], []
    for m in names:
        arr = np.asarray(res[m], dtype=float)
        for i in idx:
            if arr.ndim == 4:                           # per head: (L, H, n, n)
                hs = list(range(arr.shape[1])) if head is None else check_positions(
                    [head] if isinstance(head, (int, np.integer)) else head, arr.shape[1],
                    "head").tolist()
                arrays += [arr[i, h] for h in hs]
                titles += [f"{method_label(m)}, layer {res.layers[i]}, head {h + 1}"
                           for h in hs]
                per_row.append(len(hs))
            else:
                arrays.append(arr[i])
                titles.append(f"{method_label(m)}, layer {res.layers[i]}")
                per_row.append(1)
    panels = np.stack(arrays)
    one_row = len(idx) == 1 or len(names) == 1          # one method or one layer: a row of 4
    single = len(names) * len(idx) == 1                 # one map's heads: rows of 4 too
    ncols = kwargs.pop("ncols", min(4, len(panels)) if single or (one_row and max(per_row) == 1)
                       else max(per_row) if max(per_row) > 1 else len(idx))
    return plot_layer_maps(panels, _labels(res), titles=titles, ncols=ncols, **kwargs)


def results_block(results, *, heads: Sequence[Any] | None = None,
                  decimals: int = DECIMALS) -> dict[str, Any]:
    """One explorer block (the format of :func:`cmixlib.plotting.explorer_models.model_block`)
    of ``results`` (one result or a list of results of one model, with the same methods and
    layers): per sentence its text (``res.text``, else the tokens joined), tokens and maps.
    ``heads``: optionally, per result, the attention of every head, (L, H, n, n), shown under
    the explorer's head control; by default the result's own per-head ``attention``
    (``heads=True``), whose mean over heads (the head-averaged attention) is then its layer
    map. Maps with negative values, and per-head maps of other methods, are left out and
    named in the page's note (see the module docstring)."""
    results = [results] if isinstance(results, dict) else list(results)
    if not results:
        raise InputError("results_block needs at least one result.")
    first = results[0]
    for r in results[1:]:
        if list(r) != list(first) or r.layers != first.layers:
            raise InputError("The explorer shows results of one call: every result needs the same "
                             f"methods and layers ({list(first)}, layers {first.layers}); got "
                             f"{list(r)}, layers {r.layers}.")
    signed = [m for m in first
              if any(np.nanmin(np.asarray(r[m], dtype=float), initial=0.0) < 0 for r in results)]
    per_head = [m for m in first if np.ndim(first[m]) == 4]
    if heads is None and "attention" in per_head:       # the page's head control
        heads = [r["attention"] for r in results]
    layer_maps = [{m: np.asarray(r[m], dtype=float).mean(axis=1) if m == "attention" and
                   m in per_head else r[m] for m in r} for r in results]
    left_out = [m for m in per_head if m != "attention"]
    shown = [m for m in first if m not in signed and m not in left_out]
    if not shown:
        raise InputError(f"No map of {list(first)} can be shown in the explorer (all signed); "
                         "use .plot().")
    n_heads = 0
    sentences = []
    for k, r in enumerate(results):
        toks = _labels(r)
        entry = {"text": r.text if getattr(r, "text", None) else " ".join(toks),
                 "tokens": toks, "maps": pack_maps({m: layer_maps[k][m] for m in shown},
                                                   decimals),
                 "heads": []}
        if heads is not None:
            h = np.asarray(heads[k], dtype=float)
            if h.ndim != 4 or h.shape[0] != len(r.layers) or h.shape[2:] != (len(toks),) * 2:
                raise InputError(f"heads[{k}] has shape {h.shape}; expected (layers, heads, n, n) "
                                 f"= ({len(r.layers)}, H, {len(toks)}, {len(toks)}).")
            n_heads = h.shape[1]
            entry["heads"] = pack_maps({"h": h}, decimals)["h"]
        sentences.append(entry)
    family = getattr(first, "family", None) or "model"
    notes = []
    if signed:
        notes.append(f"Not shown here: {', '.join(method_label(m) for m in signed)} (signed "
                     "values, e.g. logit units); the result's .plot() draws them.")
    if left_out:
        notes.append(f"Per-head maps not shown here: {', '.join(map(method_label, left_out))} "
                     "(the head control shows attention's heads); the result's .plot() draws "
                     "them.")
    note = " ".join(notes) or None
    block = {"model": first.model or "a model", "family": family, "layers": len(first.layers),
             "heads": n_heads, "decimals": decimals, "methods": shown, "sentences": sentences,
             "note": note, "baselines": False, "baseline_methods": []}
    if first.layers != list(range(1, len(first.layers) + 1)):
        block["layer_numbers"] = list(first.layers)
    return block


def results_data(results, **kwargs: Any) -> dict[str, Any]:
    """The explorer's data of ``results`` (:func:`results_block`): ``{"decimals", "methods",
    "models": [block]}``, as :func:`cmixlib.plotting.explorer.explorer_data` returns it."""
    block = results_block(results, **kwargs)
    return {"decimals": block["decimals"], "methods": method_table(block["methods"]),
            "models": [block]}


def results_html(results, element_id: str | None = None, **kwargs: Any) -> str:
    """The explorer of ``results`` (one result or a list) as one self-contained HTML fragment
    (:func:`~cmixlib.plotting.explorer_page.explorer_html`): the packed maps and the viewer
    script inline, nothing fetched, so it works offline and in a saved notebook.
    ``element_id``: the page element's id; by default ``cmix-result-`` and a hash of the data,
    so that several views on one page do not collide."""
    data = results_data(results, **kwargs)
    if element_id is None:
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]
        element_id = f"cmix-result-{digest}"
    return explorer_html(data, element_id=element_id)
