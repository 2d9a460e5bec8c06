"""Plotting helpers shared by every chapter of the book.

Colours and labels come from the one registry (:mod:`cmixlib.methods.registry`: :func:`method_color`,
:func:`method_label`, re-exported here), so a method looks the same in every figure. Figure types:

* :func:`plot_map` -- one context-mixing map (receiving token i in rows, contributing token j in
  columns) as a heatmap;
* :func:`plot_layer_maps` -- a grid with one map per layer (or per method, with ``titles``);
* :func:`plot_layer_rows` -- one row of a map (e.g. [CLS] or [MASK]) at every layer, one panel
  per method or example (GlobEnc Figures 1, A.1, A.2, A.4);
* :func:`plot_row` -- one row of a map (how much each token contributes to one token) as bars;
* :func:`colour_tokens_html` -- a sentence with each token shaded by its score (ALTI-style
  saliency tables), as HTML for notebooks;
* :func:`plot_alignment_heatmap` -- a layer x method table of scores (e.g. Spearman correlations);
* :func:`plot_layer_correlations` -- one line per method across layers with a shaded
  confidence band (GlobEnc Figures 3-4).

All functions return matplotlib objects and never call ``plt.show()``.
"""
from __future__ import annotations

import html as _html
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from cmixlib.methods.registry import METHOD_COLORS, METHOD_LABELS, method_color, method_label  # noqa: F401

#: Colormap for non-negative context-mixing maps and one for signed quantities.
SEQ_CMAP = "Blues"
DIV_CMAP = "RdBu_r"


def _as_2d(matrix) -> np.ndarray:
    arr = np.asarray(matrix.detach().cpu() if hasattr(matrix, "detach") else matrix, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D (n, n) map, got shape {arr.shape}")
    return arr


def plot_map(matrix, tokens: Sequence[str], ax=None, title: str | None = None, *,
             cmap: str | None = None, vmin: float | None = None, vmax: float | None = None,
             annotate: bool | None = None, colorbar: bool = True, fmt: str = ".2f"):
    """Heatmap of one context-mixing map: row i = receiving token, column j = contributing token.

    ``annotate`` writes the values in the cells (default: only when there are at most 12 tokens).
    Signed maps (with negative entries) use a diverging colormap centred on 0. Returns the axes.
    """
    arr = _as_2d(matrix)
    n_rows, n_cols = arr.shape
    tokens = list(tokens)
    if ax is None:
        size = max(3.0, 0.45 * max(n_rows, n_cols) + 1.5)
        _, ax = plt.subplots(figsize=(size + (0.8 if colorbar else 0), size))
    signed = np.nanmin(arr) < 0 if arr.size else False
    if cmap is None:
        cmap = DIV_CMAP if signed else SEQ_CMAP
    if signed and vmin is None and vmax is None:
        bound = float(np.nanmax(np.abs(arr))) or 1.0
        vmin, vmax = -bound, bound
    im = ax.imshow(arr, cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal", interpolation="nearest")
    row_labels = tokens[:n_rows] if len(tokens) >= n_rows else [str(i) for i in range(n_rows)]
    col_labels = tokens[:n_cols] if len(tokens) >= n_cols else [str(j) for j in range(n_cols)]
    ax.set_xticks(range(n_cols))
    ax.set_xticklabels(col_labels, rotation=90)
    ax.set_yticks(range(n_rows))
    ax.set_yticklabels(row_labels)
    ax.set_xlabel("contributing token j")
    ax.set_ylabel("receiving token i")
    if annotate is None:
        annotate = max(n_rows, n_cols) <= 12
    if annotate:
        lo, hi = im.get_clim()
        mid = (lo + hi) / 2
        for i in range(n_rows):
            for j in range(n_cols):
                val = arr[i, j]
                colour = "white" if (val > mid if not signed else abs(val) > hi / 2) else "black"
                ax.text(j, i, format(val, fmt), ha="center", va="center", fontsize=7, color=colour)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_layer_maps(maps, tokens: Sequence[str], *, layers: Sequence[int] | None = None,
                    ncols: int = 4, title: str | None = None, shared_scale: bool = False,
                    cmap: str | None = None, cell_size: float = 2.6, layer_offset: int = 1,
                    titles: Sequence[str] | None = None):
    """Grid of per-layer maps from an array ``(num_layers, n, n)``; returns the figure.

    ``layers`` selects layers (0-based indices into ``maps``); panels are titled ``layer ℓ`` with
    ``ℓ = index + layer_offset`` (layers are numbered from 1 in the book), or ``titles`` (one per
    panel, e.g. method labels when the maps are one per method). ``shared_scale`` puts every
    panel on the same colour scale (useful for rollout, which flattens with depth), with one
    colour bar; otherwise each panel has its own colour bar. The axes are labelled once
    (receiving token i, contributing token j).
    """
    arr = np.asarray(maps.detach().cpu() if hasattr(maps, "detach") else maps, dtype=float)
    if arr.ndim != 3:
        raise ValueError(f"expected (num_layers, n, n), got shape {arr.shape}")
    idx = list(range(arr.shape[0])) if layers is None else list(layers)
    if titles is not None and len(titles) != len(idx):
        raise ValueError(f"{len(titles)} titles for {len(idx)} panels")
    ncols = max(1, min(ncols, len(idx)))
    nrows = int(np.ceil(len(idx) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(cell_size * ncols + 0.5, cell_size * nrows + 0.6),
                             squeeze=False, layout="constrained")
    vmin = vmax = None
    if shared_scale:
        vmin, vmax = float(np.nanmin(arr[idx])), float(np.nanmax(arr[idx]))
    n = arr.shape[-1]
    show_ticks = n <= 16
    used = []
    for k, ax in enumerate(axes.flat):
        if k >= len(idx):
            ax.axis("off")
            continue
        layer = idx[k]
        name = titles[k] if titles is not None else f"layer {layer + layer_offset}"
        plot_map(arr[layer], tokens, ax=ax, title=name, cmap=cmap,
                 vmin=vmin, vmax=vmax, annotate=False, colorbar=not shared_scale)
        used.append(ax)
        ax.set_xlabel("")
        ax.set_ylabel("")
        if not show_ticks:
            ax.set_xticks([])
            ax.set_yticks([])
        elif k % ncols != 0:
            ax.set_yticklabels([])
        if show_ticks and k < len(idx) - ncols:
            ax.set_xticklabels([])
    if shared_scale and used:
        fig.colorbar(used[0].images[0], ax=used, shrink=0.8, label="weight (shared scale)")
    fig.supxlabel("contributing token j", fontsize=9)
    fig.supylabel("receiving token i", fontsize=9)
    if title:
        fig.suptitle(title)
    return fig


def plot_layer_rows(panels: Mapping[str, object], tokens, *, ncols: int = 2,
                    title: str | None = None, cmap: str = "Reds", layer_offset: int = 1,
                    highlight: Mapping[str, int] | int | None = None, cell: float = 0.42):
    """One panel per entry of ``panels`` (title -> ``(num_layers, n)`` array: one row of a map at
    every layer, e.g. the [CLS] row of each layer's rollout), layers in rows (``layer ℓ``, ℓ =
    index + ``layer_offset``) and tokens in columns; each panel on its own scale from 0 (its
    largest score is darkest). A key that is a method name is shown by its label. ``tokens``:
    one list for every panel, or a mapping with one list per key. ``highlight``: a column to
    outline (e.g. the [MASK]), one for all panels or one per key. Returns the figure."""
    names = list(panels)
    if not names:
        raise ValueError("no panels to plot")
    arrays = {k: np.asarray(panels[k].detach().cpu() if hasattr(panels[k], "detach") else panels[k],
                            dtype=float) for k in names}
    toks = {k: list(tokens[k] if isinstance(tokens, Mapping) else tokens) for k in names}
    for k, a in arrays.items():
        if a.ndim != 2 or a.shape[1] != len(toks[k]):
            raise ValueError(f"panel {k!r}: expected (num_layers, {len(toks[k])}), got {a.shape}")
    ncols = max(1, min(ncols, len(names)))
    nrows = int(np.ceil(len(names) / ncols))
    width = max(len(t) for t in toks.values()) * cell + 1.4
    height = max(a.shape[0] for a in arrays.values()) * cell * 0.8 + 1.3
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                             layout="constrained")
    for ax, k in zip(axes.flat, names):
        a = arrays[k]
        top = float(np.nanmax(a)) if np.isfinite(a).any() else 1.0
        ax.imshow(a, cmap=cmap, vmin=min(0.0, float(np.nanmin(a))), vmax=top if top > 0 else 1.0,
                  aspect="auto", interpolation="nearest")
        ax.set_xticks(range(a.shape[1]))
        ax.set_xticklabels(toks[k], rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(a.shape[0]))
        ax.set_yticklabels([f"layer {i + layer_offset}" for i in range(a.shape[0])], fontsize=8)
        col = highlight.get(k) if isinstance(highlight, Mapping) else highlight
        if col is not None:
            ax.add_patch(plt.Rectangle((col - 0.5, -0.5), 1, a.shape[0], fill=False, lw=1.5,
                                       edgecolor="black"))
        ax.set_title(method_label(k), fontsize=9)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    return fig


def plot_row(scores, tokens: Sequence[str], ax=None, *, method: str | None = None,
             title: str | None = None, highlight: int | None = None, horizontal: bool = False):
    """Bar chart of one row of a map (or any per-token scores); returns the axes.

    ``method`` picks the method's colour and label; ``highlight`` outlines one token (e.g. the
    receiving token itself, or the [MASK]).
    """
    vals = np.asarray(scores.detach().cpu() if hasattr(scores, "detach") else scores, dtype=float).ravel()
    tokens = list(tokens)[: len(vals)]
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 0.45 * len(vals) + 1.0), 2.6) if not horizontal
                             else (4.5, max(2.5, 0.3 * len(vals) + 0.8)))
    colour = method_color(method) if method else "#4292c6"
    pos = np.arange(len(vals))
    bars = (ax.barh if horizontal else ax.bar)(pos, vals, color=colour,
                                                label=method_label(method) if method else None)
    if highlight is not None and 0 <= highlight < len(vals):
        bars[highlight].set_edgecolor("black")
        bars[highlight].set_linewidth(1.5)
    if horizontal:
        ax.set_yticks(pos)
        ax.set_yticklabels(tokens)
        ax.invert_yaxis()
        ax.set_xlabel("score")
    else:
        ax.set_xticks(pos)
        ax.set_xticklabels(tokens, rotation=60, ha="right")
        ax.set_ylabel("score")
    if title is None and method:
        title = method_label(method)
    if title:
        ax.set_title(title)
    return ax


def _score_to_rgb(value: float, vmax: float, signed: bool) -> tuple[int, int, int]:
    """White -> green for non-negative scores; red <- white -> green for signed ones."""
    t = 0.0 if vmax == 0 else max(-1.0, min(1.0, value / vmax))
    if t >= 0:
        base = (0, 109, 44)  # dark green
    else:
        base, t = (165, 15, 21), -t  # dark red
    return tuple(int(round(255 + (b - 255) * t)) for b in base)  # type: ignore[return-value]


def colour_tokens_html(tokens: Sequence[str], scores, *, vmax: float | None = None,
                       label: str | None = None, show_values: bool = False) -> str:
    """A sentence as HTML with each token's background shaded by its score.

    Scores are scaled by ``vmax`` (default: ``max |score|`` of this sentence). Positive scores go
    white -> green; negative ones white -> red. Returns an HTML string; wrap it with
    ``IPython.display.HTML`` in a notebook (several rows can be joined into one table, one
    row per method, as in the ALTI paper's saliency figures).
    """
    vals = np.asarray(scores.detach().cpu() if hasattr(scores, "detach") else scores, dtype=float).ravel()
    tokens = list(tokens)
    if len(tokens) != len(vals):
        raise ValueError(f"{len(tokens)} tokens but {len(vals)} scores")
    signed = bool((vals < 0).any())
    scale = float(np.max(np.abs(vals))) if vmax is None and len(vals) else float(vmax or 0.0)
    spans = []
    for tok, val in zip(tokens, vals):
        r, g, b = _score_to_rgb(float(val), scale, signed)
        dark = (0.299 * r + 0.587 * g + 0.114 * b) < 140
        text = _html.escape(str(tok)) + (f"<sub>{val:.2f}</sub>" if show_values else "")
        spans.append(
            f'<span class="cmix-token" title="{val:.4f}" style="background-color: rgb({r},{g},{b});'
            f' color: {"white" if dark else "black"}; padding: 1px 3px; margin: 1px;'
            f' border-radius: 3px; display: inline-block;">{text}</span>')
    body = " ".join(spans)
    if label is not None:
        return (f'<div class="cmix-saliency" style="font-family: monospace; line-height: 1.9;">'
                f'<b style="display: inline-block; min-width: 11em;">{_html.escape(label)}</b>{body}</div>')
    return f'<div class="cmix-saliency" style="font-family: monospace; line-height: 1.9;">{body}</div>'


def saliency_table_html(tokens: Sequence[str], rows: Mapping[str, object], **kwargs) -> str:
    """Several :func:`colour_tokens_html` rows, one per method (keys are method names)."""
    return "\n".join(colour_tokens_html(tokens, scores, label=method_label(name), **kwargs)
                     for name, scores in rows.items())


def plot_alignment_heatmap(df, ax=None, *, title: str | None = None, fmt: str = ".2f",
                           cmap: str | None = None, vmin: float | None = None,
                           vmax: float | None = None, annotate: bool = True):
    """Heatmap of a table of scores with layers in rows and methods in columns.

    ``df`` is a pandas DataFrame (index = layers, columns = method names; a column that is a
    known method is relabelled with :func:`method_label`). Signed tables use a diverging map
    centred on 0. Returns the axes.
    """

    if not isinstance(df, pd.DataFrame):
        df = pd.DataFrame(df)
    arr = df.to_numpy(dtype=float)
    signed = bool(np.nanmin(arr) < 0) if arr.size else False
    if cmap is None:
        cmap = DIV_CMAP if signed else "viridis"
    if signed and vmin is None and vmax is None:
        bound = float(np.nanmax(np.abs(arr))) or 1.0
        vmin, vmax = -bound, bound
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 * arr.shape[1] + 2.5, 0.4 * arr.shape[0] + 1.5))
    im = ax.imshow(arr, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(arr.shape[1]))
    ax.set_xticklabels([method_label(str(c)) for c in df.columns], rotation=45, ha="right")
    ax.set_yticks(range(arr.shape[0]))
    ax.set_yticklabels([str(i) for i in df.index])
    ax.set_ylabel(str(df.index.name) if df.index.name else "layer")
    if annotate:
        lo, hi = im.get_clim()
        for i in range(arr.shape[0]):
            for j in range(arr.shape[1]):
                if np.isnan(arr[i, j]):
                    continue
                frac = 0.5 if hi == lo else (arr[i, j] - lo) / (hi - lo)
                dark_cell = (frac < 0.5) if not signed else abs(frac - 0.5) > 0.3
                ax.text(j, i, format(arr[i, j], fmt), ha="center", va="center", fontsize=7,
                        color="white" if dark_cell else "black")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if title:
        ax.set_title(title)
    return ax


def plot_method_lines(df, ax=None, *, title: str | None = None, ylabel: str = "score",
                      xlabel: str = "layer"):
    """One line per method (columns of ``df``) across layers (index), in the method's colour."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for col in df.columns:
        ax.plot(df.index, df[col], marker="o", ms=3, color=method_color(str(col)),
                label=method_label(str(col)))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, frameon=False, loc="best")
    if title:
        ax.set_title(title)
    return ax


def plot_layer_correlations(df, ax=None, *, title: str | None = None, ylabel: str = "mean correlation",
                            labels: Mapping[str, str] | None = None):
    """One line per method across layers with its confidence band shaded (GlobEnc Figures 3-4).

    ``df`` is long: ``method``, ``layer``, ``mean`` and optionally ``ci_low``/``ci_high``.
    ``labels`` overrides display names (e.g. ``{"globenc_layer": "N-Enc"}``)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for m, g in df.groupby("method", sort=False):
        g = g.sort_values("layer")
        colour = method_color(str(m))
        name = (labels or {}).get(str(m), method_label(str(m)))
        ax.plot(g["layer"], g["mean"], marker="o", ms=3, color=colour, label=name)
        if {"ci_low", "ci_high"} <= set(g.columns):
            ax.fill_between(g["layer"].to_numpy(dtype=float), g["ci_low"].to_numpy(dtype=float),
                            g["ci_high"].to_numpy(dtype=float), color=colour, alpha=0.2, lw=0)
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    ax.set_xticks(sorted(df["layer"].unique()))
    ax.legend(fontsize=8, frameon=False, loc="best")
    if title:
        ax.set_title(title)
    return ax
