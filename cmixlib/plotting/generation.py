"""One figure of generation-time attribution (:mod:`cmixlib.methods.generation`): per method, a
heatmap with the generated tokens in rows (step t) and the source tokens in columns (prompt +
generated tokens); the cells of sources that did not exist yet at step t (j > n - 1 + t) are
blank. Returns matplotlib objects and never calls ``plt.show()``.
"""
from __future__ import annotations

from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np

from cmixlib.plotting.maps import method_label, plot_map

__all__ = ["generation_matrix", "plot_generation"]


def generation_matrix(result: Any, method: str, layer: int = -1, *,
                      bos_out: bool = False) -> np.ndarray:
    """The (k, n + k - 1) matrix of ``result.maps[method][layer]`` with the cells j > n - 1 + t
    set to NaN (not yet generated). ``bos_out``: column 0 left out (a (k, n + k - 2) matrix)
    and each row of a normalised method divided by its remaining sum, r_tj / sum_{j' >= 1}
    r_tj'; ALTI-Logit (logit units) is never renormalised."""
    mat = np.array(result.maps[method][layer], dtype=float)
    k, width = mat.shape
    future = np.arange(width)[None, :] > (result.n_prompt - 1 + np.arange(k))[:, None]
    mat[future] = np.nan
    if bos_out:
        mat = mat[:, 1:]
        if method != "alti_logit":
            total = np.nansum(mat, axis=1, keepdims=True)
            mat = np.divide(mat, total, out=np.full_like(mat, np.nan), where=total > 0)
    return mat


def plot_generation(result: Any, methods: Sequence[str] | None = None, *, layer: int = -1,
                    bos_out: bool = False, ncols: int = 3, cell: float = 0.42,
                    annotate: bool = False):
    """Generated tokens x source tokens, one panel per method (:func:`generation_matrix`),
    row t labelled with the step's token and its probability. Returns the figure."""
    methods = list(result.maps) if methods is None else list(methods)
    n, k = result.n_prompt, result.steps
    sources = list(result.tokens[: n + k - 1])[1 if bos_out else 0:]
    rows = [f"{tok} ({p:.2f})" for tok, p in zip(result.tokens[n:], result.probability)]
    ncols = max(1, min(ncols, len(methods)))
    nrows = -(-len(methods) // ncols)
    width = cell * len(sources) + 3.0
    height = cell * k + 1.8
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False)
    for ax, method in zip(axes.flat, methods):
        mat = generation_matrix(result, method, layer, bos_out=bos_out)
        plot_map(mat, sources, ax=ax, title=method_label(method), annotate=annotate)
        ax.set_yticks(range(k))
        ax.set_yticklabels(rows)
        ax.set_xticks(range(len(sources)))
        ax.set_xticklabels(sources, rotation=90)
        ax.set_xlabel("source token j")
        ax.set_ylabel("generated token (probability)")
    for ax in list(axes.flat)[len(methods):]:
        ax.axis("off")
    fig.tight_layout()
    return fig
