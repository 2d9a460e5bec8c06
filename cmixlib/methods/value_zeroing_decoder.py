"""Value Zeroing on pre-LN decoder LMs (Mohebbi et al. 2023), exact and causal, in the notation
of :mod:`cmixlib.forward.decoder` (m_i resid_mid, F_ij the attention vector from source j, x'_i
resid_out): v_j zeroed in every key-value head (so every query head of a GQA group sees it
zeroed), alpha unchanged, only layer l recomputed, m_i^(not j) = m_i - F_ij,
x'_i^(not j) = m^(not j) + MLP(LN2(m^(not j))), C_ij = distance(x'_i^(not j), x'_i) for every
pair j <= i at once (:func:`value_zeroing_layer`), either through the model's own LN2 and MLP
modules (``"batched"``) or with the MLP's input projections applied per head instead of per pair
(``"factored"``, :func:`mlp_head_maps`). Used by :mod:`cmixlib.methods.decoder`; measured in
``benchmarks/bench_decoder_value_zeroing.py``. The distances and the standardisation are the
encoder's (:mod:`cmixlib.methods.vz_distances`, except the ``"inseq"`` convention's cosine); the
perturbed outputs are recomputed here because a pre-LN layer adds the attention output to the
residual after LN1 (so m_i - F_ij goes through the MLP block only), while a post-LN encoder
layer re-runs LN1, the FFN and LN2 (:mod:`cmixlib.methods.value_zeroing`).

Conventions (``cmixlib.ValueZeroing(convention=)``).
``"default"``: distances between block outputs x' at every layer, the last included, in the
model's dtype and a cancellation-free cosine; every row divided by its sum. ``"inseq"``:
inseq 0.7.1's decoder ``value_zeroing`` (read with transformers 4.53; tested against its
outputs committed in ``tests/data/inseq/``). It differs from the default in that

- at the last layer the states are compared after the model's final norm (inseq reads the
  last block's output from ``hidden_states[-1]``, which transformers returns normed);
- the distance is 1 - cos of float32 states (:func:`inseq_cosine_distance`), so distances
  below ~1e-7 are rounding; the layer is re-run through the model's own modules (``"auto"``
  is ``"batched"``);
- distances below :data:`INSEQ_MIN_SCORE` are set to 0, and a row whose distances are all 0
  stays 0 (:func:`inseq_normalize`); the default divides the small distances by their sum,
  so a one-token row becomes [1];
- only the cosine distance, no standardisation, no rollout (refused otherwise).

Not conventions but inputs: inseq puts its tokenizer's ``bos_token`` first (SmolLM2:
``<|im_start|>``, id 1; cmixlib's BOS rule uses ``<|endoftext|>``, id 0), and for a text of n
tokens its map covers the n - 1 positions that predict (NaN above the diagonal; 0 here): to
compare, give cmixlib inseq's ids without the last one.
"""
from __future__ import annotations

import weakref
from typing import Callable

import numpy as np
import torch

from cmixlib.forward.decoder import DecoderLayerState
from cmixlib.methods import vz_distances
from cmixlib.methods.vz_distances import VZ_CONVENTIONS, VZ_METHODS
from cmixlib.validation import InputError

__all__ = ["VZ_METHODS", "VZ_CONVENTIONS", "INSEQ_MIN_SCORE", "CHUNK_ELEMENTS",
           "mlp_head_maps", "factored_pays", "value_zeroing_layer", "value_zeroing_heads",
           "inseq_cosine_distance", "inseq_normalize"]

#: inseq 0.7.1's ``min_score_threshold``: distances below it are set to 0 before normalising.
INSEQ_MIN_SCORE = 1e-5
#: Elements of the largest (keys x queries x d_ff) block of one chunk (kept cache-sized).
CHUNK_ELEMENTS = 2 ** 20
_HEAD_MAPS: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()


def mlp_head_maps(st: DecoderLayerState) -> list[torch.Tensor]:
    """M_k^h = W_k diag(gamma2) P W_O^h for each MLP input projection k, as (H, d_h, d_ff):
    W_k (gamma2 * P f^h(x_j)) = M_k^h v^h_j (P centres for LayerNorm, identity for RMSNorm).
    Weights only: computed once per layer and cached (keyed on the weights' storage and version,
    so in-place updates invalidate it)."""
    p = st.parts
    gamma = p.norm_params("ln2")[0]
    ws = [w for w, _ in p.mlp_in]
    stored = [t for t in (*ws, getattr(p.ln2, "weight", None), p.w_o) if t is not None]
    key = tuple((t.data_ptr(), t._version, t.dtype, t.device) for t in stored) + (
        p.family.name, p.residual_multiplier)
    hit = _HEAD_MAPS.get(p.layer)
    if hit is not None and hit[0] == key:
        return hit[1]
    w_o = p.w_o if p.residual_multiplier == 1.0 else p.w_o * p.residual_multiplier
    if p.family.norm == "layernorm":
        w_o = w_o - w_o.mean(dim=0, keepdim=True)
    maps = [((w * gamma) @ w_o).t().reshape(p.num_heads, p.head_dim, -1).contiguous()
            for w in ws]
    _HEAD_MAPS[p.layer] = (key, maps)
    return maps


def _inv_scale(st: DecoderLayerState, r: torch.Tensor) -> torch.Tensor:
    """1 / s(r) of LN2 over the last axis: rsqrt(Var(r) + eps) or rsqrt(mean(r^2) + eps)."""
    _, _, eps = st.parts.norm_params("ln2")
    if st.parts.family.norm == "layernorm":
        r = r - r.mean(dim=-1, keepdim=True)
    return torch.rsqrt(r.square().mean(dim=-1, keepdim=True) + eps)


def _mlp_hidden(st: DecoderLayerState, pre: list[torch.Tensor]) -> torch.Tensor:
    """act(pre_0) * pre_1 (gated, SwiGLU) or act(pre_0)."""
    h = st.parts.mlp_act(pre[0])
    return h * pre[1] if len(pre) == 2 else h


def _down(st: DecoderLayerState, h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """r + W_down h + b_down (the residual added in the same addmm), the MLP's output times the
    residual multiplier rho when it is not 1 (Granite): r + rho (W_down h + b_down)."""
    w, b = st.parts.mlp_down
    rho = st.parts.residual_multiplier
    if rho == 1.0:
        return torch.addmm(r if b is None else r + b, h, w.t())
    return torch.addmm(r if b is None else r + rho * b, h, w.t(), alpha=rho)


def _vz_pairs(st: DecoderLayerState, method: str):
    """Yield (i, j, x'^(not j)_i) for blocks of pairs j <= i, keys j in chunks (key-major)."""
    n = st.n
    m = st.resid_mid
    d_ff = st.parts.mlp_in[0][0].shape[0]
    step = max(1, CHUNK_ELEMENTS // (n * max(d_ff, m.shape[1])))
    hv = st.head_out.transpose(0, 1).contiguous()                         # (n, H, d)
    if method == "factored":
        gamma, beta, _ = st.parts.norm_params("ln2")
        mc = m - m.mean(dim=-1, keepdim=True) if st.parts.family.norm == "layernorm" else m
        A, basis = [], []
        for (w, b), hm in zip(st.parts.mlp_in, mlp_head_maps(st)):
            A.append((gamma * mc) @ w.t())                                  # (n, d_ff)
            c = (w @ beta if beta is not None else torch.zeros_like(w[:, 0])) + \
                (b if b is not None else 0.0)
            B = torch.bmm(st.values, hm).transpose(0, 1)                    # (n, H, d_ff)
            basis.append(torch.cat([B, c.expand(n, 1, -1)], dim=1))        # (n, H + 1, d_ff)
    for j0 in range(0, n, step):
        j1 = min(n, j0 + step)
        jl = torch.arange(j0, j1, device=m.device)
        il = torch.arange(j0, n, device=m.device)
        mask = il[None, :] >= jl[:, None]                                   # (c_j, c_i)
        jp, ip = (t + j0 for t in mask.nonzero(as_tuple=True))
        a = st.attn_weights[:, j0:, j0:j1].permute(2, 1, 0).contiguous()   # [j, i, h]
        r = m[j0:] - torch.bmm(a, hv[j0:j1])                                # m_i - F_ij
        if method == "batched":
            yield ip, jp, st.mlp_block(r[mask])
            continue
        inv = _inv_scale(st, r)                                             # (c_j, c_i, 1)
        coef = torch.cat([a.mul_(inv).neg_(), torch.ones_like(inv)], dim=-1)
        pre = [torch.bmm(coef, bk[j0:j1]).addcmul_(ak[j0:], inv) for ak, bk in zip(A, basis)]
        yield ip, jp, _down(st, _mlp_hidden(st, pre)[mask], r[mask])


def _vz_original(st: DecoderLayerState, method: str) -> torch.Tensor:
    """x'_i = m_i + MLP(LN2(m_i)) through the same path as the zeroed outputs."""
    m = st.resid_mid
    if method == "batched":
        return st.mlp_block(m)
    gamma, beta, _ = st.parts.norm_params("ln2")
    inv = _inv_scale(st, m)
    mc = m - m.mean(dim=-1, keepdim=True) if st.parts.family.norm == "layernorm" else m
    y = gamma * mc * inv + (beta if beta is not None else 0.0)
    pre = [torch.nn.functional.linear(y, w, b) for w, b in st.parts.mlp_in]
    return _down(st, _mlp_hidden(st, pre), m)


def factored_pays(st: DecoderLayerState) -> bool:
    """``"auto"``'s choice, on CPU: the factored form when the n(n+1)/2 pairs number at least the
    hidden size d (its per-layer head maps cost about d pairs' first MLP layer), or d / 2 once
    the maps are cached (measured on a SmolLM2-shaped model, one thread: batched faster at
    n = 16, factored from n = 32 on; benchmarks/bench_decoder_value_zeroing.py)."""
    if st.resid_in.device.type != "cpu":
        return False                          # not measured on accelerators: the plain form
    pairs, d = st.n * (st.n + 1) // 2, st.resid_in.shape[1]
    return pairs >= (d // 2 if st.parts.layer in _HEAD_MAPS else d)


@torch.no_grad()
def value_zeroing_layer(st: DecoderLayerState, distance: str = "cosine", standardize=None,
                        method: str = "auto", post: Callable | None = None,
                        convention: str = "default") -> torch.Tensor:
    """Value Zeroing of one layer, (n, n): C_ij = distance(x'^(not j)_i, x'_i) for j <= i,
    0 above.

    x'^(not j)_i = m_i - F_ij + MLP(LN2(m_i - F_ij)): v_j zeroed in every key-value head (bias
    included), alpha unchanged, only this layer recomputed. ``method``: ``"batched"`` (all pairs
    through the model's own LN2 and MLP modules), ``"factored"`` (the MLP's input projections
    applied per head, not per pair: W_k LN2(m_i - F_ij) + b_k = (A_i - sum_h alpha^h_ij
    B^h_j) / s_ij + W_k beta + b_k, A_i = W_k(gamma P m_i), B^h_j = M_k^h v^h_j, s_ij the real
    LN2 scale of the pair; :func:`mlp_head_maps`), or ``"auto"`` (:func:`factored_pays`).
    ``standardize``: None/False, True (per-dimension mean and std of this sentence's x'), or a
    (mean, std) pair of (d,) arrays. ``post``: a map applied to x' and every x'^(not j) before
    the distance (the final norm at the last layer in the ``"inseq"`` convention):
    C_ij = distance(post(x'^(not j)_i), post(x'_i)). ``convention="inseq"``: the cosine distance
    as inseq takes it (:func:`inseq_cosine_distance`; ``post`` given marks the last layer), and
    ``"auto"`` is ``"batched"``: the model's own modules, whose norms may compute in float32
    inside (transformers' RMSNorm does) as in inseq's forward passes. Both forms are exact;
    they agree to rounding.
    """

    if convention not in VZ_CONVENTIONS:
        raise InputError(f"Unknown Value Zeroing convention {convention!r}; choose one of "
                         f"{VZ_CONVENTIONS}.")
    if convention == "inseq" and (distance != "cosine" or standardize not in (None, False)):
        raise InputError("The 'inseq' convention is inseq's cosine distance, unstandardised.")
    if convention == "inseq" and method == "auto":
        method = "batched"                # the model's own modules, as inseq re-runs them
    dist_fn = vz_distances.distance_function(distance)
    if convention == "inseq":
        def dist_fn(a, b):
            return inseq_cosine_distance(a, b, last=post is not None)
    vz_distances.check_vz_method(method)
    if method == "auto":
        method = "factored" if factored_pays(st) else "batched"
    orig = _vz_original(st, method)
    if post is not None:
        orig = post(orig)
    z = vz_distances.standardizer(orig, standardize)
    orig = vz_distances.standardized(orig, z)
    out = torch.zeros(st.n, st.n, dtype=orig.dtype, device=orig.device)
    for ip, jp, o in _vz_pairs(st, method):
        if post is not None:
            o = post(o)
        out[ip, jp] = dist_fn(vz_distances.standardized(o, z), orig[ip]).to(out.dtype)
    return out


@torch.no_grad()
def value_zeroing_heads(st: DecoderLayerState, distance: str = "cosine", standardize=None
                        ) -> torch.Tensor:
    """Per-head Value Zeroing of one layer (our definition; the paper zeroes every head),
    (H, n, n), 0 above the diagonal: v_j zeroed as query head h reads it (head h only: with
    grouped-query attention the other query heads of its key-value group still read v_j),
    alpha and the other heads unchanged, only this layer recomputed:

        m_i^(not j,h) = m_i - alpha^h_ij f^h(x_j),
        x'_i^(not j,h) = m^(not j,h) + MLP(LN2(m^(not j,h))),
        C^h_ij = distance(x'_i^(not j,h), x'_i)   for j <= i,

    through the model's own LN2 and MLP modules (the ``"batched"`` form of
    :func:`value_zeroing_layer`, whose ``distance`` and ``standardize`` these are; the
    ``"inseq"`` convention has no per-head form). With one head it is
    :func:`value_zeroing_layer`."""
    dist_fn = vz_distances.distance_function(distance)
    m = st.resid_mid
    n, d = m.shape
    orig = st.mlp_block(m)
    z = vz_distances.standardizer(orig, standardize)
    orig = vz_distances.standardized(orig, z)
    hv = st.head_out                                                        # (H, n, d)
    out = torch.zeros(hv.shape[0], n, n, dtype=orig.dtype, device=orig.device)
    step = max(1, CHUNK_ELEMENTS // (n * max(st.parts.mlp_in[0][0].shape[0], d)))
    for h in range(hv.shape[0]):
        for j0 in range(0, n, step):
            j1 = min(n, j0 + step)
            mask = torch.arange(j0, n, device=m.device)[None, :] >= \
                torch.arange(j0, j1, device=m.device)[:, None]               # [j, i]: j <= i
            jp, ip = (t + j0 for t in mask.nonzero(as_tuple=True))
            a = st.attn_weights[h, j0:, j0:j1].t()                          # [j, i]
            r = m[j0:][None] - a[..., None] * hv[h, j0:j1][:, None, :]      # m_i - F^h_ij
            o = st.mlp_block(r[mask])
            out[h, ip, jp] = dist_fn(vz_distances.standardized(o, z), orig[ip]).to(out.dtype)
    return out


def inseq_cosine_distance(a: torch.Tensor, b: torch.Tensor, last: bool = False
                          ) -> torch.Tensor:
    """1 - cos(a, b) over the last axis as inseq 0.7.1 takes it, a the zeroed state and b the
    original: ``1 - torch.nn.CosineSimilarity(dim=-1)(b.float(), a')``, stored in float32.
    a' = a.float() below the last layer; at the last layer inseq reads the zeroed state from
    the model's output without the cast, so there a' = a and the cosine is torch's of the
    float32-rounded b and a in the model's dtype. Near-parallel states lose their distance to
    cancellation (an absolute error of a few float32 ulps of 1); the default's
    :func:`cmixlib.methods.vz_distances.cosine_distance`, ``||a/|a| - b/|b|||^2 / 2`` in the model's
    dtype, keeps full relative precision."""
    if not last:
        a = a.float()
    # mixed float32 / float64 operands at the last layer, as inseq passes them (torch's kernel
    # then neither promotes b nor casts a: the same call gives the same rounding)
    return (1 - torch.nn.functional.cosine_similarity(b.float(), a, dim=-1)).float()


def inseq_normalize(maps: np.ndarray, min_score: float = INSEQ_MIN_SCORE) -> np.ndarray:
    """inseq's normalisation of Value Zeroing distances (..., n, n): C_ij < ``min_score`` set to
    0, then each row divided by its sum, a row summing to 0 left at 0:
    C_ij / sum_k C_ik if sum_k C_ik > 0, else 0."""
    out = np.where(maps < min_score, 0.0, maps)
    total = out.sum(axis=-1, keepdims=True)
    return out / np.where(total == 0, 1.0, total)
