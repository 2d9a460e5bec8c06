"""Vector-norm family: Kobayashi et al.'s N, N-Res, N-ResLN; GlobEnc's N-Enc and its ablations
(W-FixedRes, N-FixedRes, W-Res); ALTI's contributions; the context-mixing ratio.

Every function takes a :class:`~cmixlib.forward.encoder.LayerState` and returns an un-normalised
(r, n) tensor: rows are the selected receiving tokens i, columns all contributing tokens j. The
math that a pre-LN decoder shares (attention, N, N-Res, ALTI, the fixed residuals) is one
function of :mod:`cmixlib.methods.layer_math` called by both families; this module passes it an
encoder's tensors (:mod:`cmixlib.methods.layer_math` tabulates what each family passes).
Bias conventions (pinned): the value bias b_V belongs to token j (it travels inside j's value
vector); the output bias b_O and the LayerNorm biases beta1, beta2 are attributed to nobody.
"""
from __future__ import annotations

import torch

from cmixlib.forward.encoder import LayerState
from cmixlib.methods import layer_math


def _diag_index(st: LayerState) -> tuple[torch.Tensor, torch.Tensor]:
    r = st.row_index
    return torch.arange(len(r), device=r.device), r


def _memo(st: LayerState, key: str, compute) -> torch.Tensor:
    """``compute()`` once per layer state (the (r, n) maps that several methods build on: W, N,
    each a pass over n x n x d or H x n x n values); every call returns a copy of the (small)
    result, so callers may change it."""
    if key not in st._cache:
        st._cache[key] = compute()
    return st._cache[key].clone()


def attention_mean(st: LayerState) -> torch.Tensor:
    """W: raw attention averaged over heads, A_ij = (1/H) sum_h alpha^h_ij."""
    return _memo(st, "attention_mean", lambda: layer_math.attention_map(st.alpha, st.row_index))


def attn_norm(st: LayerState) -> torch.Tensor:
    """N (Kobayashi et al. 2020): ||sum_h alpha^h_ij f^h(x_j)||_2, f^h including b_V."""
    return _memo(st, "attn_norm", lambda: layer_math.vector_norms(st.attn_vectors))


def attn_norm_res(st: LayerState) -> torch.Tensor:
    """N-Res: ||sum_h alpha^h_ij f^h(x_j) + delta_ij x_i||_2 (residual on the diagonal).

    z_ij = F_ij off the diagonal, so those entries are N's; only ||z_ii|| is computed anew."""
    if "res_vectors" in st.__dict__:           # z already built: read it
        return layer_math.vector_norms(st.res_vectors)
    out = attn_norm(st)                                      # a copy
    rr, cc = _diag_index(st)
    out[rr, cc] = layer_math.vector_norms(st.res_diag_vectors)
    return out


def attn_norm_res_ln(st: LayerState) -> torch.Tensor:
    """N-ResLN (Kobayashi et al. 2021): ||T_i(x_j)||_2 with the exact LN1 decomposition
    T_i(x_j) = gamma1 * (z_ij - mean(z_ij)) / sqrt(Var(p_i) + eps1)."""
    return layer_math.vector_norms(st.ln1_vectors)


def globenc_layer(st: LayerState) -> torch.Tensor:
    """N-Enc (Modarressi et al. 2022): ||T'_i(x_j)||_2 with
    T'_i(x_j) = gamma2 * (T_i(x_j) - mean(T_i(x_j))) / sqrt(Var(u_i) + eps2),
    u_i = y_i + FFN(y_i) the real LN2 input (the FFN enters only through this scale)."""
    return layer_math.vector_norms(st.ln2_vectors)


def alti_layer(st: LayerState) -> torch.Tensor:
    """ALTI (Ferrando et al. 2022): c_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1).

    y_i is the real LN1 output (it contains the unattributed gamma1*(b_O - mean b_O)/s + beta1).
    Row-normalising c gives the paper's contribution matrix.
    """
    return layer_math.alti_contributions(st.ln1_output[st.row_index], st.ln1_vectors)


def mixing_ratio_of(vectors: torch.Tensor, st: LayerState) -> torch.Tensor:
    """Context-mixing ratio r_i = ||sum_{j!=i} vec_ij|| / (||sum_{j!=i} vec_ij|| + ||vec_ii||), (r,),
    vec_ij the given (r, n, d) vectors (z_ij, T_i(x_j) or T'_i(x_j); see :data:`MIXING_RATIO_VECTORS`)."""
    rr, cc = _diag_index(st)
    diag = vectors[rr, cc]                                            # (r, d)
    mix = torch.linalg.vector_norm(vectors.sum(dim=1) - diag, dim=-1)
    keep = torch.linalg.vector_norm(diag, dim=-1)
    return mix / (mix + keep)


#: Which vectors :math:`v_{ij}` the context-mixing ratio of each method reads (a :class:`LayerState` attribute).
MIXING_RATIO_VECTORS = {
    "attn_norm_res": "res_vectors",
    "attn_norm_res_ln": "ln1_vectors",
    "globenc_layer": "ln2_vectors",
}


def mixing_ratio(st: LayerState, kind: str = "attn_norm_res_ln") -> torch.Tensor:
    """Context-mixing ratio of one layer with the vectors of ``kind`` (Kobayashi et al. 2021 use
    N-ResLN; GlobEnc's W-Res uses N-Enc's)."""
    try:
        attr = MIXING_RATIO_VECTORS[kind]
    except KeyError:
        raise ValueError(f"mixing ratio kind must be one of {sorted(MIXING_RATIO_VECTORS)}, got {kind!r}") from None
    return mixing_ratio_of(getattr(st, attr), st)


def w_fixedres(st: LayerState) -> torch.Tensor:
    """W-FixedRes: 0.5 A + 0.5 I (its rollout is Abnar & Zuidema's attention rollout)."""
    return layer_math.fixed_residual(attention_mean(st), st.row_index, 0.5)


def n_fixedres(st: LayerState) -> torch.Tensor:
    """N-FixedRes: 0.5 N / rowsum(N) + 0.5 I."""
    return layer_math.fixed_residual(attn_norm(st), st.row_index, 0.5)


def w_res(st: LayerState) -> torch.Tensor:
    """W-Res: attention with its diagonal removed and rows renormalised, mixed with the identity
    by N-Enc's context-mixing ratio r_i: r_i * A'_i + (1 - r_i) e_i."""
    a = attention_mean(st)                                   # a copy
    rr, cc = _diag_index(st)
    a[rr, cc] = 0.0
    return layer_math.fixed_residual(a, st.row_index, mixing_ratio(st, "globenc_layer"))


# --------------------------------------------------------------------------- per-head maps
def attention_heads(st: LayerState) -> torch.Tensor:
    """Per-head attention A^h_ij = alpha^h_ij, (H, r, n); its mean over heads is
    :func:`attention_mean` (:func:`cmixlib.methods.layer_math.head_attention`)."""
    return layer_math.head_attention(st.alpha, st.row_index)


def attn_norm_heads(st: LayerState) -> torch.Tensor:
    """Per-head N: N^h_ij = ||alpha^h_ij f^h(x_j)||_2, f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h,
    (H, r, n); sum_h alpha^h_ij f^h(x_j) = F_ij, so N_ij <= sum_h N^h_ij
    (:func:`cmixlib.methods.layer_math.head_norms`)."""
    return layer_math.head_norms(st.alpha, st.head_vectors, st.row_index)


def alti_heads(st: LayerState) -> torch.Tensor:
    """Per-head ALTI: c^h_ij = max(0, ||o^h_i||_1 - ||o^h_i - alpha^h_ij f^h(x_j)||_1),
    o^h_i = sum_j alpha^h_ij f^h(x_j) head h's output before b_O, the residual and LN1,
    (H, r, n) (our definition; :func:`cmixlib.methods.layer_math.head_alti`)."""
    return layer_math.head_alti(st.alpha, st.head_vectors, st.row_index)
