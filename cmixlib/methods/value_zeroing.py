"""Value Zeroing (Mohebbi et al. 2023), computed exactly per layer (the factored form by default;
the batched form is the reference).

Definition (pinned to the paper and the authors' code): for layer l, token j and every query i
(including i = j), zero j's value vector in all heads, bias included, after the attention weights
are computed (queries and keys untouched, weights not renormalised); re-run only layer l from its
original input; C^l[i, j] = distance(o_i^(not j), o_i). The diagonal is kept. Rows are
normalised by the caller. Symbols as in the book's notation table (book/conventions.md): p_i the
LN1 input, F_ij = sum_h alpha^h_ij f^h(x_j), y_i the LN1 output, o_i the layer output, and the
superscript (not j) marks the same quantity with v^h_j zeroed in every head.

Batched form (``method="batched"``, the reference): zeroing v^h_j in every head removes exactly
F_ij from the LN1 input of every query, so p_i^(not j) = p_i - F_ij. All n x n perturbed LN1 inputs are formed at once and pushed through LN1, the FFN and LN2 as one
large matrix batch, without re-running queries, keys, softmax or the value projection n times.
Cost per layer: two (n^2, d) x (d, d_ff) matmuls, 4 n^2 d d_ff FLOPs.

Factored form (``method="factored"``): the first FFN matmul is done per head, not per pair.
Centring is linear: w° = w - mean_d(w) (the book's ring, as in p°_i). With p°_i the centred LN1
input, f°^h_j the centred f^h(x_j) and gamma, beta, eps of LN1:

    p°_ij    = (p_i^(not j))° = p°_i - sum_h alpha^h_ij f°^h_j              (r, n, d)
    sigma_ij = sigma(p_i^(not j)) = sqrt(mean_d(p°_ij^2) + eps)
    y_i^(not j) = LN1(p_i - F_ij) = gamma * p°_ij / sigma_ij + beta

and, W1 being linear,

    W1 y_i^(not j) + b1 = (A_i - sum_h alpha^h_ij B^h_j) / sigma_ij + (W1 beta + b1),
    A_i = W1 (gamma * p°_i)   (r queries),   B^h_j = W1 (gamma * f°^h_j)   (H n head vectors).

In a chunk of c query rows the pairs are laid out key-major, (j, i), and the whole
pre-activation is one batched matmul over j with K = H + 1 plus one in-place multiply-add:

    pre_ij = [-alpha^1_ij / sigma_ij, ..., -alpha^H_ij / sigma_ij, 1] @ [B^1_j; ...; B^H_j; W1 beta + b1]
             + A_i / sigma_ij

(the constant row rides in the same matmul instead of a separate pass over the c n d_ff values).

A_i, B^h_j and M^h are symbols local to this module (not the book's attention map A). In the code
u = p°_i, g = f°^h_j and z = p°_ij. Since f°^h_j = (W_O^h v^h_j)° with v^h_j head h's value
vector (bias included), B^h_j = M^h v^h_j with M = W1 diag(gamma) (I - 11^T/d) W_O, a weight-only
(d_ff, d) product that is computed once per layer and cached (:func:`w1_head_map`); B then costs
2 n d d_ff FLOPs, like one W1 pass over the n tokens, A costs 2 r d d_ff, and combining them costs
2 r n H d_ff instead of the batched form's 2 r n d d_ff. Only the activation, W2, the residual and
LN2 stay per pair: o_i^(not j) = LN2(W2 act(W1 y_i^(not j) + b1) + b2 + y_i^(not j)). sigma_ij is
taken from p°_ij itself, which the residual y_i^(not j) needs anyway (2 r n H d FLOPs to form):
LayerNorm's own computation, so no cancellation can occur. (The same value follows from Gram matrices of centred vectors,
``d (sigma_ij^2 - eps) = |p°_i|^2 - 2 sum_h alpha^h_ij <p°_i, f°^h_j> + sum_hh' alpha^h_ij alpha^h'_ij <f°^h_j, f°^h'_j>``,
cheaper by a factor d / H but cancelling in float32 when ``|p°_ij| << |p°_i|``; not needed here.)

Which is cheaper: on CPU the factored form saves about 2 d_ff [r n (d - H) - (r + n) d] FLOPs per
layer, i.e. it wins from two query rows on and loses slightly for one row (``rows=[i]``). On a
GPU with fast matmuls (TF32, half precision) or short inputs the elementwise work dominates and
the batched form is faster (benchmarks/README.md). ``method="auto"`` (the default) follows these
rules; ``method="batched"`` keeps the previous implementation.

Several distances at once: the perturbed outputs o_i^(not j) do not depend on the distance, so
:func:`value_zeroing_layer_variants` (one layer) and :func:`value_zeroing_variant_maps` (a padded
batch, one forward) apply any number of (distance, standardisation) pairs to one set of them
(Appendix A.1's distance ablation: four variants for the price of one).
"""
from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from cmixlib.forward.encoder import LayerState, iter_sentences, layer_states, run_and_capture
from cmixlib.validation import InputError, check_maps, describe

DISTANCES = ("cosine", "euclidean", "spearman")

# elements of the largest (rows * n, d_ff) intermediate tensor in one chunk: the batched form is
# bound by its two large matmuls; the factored form also makes several elementwise passes over
# this tensor, which are faster while a chunk stays in the CPU's caches (measured in benchmarks/)
CHUNK_ELEMENTS = 2 ** 25
FACTORED_CHUNK_ELEMENTS = {"cpu": 2 ** 21}


def check_standardize(value: Any, d: int) -> Any:
    """``vz_standardize``: None, a bool, or a (mean, std) pair of finite (d,) arrays, std > 0."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return value
    what = f"None, True/False or a (mean, std) pair of arrays of shape ({d},)"
    try:
        if isinstance(value, (str, bytes, Mapping)):
            raise TypeError
        mean, std = value
    except (TypeError, ValueError):
        raise TypeError(f"vz_standardize must be {what}; got {describe(value)}.") from None
    for label, arr in (("mean", mean), ("std", std)):
        arr = check_maps(arr, f"vz_standardize's {label}", ndim=None, square=False)
        if arr.shape != (d,):
            raise InputError(f"vz_standardize's {label} has shape {arr.shape}, but the model's hidden size "
                             f"is {d}: it must be ({d},).")
        if label == "std" and (arr <= 0).any():
            raise InputError("vz_standardize's std must be > 0 in every dimension (it divides).")
    return value


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 - cos(a, b) over the last axis, computed as ``||a/|a| - b/|b|||^2 / 2``.

    The two are equal in exact arithmetic; the second keeps full relative precision when a and
    b are nearly parallel, where 1 - cos loses everything below the float epsilon (~1e-7 in float32).
    """
    an = a / torch.linalg.vector_norm(a, dim=-1, keepdim=True)
    bn = b / torch.linalg.vector_norm(b, dim=-1, keepdim=True)
    return 0.5 * torch.linalg.vector_norm(an - bn, dim=-1) ** 2


def euclidean_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """||a - b||_2 over the last axis."""
    return torch.linalg.vector_norm(a - b, dim=-1)


def _ranks(x: torch.Tensor) -> torch.Tensor:
    return torch.argsort(torch.argsort(x, dim=-1), dim=-1).to(x.dtype)


def spearman_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 - Spearman's rho between the coordinates of a and b (ranks over the hidden dimension;
    ties, which need exactly equal floats, are broken by position)."""
    ra, rb = _ranks(a), _ranks(b.expand_as(a))
    ra = ra - ra.mean(dim=-1, keepdim=True)
    rb = rb - rb.mean(dim=-1, keepdim=True)
    rho = (ra * rb).sum(-1) / (torch.linalg.vector_norm(ra, dim=-1) * torch.linalg.vector_norm(rb, dim=-1))
    return 1.0 - rho


DISTANCE_FUNCTIONS = {"cosine": cosine_distance, "euclidean": euclidean_distance, "spearman": spearman_distance}


def _standardizer(st: LayerState, standardize):
    """Per-dimension standardisation (Timkey & van Schijndel 2021), VZ paper Appendix A.1.

    ``True``: mean and std of each hidden dimension over this sentence's original layer outputs;
    a ``(mean, std)`` pair of (d,) tensors: statistics from a corpus (better for short inputs).
    """
    if standardize is None or standardize is False:
        return None
    if standardize is True:
        o = st.o
        return o.mean(dim=0), o.std(dim=0, unbiased=False).clamp_min(torch.finfo(o.dtype).eps)
    mean, std = standardize
    return torch.as_tensor(mean, dtype=st.o.dtype, device=st.o.device), \
        torch.as_tensor(std, dtype=st.o.dtype, device=st.o.device)


VZ_METHODS = ("auto", "factored", "batched")


def factored_is_cheaper(rows: int, n: int, d: int, heads: int) -> bool:
    """True when the factored form needs fewer matmul FLOPs than the batched form for one layer
    (``rows`` query rows of a sentence of ``n`` tokens), the per-layer W1 head map being cached."""
    return rows * n * (d - heads) > (rows + n) * d


def _factored_is_faster(st: LayerState, rows: int) -> bool:
    n, d = st.x.shape
    if not factored_is_cheaper(rows, n, d, st.mods.num_heads):
        return False
    if st.x.device.type == "cpu":
        return True
    # measured on an H100 (benchmarks/README.md): faster only in full fp32 from n = 128 on
    # (with the earlier two-pass pre-activation; the one-bmm form was not timed on a GPU yet)
    fast_mm = st.x.dtype in (torch.float16, torch.bfloat16) or \
        (st.x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32)
    return not fast_mm and n >= 128


def _centre(v: torch.Tensor) -> torch.Tensor:
    return v - v.mean(dim=-1, keepdim=True)


# ffn_in module -> (weights' identity and versions, W1 head map); freed with the model
_HEAD_MAPS: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()


def w1_head_map(m) -> torch.Tensor:
    """M = W1 diag(gamma1) (I - 11^T/d) W_O as (H, d_head, d_ff): B^h_j = W1 (gamma1 * f°^h_j) = M^h v^h_j.

    Depends on the weights only, so it is computed once per layer (2 d^2 d_ff FLOPs) and cached;
    the cache is keyed on the weight tensors' storage and version counters, so in-place updates
    (optimizer steps, ``load_state_dict``) invalidate it.
    """
    ws = (m.ffn_in.weight, m.ln1.weight, m.out.weight)
    key = tuple((w.data_ptr(), w._version, w.dtype, w.device) for w in ws)
    hit = _HEAD_MAPS.get(m.ffn_in)
    if hit is not None and hit[0] == key:
        return hit[1]
    w_o = m.out.weight                                      # (d, H * d_head), column k feeds v[k]
    hm = (m.ffn_in.weight * m.ln1.weight) @ (w_o - w_o.mean(dim=0, keepdim=True))    # (d_ff, d)
    hm = hm.t().reshape(m.num_heads, -1, hm.shape[0]).contiguous()                   # (H, d_head, d_ff)
    _HEAD_MAPS[m.ffn_in] = (key, hm)
    return hm


def _batched_outputs(st: LayerState, rows: torch.Tensor, step: int):
    """Reference: (slice, perturbed outputs (c, n, d)) from the n^2 perturbed LN1 inputs."""
    m = st.mods
    n, d = st.x.shape
    p = st.ln1_input[rows]                                  # (r, d)
    for start in range(0, len(rows), step):
        sl = slice(start, start + step)
        fvec = st.attn_vectors_for(rows[sl])       # (c, n, d), per chunk so memory stays bounded
        pert = (p[sl, None, :] - fvec).reshape(-1, d)                          # (c*n, d)
        y = m.ln1(pert)
        yield sl, m.ln2(m.ffn_out(m.act(m.ffn_in(y))) + y).view(-1, n, d)


def _factored_outputs(st: LayerState, rows: torch.Tensor, step: int):
    """Factored form (module docstring): (slice, perturbed outputs (c, n, d)); pairs are laid out
    key-major (j, i) inside a chunk so that the per-head combinations are batched matmuls over j."""
    m = st.mods
    n, d = st.x.shape
    ln1, w1, b1, w2 = m.ln1, m.ffn_in.weight, m.ffn_in.bias, m.ffn_out.weight
    gamma, beta = ln1.weight, ln1.bias
    u = _centre(st.ln1_input[rows])                         # (r, d)       p°_i
    g = _centre(st.head_vectors).transpose(0, 1).contiguous()   # (n, H, d)    f°^h_j
    A = torch.nn.functional.linear(gamma * u, w1)           # (r, d_ff)
    H = m.num_heads
    v = m.value(st.x).view(n, H, -1).transpose(0, 1)        # (H, n, d_head), value bias included
    B = torch.bmm(v, w1_head_map(m))                        # (H, n, d_ff)
    c1 = torch.nn.functional.linear(beta, w1, b1)           # (d_ff,)       W1 beta + b1
    # basis per key j: the H rows B^h_j and the constant row W1 beta + b1 (K = H + 1), so that
    # one plain bmm per chunk forms  W1 beta + b1 - sum_h (alpha^h_ij / sigma_ij) B^h_j
    basis = torch.cat([B.transpose(0, 1), c1.expand(n, 1, -1)], dim=1)   # (n, H + 1, d_ff)
    shift = beta + m.ffn_out.bias                           # (d,)          beta + b2
    for start in range(0, len(rows), step):
        sl = slice(start, start + step)
        a = st.alpha[:, rows[sl], :].permute(2, 1, 0).contiguous()  # (n, c, H)  alpha^h_ij at [j, i, h]
        z = torch.bmm(a, g).neg_().add_(u[sl])              # (n, c, d)     p°_ij = p°_i - sum_h alpha f°^h_j
        inv = torch.rsqrt(z.square().mean(dim=-1, keepdim=True) + ln1.eps)   # (n, c, 1)  1/sigma_ij
        coef = torch.cat([a.mul_(inv).neg_(), torch.ones_like(inv)], dim=-1)   # (n, c, H + 1)
        pre = torch.bmm(coef, basis).addcmul_(A[sl], inv)   # + A_i / sigma_ij
        h = m.act(pre).view(-1, w1.shape[0])
        del pre
        y = torch.addcmul(shift, z, gamma * inv).view(-1, d)    # y_i^(not j) + b2
        q = torch.addmm(y, h, w2.t())                       # W2 act(.) + b2 + y_i^(not j)
        yield sl, m.ln2(q).view(n, -1, d).transpose(0, 1)


@torch.no_grad()
def value_zeroing_layer(st: LayerState, distance: str = "cosine", standardize=None,
                        chunk_elements: int | None = None, method: str = "auto") -> torch.Tensor:
    """Raw Value Zeroing distances of one layer for the selected rows: (r, n), diagonal kept.

    C[i, j] = distance(o_i^(not j), o_i) with o_i^(not j) = LN2(y + FFN(y)), y = y_i^(not j) =
    LN1(p_i - F_ij); o_i is the layer output
    recomputed through the same path (identical to the model's output up to rounding).
    ``method``: ``"factored"`` (first FFN matmul per head, see the module docstring),
    ``"batched"`` (all n^2 perturbed LN1 inputs through the full FFN; the reference) or ``"auto"``
    (whichever needs fewer FLOPs for these rows: factored for full maps, batched for a few rows).
    Both are exact; they agree to rounding.

    Examples
    --------
    >>> import torch, cmixlib
    >>> from cmixlib.forward.encoder import encoder_layers, iter_sentences, layer_states, run_and_capture
    >>> from cmixlib.methods.value_zeroing import value_zeroing_layer
    >>> model = cmixlib.random_model("bert", seed=0)          # 2 layers, d = 32, 4 heads
    >>> ids = torch.randint(5, 120, (1, 9))
    >>> cap = run_and_capture(model, ids)
    >>> states = layer_states(cap, encoder_layers(model), 0, iter_sentences(cap)[0])
    >>> raw = value_zeroing_layer(states[0])                  # (n, n) cosine distances
    >>> raw.shape == (ids.shape[1], ids.shape[1])
    True
    >>> bool(torch.allclose(raw, value_zeroing_layer(states[0], method="batched"), atol=1e-5))
    True
    """
    return value_zeroing_layer_variants(st, [(distance, standardize)], chunk_elements, method)[0]


@torch.no_grad()
def value_zeroing_layer_variants(st: LayerState, variants, chunk_elements: int | None = None,
                                 method: str = "auto") -> torch.Tensor:
    r"""Raw Value Zeroing distances of one layer for several (distance, standardisation) pairs
    from one set of perturbed outputs: (k, r, n) for ``k = len(variants)``,

    .. math:: C_v[i, j] = \mathrm{dist}_v\big(s_v(o_i^{\neg j}),\, s_v(o_i)\big),

    with :math:`s_v` the standardisation of variant v (identity, per-dimension z-scores over the
    sentence, or a given (mean, std); ``_standardizer``). The perturbed outputs
    :math:`o_i^{\neg j}`, the expensive part, are computed once per chunk and shared, so k
    variants cost about one. Entry v equals :func:`value_zeroing_layer` with
    ``distance, standardize = variants[v]`` exactly (the same operations on the same tensors).

    ``variants``: a non-empty sequence of ``(distance, standardize)`` pairs, ``distance`` one of
    ``cmixlib.methods.value_zeroing.DISTANCES``, ``standardize`` as in :func:`value_zeroing_layer`.
    Raises ValueError for an unknown distance or method, or no variants.
    """
    variants = list(variants)
    if not variants:
        raise ValueError("variants is empty: give at least one (distance, standardize) pair.")
    try:
        dist_fns = [DISTANCE_FUNCTIONS[distance] for distance, _ in variants]
    except KeyError as err:
        raise ValueError(f"Unknown Value Zeroing distance {err.args[0]!r}; choose one of "
                         f"{DISTANCES}.") from None
    if method not in VZ_METHODS:
        raise ValueError(f"Unknown Value Zeroing method {method!r}; choose one of {VZ_METHODS}.")
    m = st.mods
    rows = st.row_index
    n, d = st.x.shape
    if method == "auto":
        method = "factored" if _factored_is_faster(st, len(rows)) else "batched"
    recomputed = st.recompute_output()[rows]                # (r, d)
    stdz = [_standardizer(st, standardize) for _, standardize in variants]
    original = [recomputed if z is None else (recomputed - z[0]) / z[1] for z in stdz]
    d_ff = m.ffn_in.out_features
    if chunk_elements is None:
        chunk_elements = CHUNK_ELEMENTS if method == "batched" else \
            FACTORED_CHUNK_ELEMENTS.get(st.x.device.type, CHUNK_ELEMENTS)
    step = max(1, chunk_elements // (n * max(d_ff, d)))
    out = torch.empty(len(variants), len(rows), n, dtype=st.x.dtype, device=st.x.device)
    chunks = _factored_outputs if method == "factored" else _batched_outputs
    for sl, o in chunks(st, rows, step):
        for v, (dist_fn, z, orig) in enumerate(zip(dist_fns, stdz, original)):
            ov = o if z is None else (o - z[0]) / z[1]
            out[v, sl] = dist_fn(ov, orig[sl, None, :])
    return out


def value_zeroing_variant_maps(model, input_ids, attention_mask=None, rows=None, *,
                               variants, normalize: bool = True) -> list:
    r"""Value Zeroing maps of several distances for every sentence of a padded batch, from one
    forward pass and one set of perturbed outputs per layer
    (:func:`value_zeroing_layer_variants`):

    .. math:: C^{\ell}_{v}[i, j] = \mathrm{dist}_v\big(s_v(o_i^{\ell, \neg j}),\,
              s_v(o_i^{\ell})\big) \Big/ \textstyle\sum_k (\cdot)_{ik} \quad (\text{with }
              ``normalize``).

    Entry v of sentence b equals, row for row, ``cmixlib.context_mixing(model, None, ...,
    methods="value_zeroing", rows=rows, vz_distance=variants[v][0],
    vz_standardize=variants[v][1])`` (the same forward, states and operations; the Value
    Zeroing experiments' distance ablation reads four variants at the cost of one).

    Parameters
    ----------
    model:
        A supported encoder (:func:`cmixlib.context_mixing`), in eval mode.
    input_ids, attention_mask:
        ``(B, n)`` ids and 0/1 mask (mask None: every position), checked as
        :func:`cmixlib.context_mixing` checks a mapping input.
    rows:
        None (every row), one list of positions for every sentence, or one entry (positions or
        None) per sentence, as :func:`cmixlib.context_mixing`.
    variants:
        A non-empty sequence of ``(distance, standardize)`` pairs (``"cosine"``,
        ``"euclidean"`` or ``"spearman"``; None/False, True or a (mean, std) pair).
    normalize:
        Divide each row by its sum.

    Returns
    -------
    One float array per sentence, ``(len(variants), L, r, n)``: r the selected rows in
    increasing order (all n without ``rows``), n the sentence's length.
    """
    from cmixlib.methods import dispatch as core
    from cmixlib.methods.aggregation import normalize_rows
    from cmixlib.validation import InputError, check_bool, check_choice, check_rows

    model, _ = core._unpack_model(model, None)
    normalize = check_bool(normalize, "normalize")
    variants = list(variants)
    if not variants:
        raise InputError("variants is empty: give at least one (distance, standardize) pair.")
    mods = core._encoder_layers(model)
    d = mods[0].ln2.normalized_shape[-1]
    variants = [(check_choice(dist, DISTANCES, "variants' distance", what="Value Zeroing distance"),
                 check_standardize(std, d)) for dist, std in variants]
    ids, mask, _ = core.encode(model, None,
                               {"input_ids": input_ids, "attention_mask": attention_mask})
    lengths = mask.sum(dim=1).tolist()
    per_rows = [check_rows(r, n, f"rows[{b}]" if r is not rows else "rows") for b, (r, n) in
                enumerate(zip(core._per_sentence_rows(rows, len(lengths)), lengths))]
    capture = run_and_capture(model, ids, mask)
    out = []
    with torch.no_grad():
        for (b, keep), r in zip(enumerate(iter_sentences(capture)), per_rows):
            row_t = None if r is None else torch.as_tensor(r, device=keep.device)
            states = layer_states(capture, mods, b, keep, rows=row_t)
            raw = torch.stack([value_zeroing_layer_variants(st, variants) for st in states], 1)
            raw = raw.cpu().numpy()                         # (k, L, r, n)
            out.append(normalize_rows(raw) if normalize else raw)
    return out
