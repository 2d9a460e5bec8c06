r"""The per-layer math of the context-mixing methods, written once for encoders and decoders.

Each function takes the tensors it reads (capture points, or the decomposition of
:mod:`cmixlib.forward.decomposition`), not a model's layer state, so a post-LN encoder
(:mod:`cmixlib.methods.norms`) and a pre-LN decoder (:mod:`cmixlib.methods.decoder_maps`) run
the same function on their own tensors; what differs by family is only which tensors they pass:

==================  =====================================  ======================================
method              encoder (post-LN) passes               decoder (pre-LN) passes
==================  =====================================  ======================================
attention           alpha at the selected rows             alpha (then the causal mask)
N                   F_ij                                   F_ij (f^h read from LN1(x_j))
N-Res               z_ii (the diagonal only; the rest      z_ij
                    is N's)
N-ResLN, N-Enc      T_i(x_j), T'_i(x_j) (encoders only)    (no post-residual norm: refused)
ALTI                y_i = LN1(p_i), T_i(x_j)               y_i = m_i = resid_mid, z_ij
W-/N-FixedRes       A or N, ratio 0.5                      A or N, ratio 0.5
W-Res               A without its diagonal, ratio r_i      (refused: needs N-Enc)
==================  =====================================  ======================================

ALTI's vectors differ because the norms sit elsewhere: in a post-LN layer LN1 follows the
residual, so the contributions are decomposed through it (T_i(x_j), exact with LN1's real scale);
in a pre-LN layer nothing normalises attention + residual, so z_ij and m_i are used as they are
(as Ferrando et al.'s decoder code does). Value Zeroing's distances and standardisation are
shared in :mod:`cmixlib.methods.vz_distances`; its perturbed outputs are recomputed through each
family's own layer (:mod:`cmixlib.methods.value_zeroing`,
:mod:`cmixlib.methods.value_zeroing_decoder`, whose docstrings say why they differ). Rollout and
attention flow are :mod:`cmixlib.methods.aggregation`'s for both.
"""
from __future__ import annotations

import torch

__all__ = ["attention_map", "vector_norms", "alti_contributions", "fixed_residual",
           "row_normalize"]


def attention_map(alpha: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """W: raw attention averaged over heads, A_ij = (1/H) sum_h alpha^h_ij, (r, n) from
    ``alpha`` (H, n, n) at query rows ``rows`` (None: every row, (n, n))."""
    return (alpha if rows is None else alpha[:, rows, :]).mean(dim=0)


def vector_norms(vectors: torch.Tensor) -> torch.Tensor:
    """||v_ij||_2 over the last axis: N (of F_ij), N-Res (of z_ij), N-ResLN (of T_i(x_j)) and
    N-Enc (of T'_i(x_j)) (Kobayashi et al. 2020, 2021; Modarressi et al. 2022)."""
    return torch.linalg.vector_norm(vectors, dim=-1)


def alti_contributions(y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """ALTI (Ferrando et al. 2022): c_ij = max(0, ||y_i||_1 - ||y_i - t_ij||_1), (r, s), from the
    resultants ``y`` (r, d) and the per-source vectors ``t`` (r, s, d) that add up to them (up to
    terms attributed to nobody). Row-normalising c gives the contribution matrix."""
    dist = torch.linalg.vector_norm(y[:, None, :] - t, ord=1, dim=-1)
    return torch.clamp(torch.linalg.vector_norm(y, ord=1, dim=-1)[:, None] - dist, min=0.0)


def fixed_residual(mat: torch.Tensor, rows: torch.Tensor,
                   ratio: torch.Tensor | float) -> torch.Tensor:
    """ratio_i * rownorm(mat)_i + (1 - ratio_i) e_i for the query rows ``rows`` (r,) of ``mat``
    (r, n), ``e_i`` the unit row at position rows[i] (GlobEnc's W-FixedRes and N-FixedRes with
    ratio 0.5, W-Res with the context-mixing ratio)."""
    ratio = torch.as_tensor(ratio, dtype=mat.dtype, device=mat.device).expand(mat.shape[0])
    out = row_normalize(mat) * ratio[:, None]
    out[torch.arange(len(rows), device=rows.device), rows] += 1.0 - ratio
    return out


def row_normalize(mat: torch.Tensor) -> torch.Tensor:
    """Divide each row by its sum; an all-zero row stays zero (never NaN)."""
    s = mat.sum(dim=-1, keepdim=True)
    return mat / torch.where(s == 0, torch.ones_like(s), s)
