r"""Aggregation across layers: rollout (Abnar & Zuidema 2020) of any layer-wise map, and
attention flow (max-flow on the layered attention graph).

Conventions (pinned):

- Layer maps are (L, n, n) with row i = receiving token, column j = contributing token.
- Rollout: :math:`\hat{C}^{1} = \tilde{C}^{1}`, :math:`\hat{C}^{\ell} = \tilde{C}^{\ell}\,\hat{C}^{\ell-1}`
  (current layer on the left); ``out[l]`` is the map from the input embeddings to the output
  of layer l+1.
- ``add_identity=True`` (the default of :func:`rollout` and :func:`attention_flow`) adds I
  before row normalisation: for rows summing to 1 this is exactly
  0.5 M + 0.5 I, Abnar & Zuidema's account of the residual connection. Methods whose maps already
  contain the residual (N-Res, N-ResLN, N-Enc, ALTI, Value Zeroing) are rolled out without it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
from tqdm.auto import tqdm

if TYPE_CHECKING:
    import torch

from cmixlib.validation import InputError, check_bool, check_maps, check_rows

#: Maps as the functions here take them: a numpy array, a torch tensor or a nested list.
ArrayLike = Union[np.ndarray, "torch.Tensor", Sequence[Any]]
#: Positions (rows, layers): None, an int, or a list / array / tensor of ints.
RowsLike = Union[None, int, Sequence[Any], np.ndarray, "torch.Tensor"]


def require_scipy(what: str) -> None:
    """An ImportError that says how to install scipy (the ``flow`` extra), if it is missing."""
    try:
        import scipy.sparse.csgraph  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{what} needs scipy's max-flow solver, which is not installed: "
                          "pip install 'cmixlib[flow]' (or scipy), or choose other methods.") from exc


def _as_numpy(maps, *, nonnegative: str | None = None) -> np.ndarray:
    """Layer maps (L, n, n) as a numpy array: finite, square, non-negative where the caller needs
    it (:func:`cmixlib.validation.check_maps`)."""
    return check_maps(maps, "maps", ndim=3, square=True, nonnegative=nonnegative)


def normalize_rows(mat: ArrayLike) -> np.ndarray:
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


def row_spread(maps: ArrayLike) -> np.ndarray | float:
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


def rollout(maps: ArrayLike, add_identity: bool = True, normalize: bool = True, *,
            rows: RowsLike = None) -> np.ndarray:
    r"""Rollout of layer maps: the product of the prepared maps up to each layer,
    ``out[l] = M~^l @ M~^(l-1) @ … @ M~^0``.

    .. math::

       \hat{C}^{1} = \tilde{C}^{1}, \qquad \hat{C}^{\ell} = \tilde{C}^{\ell}\,\hat{C}^{\ell-1},

    with :math:`\tilde{C} = \mathrm{rownorm}(C + I)` with ``add_identity`` (default, as
    :func:`attention_flow`; for rows summing to 1: :math:`(A + I)/2`, Abnar & Zuidema's
    attention rollout, so ``rollout(maps["attention"])`` is ``maps["attention_rollout"]`` of
    :func:`cmixlib.context_mixing`), :math:`\mathrm{rownorm}(C)` with ``normalize`` only,
    :math:`C` otherwise. Maps that already hold the residual (every method but raw attention:
    N-Res, N-ResLN, N-Enc, ALTI, Value Zeroing) are rolled out with ``add_identity=False``. With ``normalize=False`` and no identity the raw maps are multiplied
    (GlobEnc's original code does this with un-normalised norms; the scale then grows with depth).

    Parameters
    ----------
    maps:
        Layer maps :math:`C^{1}, \dots, C^{L}`, array, tensor or nested list of shape (L, n, n),
        L, n >= 1, finite (no NaN: every row is needed), non-negative when the maps are
        row-normalised (``normalize`` or ``add_identity``).
    add_identity, normalize:
        True or False (default both True: attention rollout).
    rows:
        None (every row), or only these rows of the last layer's rollout, :math:`\hat{C}^{L}_{i}
        = \tilde{C}^{L}_{i}\,\hat{C}^{L-1}` for :math:`i` in ``rows`` (integer positions
        ``0..n-1``): the last map then needs only those rows (its other rows may be NaN, as
        :func:`cmixlib.context_mixing` leaves them with ``final_rows``), and the other rows of
        the last layer's rollout are NaN. The rows are the same numbers as without ``rows``
        (each row of a product needs only that row of the left factor).

    Raises
    ------
    TypeError
        ``maps`` is not numeric; ``add_identity`` / ``normalize`` not a bool.
    InputError
        Wrong number of dimensions, last two dimensions unequal, NaN or inf (with ``rows``: NaN
        outside the last map's other rows), negative entries where rows are normalised, bad
        ``rows``.

    Returns
    -------
    The rollouts :math:`\hat{C}^{1}, \dots, \hat{C}^{L}`, shape (L, n, n).

    Examples
    --------
    >>> import numpy as np
    >>> from cmixlib import rollout
    >>> A = np.array([[[0.5, 0.5], [0.0, 1.0]], [[1.0, 0.0], [0.5, 0.5]]])
    >>> rollout(A, add_identity=False)[1]   # C^2 C^1
    array([[0.5 , 0.5 ],
           [0.25, 0.75]])
    >>> rollout(A)[0]                       # (A^1 + I) / 2: the default
    array([[0.75, 0.25],
           [0.  , 1.  ]])
    """
    add_identity, normalize = check_bool(add_identity, "add_identity"), check_bool(normalize, "normalize")
    need = "rollout with row normalisation" if normalize or add_identity else None
    if rows is None:
        arr = _as_numpy(maps, nonnegative=need)
    else:
        arr = check_maps(maps, "maps", ndim=3, square=True, allow_nan=True, nonnegative=need)
        rows = check_rows(rows, arr.shape[-1])
        if np.isnan(arr[:-1]).any() or np.isnan(arr[-1, rows]).any():
            raise InputError("maps contains NaN outside the last layer's other rows: with rows=..., "
                             "every layer but the last is needed whole, and the last at rows.")
    arr = arr.astype(np.float64 if arr.dtype == np.float64 else np.float32)
    last = None if rows is None else arr[-1, rows]
    if rows is not None:
        arr = arr[:-1]
    if add_identity:
        eye = np.eye(arr.shape[-1], dtype=arr.dtype)
        arr = arr + eye
        last = None if last is None else last + eye[rows]
    if normalize or add_identity:
        arr = normalize_rows(arr) if len(arr) else arr
        last = None if last is None else normalize_rows(last)
    out = np.empty_like(arr) if rows is None else np.full((arr.shape[0] + 1, *arr.shape[1:]),
                                                          np.nan, dtype=arr.dtype)
    if len(arr):
        out[0] = arr[0]
    for layer in range(1, len(arr)):
        out[layer] = arr[layer] @ out[layer - 1]
    if last is not None:
        out[-1, rows] = last @ out[-2] if len(out) > 1 else last
    return out


FLOW_SCALE = 1e9
#: Most edges in one scipy max-flow solve (the problems of a layer are solved together in
#: chunks of at most this many edges, so memory stays bounded: about 40 bytes per edge).
FLOW_EDGES_PER_SOLVE = 2 ** 21
_INT32_MAX = int(np.iinfo(np.int32).max)


def _joint_max_flows(icap: np.ndarray, sinks: np.ndarray, sources: np.ndarray) -> np.ndarray:
    r"""Max-flow values (int64, (C,)) of C problems at once: problem c sends flow from input
    token ``sources[c]`` to token ``sinks[c]`` at the output of the last of the ``T >= 2`` layers
    of the integer capacities ``icap`` (T, n, n) (``icap[k, i, j]``: edge (k, j) -> (k+1, i)).

    One graph holds a copy of the layered graph per problem, all copies joined only at a super
    source S (edges S -> (1, m) of capacity ``icap[0, m, sources[c]]``) and a super sink
    (edges (T-1, m) -> sink of capacity ``icap[T-1, sinks[c], m]``). The input tokens other than
    the source and the layer-T tokens other than the sink carry no flow in the single problem, so
    they are left out. Every S-sink cut of the joint graph is a union of one cut per copy, hence
    its max flow is the sum of the problems' max flows, and the flow of any maximum flow
    restricted to copy c is a maximum flow of problem c (it is feasible there, and a smaller
    value in one copy would make the sum smaller):

    .. math:: \mathrm{maxflow}_c = \sum_m f(S \to (1, m)_c).

    Integer capacities make this exact (the same integers as c separate solves).
    """
    from scipy.sparse import csr_matrix          # scipy: the flow extra (cmixlib[flow])
    from scipy.sparse.csgraph import maximum_flow

    T, n, _ = icap.shape
    C = len(sinks)
    P = (T - 1) * n                                           # nodes per copy
    first = 2 + np.arange(C, dtype=np.int64)[:, None] * P     # node of (layer 1, token 0) of copy c
    mid = np.transpose(icap[1:T - 1], (0, 2, 1))              # (T-2, sender, receiver)
    keep = mid > 0
    layer, _, receiver = np.nonzero(keep)                     # row-major: sorted rows and columns
    local_cols = np.concatenate([(layer + 1) * n + receiver, np.full(n, -1)])  # -1: the sink
    counts = np.concatenate([keep.sum(-1).ravel(), np.ones(n, np.int64)])
    cols = first + local_cols                                 # (C, edges per copy)
    cols[:, -n:] = 1                                          # node 1 is the super sink
    data = np.concatenate([np.broadcast_to(mid[keep], (C, int(keep.sum()))), icap[-1][sinks]], 1)
    indices = np.concatenate([(first + np.arange(n)).ravel(), cols.ravel()])
    data = np.concatenate([icap[0][:, sources].T.ravel(), data.ravel()])
    indptr = np.concatenate([[0, C * n, C * n], C * n + np.cumsum(np.tile(counts, C))])
    graph = csr_matrix((data.astype(np.int32), indices.astype(np.int32), indptr.astype(np.int32)),
                       shape=(2 + C * P, 2 + C * P))
    flow = maximum_flow(graph, 0, 1).flow
    start, stop = flow.indptr[0], flow.indptr[1]
    copy = (flow.indices[start:stop].astype(np.int64) - 2) // P
    return np.bincount(copy, weights=flow.data[start:stop], minlength=C).round().astype(np.int64)


def _check_layers(layers, num_layers: int) -> np.ndarray:
    """``layers`` of :func:`attention_flow` as sorted unique indices ``0..L-1`` (None: all);
    ``-L..-1`` count from the last layer."""
    if layers is None:
        return np.arange(num_layers)
    try:
        return check_rows(layers, num_layers, "layers", negative=True)
    except InputError as err:        # check_rows speaks of tokens; these are layers
        raise InputError(str(err).replace("a sequence of", "maps of").replace(" tokens", " layers")
                         .replace("positions", "layer indices")) from None


def attention_flow(maps: ArrayLike, add_identity: bool = True, rows: RowsLike = None,
                   layers: RowsLike = None) -> np.ndarray:
    r"""Attention flow (Abnar & Zuidema 2020): F^l[i, j] = max-flow from input token j (layer 0)
    to token i at the output of layer l+1 in the layered graph whose edge (l, j) -> (l+1, i) has
    capacity M~^l_ij (with ``add_identity``, the default as in :func:`rollout`,
    M~ = 0.5 A + 0.5 I as in the paper).

    .. math::

       \mathrm{Flow}^{\ell}_{ij} = \max\text{-flow}\big(j \text{ at layer } 0 \to i \text{ at layer }
       \ell\big), \qquad \text{capacity of } (\ell-1, k) \to (\ell, i) = \tilde{A}^{\ell}_{ik},
       \quad \tilde{A}^{\ell} = (A^{\ell} + I)/2.

    Solved with scipy's max-flow on integer capacities (scaled by 1e9; error below 1e-8 per edge).
    Flows to one sink from different sources are not additive, so rows are returned
    un-normalised; :func:`cmixlib.context_mixing` row-normalises them. ``rows`` restricts the sinks,
    ``layers`` the layers whose flows are solved (the others stay NaN): each layer is solved on
    its own graph, the deeper the dearer (the last of 6 layers took 40-46 % of the time of all
    six on the default encoder's maps of HateXplain posts, ``rows=[0]``).

    Cost: L * n^2 separate max-flow problems (one per layer, sink and source; flows from different
    sources cannot share one solve). The problems of one layer are solved together, as disjoint
    copies of the graph joined at a super source and a super sink (``_joint_max_flows``:
    exactly the same values as separate solves), in chunks of at most
    :data:`cmixlib.methods.aggregation.FLOW_EDGES_PER_SOLVE` edges (benchmarks/bench_flow.py). A progress
    bar appears for large inputs; pass ``rows`` when only some rows are needed.

    ``maps``: (L, n, n) non-negative finite maps (array, tensor or nested list; capacities cannot
    be negative) whose scaled capacities fit scipy's 32-bit integers (entries up to 2.1; with
    ``add_identity`` the rows are normalised, so any maps do); ``add_identity``: True or False;
    ``rows``: None or integer positions ``0..n-1`` (see :func:`cmixlib.validation.check_rows`);
    ``layers``: None or layer indices ``-L..L-1`` (negative ones count from the last). Raises
    TypeError or :class:`~cmixlib.InputError` (naming the argument) otherwise.

    Examples
    --------
    >>> import numpy as np
    >>> from cmixlib import attention_flow
    >>> A = np.array([[[0.5, 0.5], [0.0, 1.0]], [[1.0, 0.0], [0.5, 0.5]]])
    >>> attention_flow(A).shape             # (L, n, n), rows not normalised
    (2, 2, 2)
    >>> bool(np.allclose(attention_flow(A, add_identity=False)[0], A[0]))   # one layer: A itself
    True
    >>> bool(np.isnan(attention_flow(A, layers=[-1])[0]).all())   # only the last layer solved
    True
    """
    add_identity = check_bool(add_identity, "add_identity")
    require_scipy("attention_flow")
    arr = _as_numpy(maps, nonnegative="attention flow (edge capacities)").astype(np.float64)
    if add_identity:
        arr = normalize_rows(arr + np.eye(arr.shape[-1]))
    num_layers, n, _ = arr.shape
    sinks = np.arange(n) if rows is None else check_rows(rows, n)
    tops = _check_layers(layers, num_layers)
    icap = np.round(arr * FLOW_SCALE).astype(np.int64)
    if icap.max(initial=0) > _INT32_MAX:
        raise InputError(f"maps has entries up to {arr.max():.3g}, but attention flow scales "
                         f"capacities by {FLOW_SCALE:.0e} into 32-bit integers (at most "
                         f"{_INT32_MAX / FLOW_SCALE:.3g}): normalise the rows, or pass "
                         "add_identity=True.")
    out = np.full((num_layers, n, n), np.nan)
    if tops[0] == 0:
        out[0, sinks] = icap[0, sinks] / FLOW_SCALE           # one layer: the edge itself
    tops = tops[tops > 0]
    pair_sink, pair_source = (a.ravel() for a in np.meshgrid(sinks, np.arange(n), indexing="ij"))
    bar = tqdm(total=len(tops) * len(pair_sink), desc="attention flow (max-flow problems)",
               disable=True if len(tops) * len(pair_sink) < 5000 else None, leave=False)
    for top in tops:
        per_problem = 2 * n + int((icap[1:top] > 0).sum())    # edges of one copy
        step = max(1, FLOW_EDGES_PER_SOLVE // per_problem)
        values = np.empty(len(pair_sink), np.int64)
        for start in range(0, len(pair_sink), step):
            sl = slice(start, start + step)
            values[sl] = _joint_max_flows(icap[:top + 1], pair_sink[sl], pair_source[sl])
            bar.update(len(values[sl]))
        out[top, sinks] = values.reshape(len(sinks), n) / FLOW_SCALE
    bar.close()
    return out
