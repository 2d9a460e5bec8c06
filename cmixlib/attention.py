"""Aggregation across layers: rollout (Abnar & Zuidema 2020) of any layer-wise map, and
attention flow (max-flow on the layered attention graph).

Conventions (pinned):
- Layer maps are (L, n, n) with row i = receiving token, column j = contributing token.
- Rollout: R^1 = M^1, R^l = M^l R^(l-1) (current layer on the left); ``out[l]`` is the map from
  the input embeddings to the output of layer l+1.
- ``add_identity=True`` adds I before row normalisation: for rows summing to 1 this is exactly
  0.5 M + 0.5 I, Abnar & Zuidema's account of the residual connection. Methods whose maps already
  contain the residual (N-Res, N-ResLN, N-Enc, ALTI, Value Zeroing) are rolled out without it.
"""
from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow
from tqdm.auto import tqdm


def _as_numpy(maps) -> np.ndarray:
    arr = np.asarray(maps.detach().cpu().numpy() if hasattr(maps, "detach") else maps)
    if arr.ndim != 3 or arr.shape[1] != arr.shape[2]:
        raise ValueError(f"expected layer maps of shape (num_layers, n, n), got {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError("rollout needs every row of every layer; the maps contain NaN rows "
                         "(were they computed with rows=...?)")
    return arr


def normalize_rows(mat: np.ndarray) -> np.ndarray:
    """Rows divided by their sums; all-zero rows stay zero."""
    s = mat.sum(axis=-1, keepdims=True)
    return mat / np.where(s == 0, 1.0, s)


def rollout(maps, add_identity: bool = False, normalize: bool = True) -> np.ndarray:
    """Rollout of layer maps: ``out[l] = M~^l @ M~^(l-1) @ ... @ M~^0``.

    M~ = rownorm(M + I) with ``add_identity``, rownorm(M) with ``normalize`` only, M otherwise.
    With ``normalize=False`` and no identity the raw maps are multiplied (GlobEnc's original code
    does this with un-normalised norms; the scale then grows with depth).
    """
    arr = _as_numpy(maps).astype(np.float64 if np.asarray(maps).dtype == np.float64 else np.float32)
    if add_identity:
        arr = arr + np.eye(arr.shape[-1], dtype=arr.dtype)
    if normalize or add_identity:
        arr = normalize_rows(arr)
    out = np.empty_like(arr)
    out[0] = arr[0]
    for layer in range(1, arr.shape[0]):
        out[layer] = arr[layer] @ out[layer - 1]
    return out


FLOW_SCALE = 1e9


def attention_flow(maps, add_identity: bool = True, rows=None) -> np.ndarray:
    """Attention flow (Abnar & Zuidema 2020): F^l[i, j] = max-flow from input token j (layer 0)
    to token i at the output of layer l+1 in the layered graph whose edge (l, j) -> (l+1, i) has
    capacity M~^l_ij (with ``add_identity``, M~ = 0.5 A + 0.5 I as in the paper).

    Solved with scipy's max-flow on integer capacities (scaled by 1e9; error below 1e-8 per edge).
    Flows to one sink from different sources are not additive, so rows are returned
    un-normalised; :func:`cmixlib.context_mixing` row-normalises them. ``rows`` restricts the sinks.

    Cost: L * n^2 separate max-flow problems (one per layer, sink and source; flows from different
    sources cannot share one solve), about a minute for n = 32 and 12 layers on 2 CPU cores. A
    progress bar appears for large inputs; pass ``rows`` when only some rows are needed.
    """
    arr = _as_numpy(maps).astype(np.float64)
    if add_identity:
        arr = normalize_rows(arr + np.eye(arr.shape[-1]))
    num_layers, n, _ = arr.shape
    sinks = range(n) if rows is None else list(rows)
    out = np.full((num_layers, n, n), np.nan)
    bar = tqdm(total=num_layers * len(sinks) * n, desc="attention flow (max-flow problems)",
               disable=True if num_layers * len(sinks) * n < 5000 else None, leave=False)
    for top in range(num_layers):
        # nodes: layer k token t -> k * n + t for k = 0..top+1
        size = (top + 2) * n
        src, dst, cap = [], [], []
        jj, ii = np.meshgrid(np.arange(n), np.arange(n))  # ii = receiver, jj = sender
        for k in range(top + 1):
            src.append(k * n + jj.ravel())
            dst.append((k + 1) * n + ii.ravel())
            cap.append(arr[k].ravel())
        src, dst, cap = map(np.concatenate, (src, dst, cap))
        icap = np.round(cap * FLOW_SCALE).astype(np.int64)
        keep = icap > 0
        graph = csr_matrix((icap[keep].astype(np.int32), (src[keep], dst[keep])), shape=(size, size))
        for i in sinks:
            sink = (top + 1) * n + i
            for j in range(n):
                out[top, i, j] = maximum_flow(graph, j, sink).flow_value / FLOW_SCALE
            bar.update(n)
    bar.close()
    return out
