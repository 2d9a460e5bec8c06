r"""How a layer map's row changes when it is rolled out over depth: the per-layer rows of one
receiving token under the aggregations a faithfulness table can use, the self/neighbour weight
profile of layer maps, and how spread out a row is.

Used by the experiment ``vz-rollout-depth`` (:mod:`cmixlib.experiments.vz_rollout`), which asks
why Value Zeroing rollout is not faithful to blank-out on a small model (chapter 11).

* :func:`depth_rows` -- token t's row at every layer: the single layer map, its rollout with
  and without the identity, and the un-normalised product;
* :func:`offset_profile` -- the mean weight a row gives to the token at offset
  :math:`k = j - i` from the receiving token :math:`i`;
* :func:`row_entropy` -- the normalised entropy of rows (1 = uniform).
"""
from __future__ import annotations

import numpy as np

from cmixlib.methods.aggregation import normalize_rows, rollout
from cmixlib.validation import InputError

__all__ = ["AGGREGATIONS", "depth_rows", "offset_profile", "row_entropy"]

#: The aggregations of :func:`depth_rows`, in the order the book shows them.
AGGREGATIONS = ("single", "rollout", "rollout+I", "raw product")


def _maps(maps) -> np.ndarray:
    arr = np.asarray(maps, dtype=float)
    if arr.ndim != 3 or arr.shape[1] != arr.shape[2] or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InputError(f"expected layer maps of shape (L, n, n), got {arr.shape}; pass one "
                         "sentence's maps (context_mixing(...)[method]).")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise InputError("layer maps must be finite and non-negative (clip a signed map first).")
    return arr


def depth_rows(maps, t: int) -> dict[str, np.ndarray]:
    r"""Row ``t`` of a method's layer maps :math:`C^1, \dots, C^L` (un-normalised, as
    ``context_mixing(..., normalize=False)`` returns them) at every layer, aggregated four ways
    (each ``(L, n)``):

    * ``"single"``: :math:`\tilde C^{\ell}_{t\cdot}` with :math:`\tilde C = \mathrm{rownorm}(C)`;
    * ``"rollout"``: :math:`(\tilde C^{\ell} \cdots \tilde C^{1})_{t\cdot}`, the faithfulness
      table's rollout (no identity);
    * ``"rollout+I"``: the same product of :math:`\tfrac12 \tilde C^{\ell} + \tfrac12 I`, attention
      rollout's convention (Abnar and Zuidema);
    * ``"raw product"``: :math:`(C^{\ell} \cdots C^{1})_{t\cdot}`, no normalisation (GlobEnc's
      original code), divided by its row sum (a positive scale, which no rank correlation sees).
    """
    arr = _maps(maps)
    n = arr.shape[-1]
    if not 0 <= int(t) < n:
        raise InputError(f"row t={t} is outside the {n} tokens of the maps.")
    t = int(t)
    tilde = normalize_rows(arr)
    return {"single": tilde[:, t, :],
            "rollout": rollout(tilde, add_identity=False, normalize=True)[:, t, :],
            "rollout+I": rollout(tilde, add_identity=True)[:, t, :],
            "raw product": normalize_rows(rollout(arr, add_identity=False,
                                                  normalize=False)[:, t, :])}


def offset_profile(maps, rows=None, max_offset: int = 3) -> tuple[np.ndarray, np.ndarray]:
    r"""Sums and counts of the weight each receiving row ``i`` (all rows, or ``rows``) gives to
    the token at offset :math:`k = j - i`, for :math:`k = -K, \dots, K` (``K = max_offset``), in
    every layer of row-normalised maps :math:`\tilde C`:

    .. math:: S^{\ell}_k = \sum_{i \in R,\ 0 \le i + k < n} \tilde C^{\ell}_{i,\,i+k},
              \qquad N_k = \lvert\{i \in R : 0 \le i + k < n\}\rvert .

    Returns ``(S, N)`` of shapes ``(L, 2K+1)`` and ``(2K+1,)``; the mean weight at offset k is
    :math:`S_k / N_k`, summed first so that sentences of any length pool exactly. Offset 0 is
    the token itself; under a uniform row every entry is 1/n."""
    arr = normalize_rows(_maps(maps))
    n = arr.shape[-1]
    if int(max_offset) < 0:
        raise InputError(f"max_offset must be >= 0, got {max_offset}.")
    r = np.arange(n) if rows is None else np.asarray(rows, dtype=int).ravel()
    if r.size and (r.min() < 0 or r.max() >= n):
        raise InputError(f"rows {r.tolist()} are outside the {n} tokens of the maps.")
    k = np.arange(-int(max_offset), int(max_offset) + 1)
    cols = r[:, None] + k[None, :]                       # (|R|, 2K+1)
    ok = (cols >= 0) & (cols < n)
    vals = arr[:, r[:, None], np.clip(cols, 0, n - 1)]   # (L, |R|, 2K+1)
    return (vals * ok).sum(axis=1), ok.sum(axis=0)


def row_entropy(rows) -> np.ndarray:
    r"""Normalised entropy of each row of non-negative scores (last axis, length n >= 2):
    :math:`H(p) / \log n` with :math:`p` the row divided by its sum and :math:`0 \log 0 = 0`;
    1 for a uniform row, 0 for a one-hot row."""
    p = np.asarray(rows, dtype=float)
    if p.shape[-1] < 2 or (p < 0).any() or not np.isfinite(p).all():
        raise InputError("row_entropy needs finite non-negative rows of length >= 2.")
    p = p / p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1)
    return h / np.log(p.shape[-1])
