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
about a factor H cheaper (the inner products read through the rank-d_h maps W_O^h cost r n d,
not the r n H d of forming p°_ij; the per-pair sums r n H^2) but cancelling in float32 when
``|p°_ij| << |p°_i|``, its error growing with the square of their ratio; not needed here.
Exercise 7.3 of the book counts both routes.)

Which is cheaper: on CPU the factored form saves about 2 d_ff [r n (d - H) - (r + n) d] FLOPs per
layer, i.e. it wins from two query rows on and loses slightly for one row (``rows=[i]``). On a
GPU with fast matmuls (TF32, half precision) or short inputs the elementwise work dominates and
the batched form is faster (benchmarks/README.md). ``method="auto"`` (the default) follows these
rules; ``method="batched"`` keeps the previous implementation.

Encoders and decoders: the distances and the standardisation are one set of functions for both
(:mod:`cmixlib.methods.vz_distances`); the perturbed outputs are not, because the math differs.
In this post-LN layer zeroing v_j changes the LN1 input, so every pair goes through LN1, the FFN
and LN2 with its own LayerNorm scales (o_i^(not j) = LN2(y + FFN(y)), y = LN1(p_i - F_ij)); in a
pre-LN decoder the attention output is added to the residual after LN1 has normalised each token,
so only the MLP block is re-run on m_i - F_ij and no LN1 or final LN2 is recomputed
(:mod:`cmixlib.methods.value_zeroing_decoder`, with its GQA heads, gated MLPs and RMSNorm).

Several distances at once: the perturbed outputs o_i^(not j) do not depend on the distance, so
:func:`value_zeroing_layer_variants` (one layer) and :func:`value_zeroing_variant_maps` (a padded
batch, one forward) apply any number of (distance, standardisation) pairs to one set of them
(Appendix A.1's distance ablation: four variants for the price of one).
"""
from __future__ import annotations

import weakref
import torch

from cmixlib.forward.encoder import LayerState, iter_sentences, layer_states, run_and_capture
from cmixlib.forward.encoding import encode
from cmixlib.forward.prepare import eval_encoder_layers, per_sentence_rows, unpack_model
from cmixlib.methods import vz_distances
from cmixlib.methods.aggregation import normalize_rows
from cmixlib.methods.vz_distances import DISTANCES, check_standardize
from cmixlib.validation import InputError, check_bool, check_choice, check_rows

# elements of the largest (rows * n, d_ff) intermediate tensor in one chunk: the batched form is
# bound by its two large matmuls; the factored form also makes several elementwise passes over
# this tensor, which are faster while a chunk stays in the CPU's caches (measured in benchmarks/)
CHUNK_ELEMENTS = 2 ** 25
FACTORED_CHUNK_ELEMENTS = {"cpu": 2 ** 21}


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
    sentence, or a given (mean, std); :func:`cmixlib.methods.vz_distances.standardizer`, shared
    with decoders, as the distances are). The perturbed outputs
    :math:`o_i^{\neg j}`, the expensive part, are computed once per chunk and shared, so k
    variants cost about one. Entry v equals :func:`value_zeroing_layer` with
    ``distance, standardize = variants[v]`` exactly (the same operations on the same tensors).

    ``variants``: a non-empty sequence of ``(distance, standardize)`` pairs, ``distance`` one of
    ``cmixlib.methods.vz_distances.DISTANCES``, ``standardize`` as in :func:`value_zeroing_layer`.
    Raises :class:`~cmixlib.InputError` (a ValueError) for an unknown distance or method, or no
    variants, as a decoder's Value Zeroing does.
    """
    variants = list(variants)
    if not variants:
        raise InputError("variants is empty: give at least one (distance, standardize) pair.")
    dist_fns = [vz_distances.distance_function(distance) for distance, _ in variants]
    vz_distances.check_vz_method(method)
    m = st.mods
    rows = st.row_index
    n, d = st.x.shape
    if method == "auto":
        method = "factored" if _factored_is_faster(st, len(rows)) else "batched"
    recomputed = st.recompute_output()[rows]                # (r, d)
    stdz = [vz_distances.standardizer(st.o, standardize) for _, standardize in variants]
    original = [vz_distances.standardized(recomputed, z) for z in stdz]
    d_ff = m.ffn_in.out_features
    if chunk_elements is None:
        chunk_elements = CHUNK_ELEMENTS if method == "batched" else \
            FACTORED_CHUNK_ELEMENTS.get(st.x.device.type, CHUNK_ELEMENTS)
    step = max(1, chunk_elements // (n * max(d_ff, d)))
    out = torch.empty(len(variants), len(rows), n, dtype=st.x.dtype, device=st.x.device)
    chunks = _factored_outputs if method == "factored" else _batched_outputs
    for sl, o in chunks(st, rows, step):
        for v, (dist_fn, z, orig) in enumerate(zip(dist_fns, stdz, original)):
            out[v, sl] = dist_fn(vz_distances.standardized(o, z), orig[sl, None, :])
    return out


def _head_outputs(st: LayerState, rows: torch.Tensor, step: int, h: int):
    """(slice, perturbed outputs (c, n, d)) with v^h_j zeroed in head h only: the LN1 input
    p_i - alpha^h_ij f^h(x_j) of every pair through LN1, the FFN and LN2 (the batched form)."""
    m = st.mods
    n, d = st.x.shape
    p = st.ln1_input[rows]                                  # (r, d)
    f = st.head_vectors[h]                                  # (n, d)   f^h(x_j)
    for start in range(0, len(rows), step):
        sl = slice(start, start + step)
        a = st.alpha[h, rows[sl], :]                        # (c, n)   alpha^h_ij
        y = m.ln1((p[sl, None, :] - a[..., None] * f[None]).reshape(-1, d))
        yield sl, m.ln2(m.ffn_out(m.act(m.ffn_in(y))) + y).view(-1, n, d)


@torch.no_grad()
def value_zeroing_heads(st: LayerState, distance: str = "cosine", standardize=None,
                        chunk_elements: int | None = None) -> torch.Tensor:
    """Per-head Value Zeroing of one layer (our definition: Mohebbi et al. 2023 zero a token's
    value in every head and define no per-head form), raw distances (H, r, n), diagonal kept:
    token j's value vector v^h_j (bias included) is zeroed in head h only, the attention
    weights and the other heads untouched, and only this layer is re-run:

        p_i^(not j,h) = p_i - alpha^h_ij f^h(x_j),   y = LN1(p_i^(not j,h)),
        o_i^(not j,h) = LN2(y + FFN(y)),   C^h[i, j] = distance(o_i^(not j,h), o_i),

    ``distance`` and ``standardize`` as in :func:`value_zeroing_layer` (the standardisation
    from this sentence's layer outputs o). With one head it is :func:`value_zeroing_layer`.
    Cost: H times the batched form's (every pair of every head through the FFN)."""
    dist_fn = vz_distances.distance_function(distance)
    rows = st.row_index
    n, d = st.x.shape
    z = vz_distances.standardizer(st.o, standardize)
    orig = vz_distances.standardized(st.recompute_output()[rows], z)          # (r, d)
    step = max(1, (chunk_elements or CHUNK_ELEMENTS) // (n * max(st.mods.ffn_in.out_features, d)))
    H = st.mods.num_heads
    out = torch.empty(H, len(rows), n, dtype=st.x.dtype, device=st.x.device)
    for h in range(H):
        for sl, o in _head_outputs(st, rows, step, h):
            out[h, sl] = dist_fn(vz_distances.standardized(o, z), orig[sl, None, :])
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
    methods=ValueZeroing(distance=variants[v][0], standardize=variants[v][1]), rows=rows)`` (the same forward, states and operations; the Value
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
    model, _ = unpack_model(model, None)
    normalize = check_bool(normalize, "normalize")
    variants = list(variants)
    if not variants:
        raise InputError("variants is empty: give at least one (distance, standardize) pair.")
    mods = eval_encoder_layers(model)
    d = mods[0].ln2.normalized_shape[-1]
    variants = [(check_choice(dist, DISTANCES, "variants' distance", what="Value Zeroing distance"),
                 check_standardize(std, d)) for dist, std in variants]
    ids, mask, _ = encode(model, None,
                               {"input_ids": input_ids, "attention_mask": attention_mask})
    lengths = mask.sum(dim=1).tolist()
    per_rows = [check_rows(r, n, f"rows[{b}]" if r is not rows else "rows") for b, (r, n) in
                enumerate(zip(per_sentence_rows(rows, len(lengths)), lengths))]
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
