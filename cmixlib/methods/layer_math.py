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

Per-head maps (``cmixlib.context_mixing(..., heads=True)``, (L, H, n, n)), the same functions
for both families, from alpha^h_ij and f^h(x_j) (``head_out``: head h's value vector, with its
slice b_V^h of the value bias, through its slice W_O^h of the output projection; b_O, the
residual and the norms belong to no head):

==============  =============================================================================
attention       A^h_ij = alpha^h_ij (mean over heads: the layer's A)
N               N^h_ij = ||alpha^h_ij f^h(x_j)||_2 (sum over h of the vectors: F_ij, so
                N_ij <= sum_h N^h_ij; one head: N)
ALTI            c^h_ij = max(0, ||o^h_i||_1 - ||o^h_i - alpha^h_ij f^h(x_j)||_1),
                o^h_i = sum_j alpha^h_ij f^h(x_j) (our definition: the paper has none)
Value Zeroing   v^h_j zeroed in head h only, the layer re-run (our definition;
                ``value_zeroing_heads`` of :mod:`cmixlib.methods.value_zeroing` and
                :mod:`cmixlib.methods.value_zeroing_decoder`)
==============  =============================================================================

The other layer-wise methods read the residual (or LayerNorms of the sum of every head and
the residual), which belongs to no head, and aggregated methods stay per layer: both are
refused with the reason (:data:`NO_HEAD_FORM`, :func:`check_head_methods`).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from cmixlib.methods.registry import ALL_METHODS
from cmixlib.validation import InputError

__all__ = ["attention_map", "vector_norms", "alti_contributions", "fixed_residual",
           "row_normalize", "HEAD_METHODS", "NO_HEAD_FORM", "check_head_methods",
           "head_attention", "head_norms", "head_alti", "HEAD_CHUNK_ELEMENTS"]


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


# --------------------------------------------------------------------------- per-head maps
#: Layer-wise methods with a per-head map (``context_mixing(..., heads=True)``), shape
#: (L, H, n, n); definitions in :func:`head_attention`, :func:`head_norms`, :func:`head_alti`
#: and the Value Zeroing modules' ``value_zeroing_heads``.
HEAD_METHODS = ("attention", "attn_norm", "alti_layer", "value_zeroing")

_RESIDUAL = "the residual x_i (on the diagonal) belongs to no head"
_LN_SUM = ("LN1 normalises the sum of every head's output and the residual (its scale "
           "sigma(p_i) is the whole sum's)")
#: Layer-wise methods without a per-head form, and why (aggregated methods: see
#: :func:`check_head_methods`).
NO_HEAD_FORM = {
    "attn_norm_res": f"N-Res adds the residual to the diagonal and {_RESIDUAL}; per head use "
                     "attn_norm (N^h_ij = ||alpha^h_ij f^h(x_j)||).",
    "attn_norm_res_ln": f"N-ResLN reads attention + residual through LN1: {_LN_SUM}, and "
                        f"{_RESIDUAL}; per head use attn_norm or alti_layer.",
    "globenc_layer": f"N-Enc reads the N-ResLN vectors through LN1 and LN2: {_LN_SUM}, LN2 that "
                     f"of the FFN block's sum, and {_RESIDUAL}; per head use attn_norm or "
                     "alti_layer.",
    "w_fixedres": "W-FixedRes mixes the head-averaged attention with the identity (0.5 I for the "
                  f"residual) and {_RESIDUAL}; per head use attention.",
    "n_fixedres": "N-FixedRes mixes N with the identity (0.5 I for the residual) and "
                  f"{_RESIDUAL}; per head use attn_norm.",
    "w_res": "W-Res mixes attention with the identity by N-Enc's context-mixing ratio (read "
             f"through both LayerNorms) and {_RESIDUAL}; per head use attention.",
    "alti_logit": "ALTI-Logit is in logit units and already splits by head in "
                  "cmixlib.methods.alti_logit.explain_logit (its per-head terms); heads=True "
                  "gives layer maps only: ask alti_logit without heads.",
}


def check_head_methods(methods: Sequence[str] | str | None) -> list[str]:
    """The methods asked for with ``heads=True``: None = every method of :data:`HEAD_METHODS`;
    a name with no per-head form raises :class:`~cmixlib.InputError` with the reason
    (:data:`NO_HEAD_FORM`) or, for an aggregated method (a rollout or flow across layers, which
    stays per layer), the per-layer method to ask for instead. Unknown names are returned as
    given, for the caller's name check to refuse.

    Examples
    --------
    >>> import torch, cmixlib
    >>> from cmixlib.methods.layer_math import check_head_methods
    >>> check_head_methods(None)
    ['attention', 'attn_norm', 'alti_layer', 'value_zeroing']
    >>> model = cmixlib.random_model("bert", layers=2, heads=4)
    >>> res = cmixlib.context_mixing(model, None, {"input_ids": torch.tensor([[1, 5, 6, 2]])},
    ...                              ["alti_layer", "value_zeroing"], heads=True)
    >>> res["alti_layer"].shape                          # (layers, heads, n, n)
    (2, 4, 4, 4)
    >>> check_head_methods("alti")                       # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cmixlib.validation.InputError: alti aggregates the per-layer maps of 'alti_layer' ...
    """
    if methods is None:
        return list(HEAD_METHODS)
    names = [methods] if isinstance(methods, str) else list(methods)
    for name in names:
        if not isinstance(name, str) or name in HEAD_METHODS or name not in ALL_METHODS:
            continue
        spec = ALL_METHODS[name]
        if spec.kind == "aggregated":
            base = spec.base
            instead = (f"for per-head layer maps ask for its per-layer method {base!r} with "
                       f"heads=True, or for {name!r} without heads." if base in HEAD_METHODS
                       else f"ask for {name!r} without heads; its per-layer method {base!r} "
                       f"has no per-head form either: {NO_HEAD_FORM.get(base, '')}")
            raise InputError(f"{name} aggregates the per-layer maps of {base!r} across layers "
                             f"and has no per-head form (it stays per layer): {instead}")
        reason = NO_HEAD_FORM.get(name, "no per-head definition")
        raise InputError(f"{name} has no per-head form: {reason} Methods with per-head maps: "
                         f"{', '.join(HEAD_METHODS)}.")
    return names


def head_attention(alpha: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head attention: A^h_ij = alpha^h_ij, (H, r, n) from ``alpha`` (H, n, n) at query
    rows ``rows`` (None: every row; a copy). Its mean over heads is :func:`attention_map`."""
    return (alpha if rows is None else alpha[:, rows, :]).clone()


def head_norms(alpha: torch.Tensor, head_out: torch.Tensor,
               rows: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head N: N^h_ij = ||alpha^h_ij f^h(x_j)||_2 = alpha^h_ij ||f^h(x_j)||_2 (alpha >= 0),
    (H, r, n), from ``alpha`` (H, n, n) and ``head_out`` f^h(x_j) (H, n, d), head h's value
    vector mapped through its slice W_O^h of the output projection, with head h's slice b_V^h
    of the value bias (the value bias is split by head as the value vector is; the output
    bias b_O is nobody's). The vectors add up to N's: F_ij = sum_h alpha^h_ij f^h(x_j), so
    N_ij <= sum_h N^h_ij (the triangle inequality), with equality for one head."""
    a = alpha if rows is None else alpha[:, rows, :]
    return a * vector_norms(head_out)[:, None, :]


#: Elements (heads x rows x sources x d) of the per-head vectors held at once by
#: :func:`head_alti` (one head's block of rows at a time).
HEAD_CHUNK_ELEMENTS = 2 ** 22


def head_alti(alpha: torch.Tensor, head_out: torch.Tensor,
              rows: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head ALTI (our definition: Ferrando et al. 2022 define ALTI per layer only, and
    their code has no per-head form): the ALTI proximity of head h's vectors to head h's own
    output, (H, r, n),

        c^h_ij = max(0, ||o^h_i||_1 - ||o^h_i - alpha^h_ij f^h(x_j)||_1),
        o^h_i = sum_j alpha^h_ij f^h(x_j) = W_O^h z^h_i   (head h's output, b_V^h inside),

    from ``alpha`` (H, n, n) and ``head_out`` f^h(x_j) (H, n, d). The vectors are read where
    the heads are separate, before the residual, b_O and any norm are added (the layer's ALTI
    reads y_i after them); row-normalising gives head h's contribution matrix. The same
    :func:`alti_contributions`, one head and block of rows at a time."""
    a = alpha if rows is None else alpha[:, rows, :]
    H, r, n = a.shape
    d = head_out.shape[-1]
    out = torch.empty(H, r, n, dtype=head_out.dtype, device=head_out.device)
    step = max(1, HEAD_CHUNK_ELEMENTS // (n * d))
    for h in range(H):
        for r0 in range(0, r, step):
            t = a[h, r0:r0 + step, :, None] * head_out[h][None]                # (c, n, d)
            out[h, r0:r0 + step] = alti_contributions(t.sum(dim=1), t)
    return out
