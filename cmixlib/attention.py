r"""Aggregation across layers: rollout (Abnar & Zuidema 2020) of any layer-wise map, and
attention flow (max-flow on the layered attention graph).

Conventions (pinned):

- Layer maps are (L, n, n) with row i = receiving token, column j = contributing token.
- Rollout: :math:`\hat{C}^{1} = \tilde{C}^{1}`, :math:`\hat{C}^{\ell} = \tilde{C}^{\ell}\,\hat{C}^{\ell-1}`
  (current layer on the left); ``out[l]`` is the map from the input embeddings to the output
  of layer l+1.
- ``add_identity=True`` adds I before row normalisation: for rows summing to 1 this is exactly
  0.5 M + 0.5 I, Abnar & Zuidema's account of the residual connection. Methods whose maps already
  contain the residual (N-Res, N-ResLN, N-Enc, ALTI, Value Zeroing) are rolled out without it.
"""
from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow
from tqdm.auto import tqdm

from .validation import check_bool, check_maps, check_rows


def _as_numpy(maps, *, nonnegative: str | None = None) -> np.ndarray:
    """Layer maps (L, n, n) as a numpy array: finite, square, non-negative where the caller needs
    it (:func:`cmixlib.validation.check_maps`)."""
    return check_maps(maps, "maps", ndim=3, square=True, nonnegative=nonnegative)


def normalize_rows(mat: np.ndarray) -> np.ndarray:
    r"""Rows divided by their sums; all-zero rows stay zero (and NaN rows NaN).

    .. math:: C_{ij} \leftarrow C_{ij} \Big/ \sum_k C_{ik}

    Parameters
    ----------
    mat:
        Non-negative real numbers, any shape with at least one dimension (rows along the last
        one): an array, a tensor or a nested list. NaN is allowed (a map computed with
        ``rows=...``), ±inf is not.

    Raises
    ------
    TypeError
        ``mat`` is not numeric (None, strings).
    InputError
        Negative entries (rows become distributions), ±inf, or an empty array.

    Examples
    --------
    >>> import numpy as np
    >>> from cmixlib import normalize_rows
    >>> normalize_rows(np.array([[1.0, 3.0], [0.0, 0.0]]))
    array([[0.25, 0.75],
           [0.  , 0.  ]])
    """
    mat = check_maps(mat, "mat", ndim=None, square=False, allow_nan=True,
                     nonnegative="normalize_rows (each row becomes a distribution)")
    s = mat.sum(axis=-1, keepdims=True)
    return mat / np.where(s == 0, 1.0, s)


def row_spread(maps) -> np.ndarray | float:
    r"""How different the rows of a map are: the mean total-variation distance over all pairs
    of rows (the pairs :math:`i = k` included), ``(..., n, n) -> (...)``:

    .. math:: \operatorname{spread}(C) = \frac{1}{n^2} \sum_{i,k} \tfrac12
       \sum_j \big|C_{ij} - C_{kj}\big| .

    0 when every row is the same; :math:`(n-1)/n` for rows that put all their weight on
    different tokens (the identity). Rows are used as given (normalise them first to compare
    distributions). Returns a float for one map.

    Examples
    --------
    >>> import numpy as np
    >>> from cmixlib import row_spread
    >>> row_spread(np.eye(4)), row_spread(np.full((3, 3), 1 / 3))
    (0.75, 0.0)
    """
    m = check_maps(maps, "maps", ndim=None, square=True)
    if m.ndim < 2:
        raise ValueError("row_spread needs maps of shape (..., n, n).")
    out = 0.5 * np.abs(m[..., :, None, :] - m[..., None, :, :]).sum(-1).mean((-2, -1))
    return float(out) if out.ndim == 0 else out


def rollout(maps, add_identity: bool = False, normalize: bool = True) -> np.ndarray:
    r"""Rollout of layer maps: the product of the prepared maps up to each layer,
    ``out[l] = M~^l @ M~^(l-1) @ … @ M~^0``.

    .. math::

       \hat{C}^{1} = \tilde{C}^{1}, \qquad \hat{C}^{\ell} = \tilde{C}^{\ell}\,\hat{C}^{\ell-1},

    with :math:`\tilde{C} = \mathrm{rownorm}(C + I)` with ``add_identity`` (for rows summing to 1:
    :math:`(A + I)/2`, attention rollout), :math:`\mathrm{rownorm}(C)` with ``normalize`` only,
    :math:`C` otherwise. With ``normalize=False`` and no identity the raw maps are multiplied
    (GlobEnc's original code does this with un-normalised norms; the scale then grows with depth).

    Parameters
    ----------
    maps:
        Layer maps :math:`C^{1}, \dots, C^{L}`, array, tensor or nested list of shape (L, n, n),
        L, n >= 1, finite (no NaN: every row is needed), non-negative when the maps are
        row-normalised (``normalize`` or ``add_identity``).
    add_identity, normalize:
        True or False.

    Raises
    ------
    TypeError
        ``maps`` is not numeric; ``add_identity`` / ``normalize`` not a bool.
    InputError
        Wrong number of dimensions, last two dimensions unequal, NaN or inf, negative entries
        where rows are normalised.

    Returns
    -------
    The rollouts :math:`\hat{C}^{1}, \dots, \hat{C}^{L}`, shape (L, n, n).

    Examples
    --------
    >>> import numpy as np
    >>> from cmixlib import rollout
    >>> A = np.array([[[0.5, 0.5], [0.0, 1.0]], [[1.0, 0.0], [0.5, 0.5]]])
    >>> rollout(A)[1]                       # C^2 C^1
    array([[0.5 , 0.5 ],
           [0.25, 0.75]])
    >>> rollout(A, add_identity=True)[0]    # (A^1 + I) / 2
    array([[0.75, 0.25],
           [0.  , 1.  ]])
    """
    add_identity, normalize = check_bool(add_identity, "add_identity"), check_bool(normalize, "normalize")
    need = "rollout with row normalisation" if normalize or add_identity else None
    arr = _as_numpy(maps, nonnegative=need)
    arr = arr.astype(np.float64 if arr.dtype == np.float64 else np.float32)
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
    r"""Attention flow (Abnar & Zuidema 2020): F^l[i, j] = max-flow from input token j (layer 0)
    to token i at the output of layer l+1 in the layered graph whose edge (l, j) -> (l+1, i) has
    capacity M~^l_ij (with ``add_identity``, M~ = 0.5 A + 0.5 I as in the paper).

    .. math::

       \mathrm{Flow}^{\ell}_{ij} = \max\text{-flow}\big(j \text{ at layer } 0 \to i \text{ at layer }
       \ell\big), \qquad \text{capacity of } (\ell-1, k) \to (\ell, i) = \tilde{A}^{\ell}_{ik},
       \quad \tilde{A}^{\ell} = (A^{\ell} + I)/2.

    Solved with scipy's max-flow on integer capacities (scaled by 1e9; error below 1e-8 per edge).
    Flows to one sink from different sources are not additive, so rows are returned
    un-normalised; :func:`cmixlib.context_mixing` row-normalises them. ``rows`` restricts the sinks.

    Cost: L * n^2 separate max-flow problems (one per layer, sink and source; flows from different
    sources cannot share one solve), about a minute for n = 32 and 12 layers on 2 CPU cores. A
    progress bar appears for large inputs; pass ``rows`` when only some rows are needed.

    ``maps``: (L, n, n) non-negative finite maps (array, tensor or nested list; capacities cannot
    be negative); ``add_identity``: True or False; ``rows``: None or integer positions
    ``0..n-1`` (see :func:`cmixlib.validation.check_rows`). Raises TypeError or
    :class:`~cmixlib.InputError` (naming the argument) otherwise.

    Examples
    --------
    >>> import numpy as np
    >>> from cmixlib import attention_flow
    >>> A = np.array([[[0.5, 0.5], [0.0, 1.0]], [[1.0, 0.0], [0.5, 0.5]]])
    >>> attention_flow(A).shape             # (L, n, n), rows not normalised
    (2, 2, 2)
    >>> bool(np.allclose(attention_flow(A, add_identity=False)[0], A[0]))   # one layer: A itself
    True
    """
    add_identity = check_bool(add_identity, "add_identity")
    arr = _as_numpy(maps, nonnegative="attention flow (edge capacities)").astype(np.float64)
    if add_identity:
        arr = normalize_rows(arr + np.eye(arr.shape[-1]))
    num_layers, n, _ = arr.shape
    sinks = range(n) if rows is None else check_rows(rows, n).tolist()
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
