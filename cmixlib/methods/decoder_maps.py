"""The layer-wise maps of a pre-LN decoder LM, exact and causal, each from one layer's captured
state (:class:`~cmixlib.forward.decoder.DecoderLayerState`, notation of
:mod:`cmixlib.forward.decoder`: x_i resid_in, u_j = LN1(x_j), F_ij = sum_h alpha^h_ij f^h(x_j),
m_i = x_i + sum_j F_ij + b_O resid_mid). Every map is (n, n), row i the receiving token, column
j <= i the source; entries j > i are exactly 0 (multiplied by the causal mask, so rounding can
never leak above the diagonal).

The math is an encoder's, in the same functions: attention, N, N-Res, ALTI and the fixed
residuals call :mod:`cmixlib.methods.layer_math` (which tabulates the tensors each family
passes) on F_ij of :func:`cmixlib.forward.decomposition.attention_vectors`; the rollouts are
:mod:`cmixlib.methods.aggregation`'s. Value Zeroing's layer is
:mod:`cmixlib.methods.value_zeroing_decoder` (its distances and standardisation are shared too).

Memory (streamed): the per-source vectors F_ij (n x n x d per layer) exist only as blocks of
rows of :data:`VECTOR_CHUNK_ELEMENTS` elements (:func:`vector_maps`), and
:func:`cmixlib.methods.decoder.decoder_context_mixing` releases a layer's derived tensors before
the next.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from cmixlib.forward.decoder import DecoderCapture, DecoderLayerState, run_decoder
from cmixlib.forward import decomposition
from cmixlib.methods import aggregation, layer_math
from cmixlib.methods.value_zeroing_decoder import value_zeroing_heads

__all__ = ["causal_mask", "attention_mean", "VECTOR_METHODS", "VECTOR_CHUNK_ELEMENTS",
           "vector_maps", "attn_norm", "attn_norm_res", "alti_layer", "w_fixedres",
           "n_fixedres", "LAYER_FUNCTIONS", "alti_rollout", "attention_heads",
           "attn_norm_heads", "alti_heads", "HEAD_FUNCTIONS", "decoder_head_maps"]


def causal_mask(n: int, like: torch.Tensor) -> torch.Tensor:
    """The (n, n) lower-triangular 0/1 mask (1 for j <= i) in ``like``'s dtype and device."""
    return torch.ones(n, n, dtype=like.dtype, device=like.device).tril_()


def attention_mean(st: DecoderLayerState) -> torch.Tensor:
    """A_ij = (1/H) sum_h alpha^h_ij, (n, n), 0 for j > i
    (:func:`cmixlib.methods.layer_math.attention_map`)."""
    a = layer_math.attention_map(st.attn_weights)
    return a * causal_mask(st.n, a)


#: Methods read from the per-source vectors F_ij (computed in row blocks, never all at once).
VECTOR_METHODS = ("attn_norm", "attn_norm_res", "alti_layer")
#: Elements (rows x sources x d) of one block of per-source vectors held at once: peak memory
#: of the vector methods is one block, not the layer's n x n x d (nor L of them).
VECTOR_CHUNK_ELEMENTS = 2 ** 22


def vector_maps(st: DecoderLayerState, names: Sequence[str] = VECTOR_METHODS
                ) -> dict[str, torch.Tensor]:
    """N, N-Res and ALTI of one layer (any of :data:`VECTOR_METHODS`), (n, n) each, 0 above the
    diagonal, from the per-source vectors F_ij = sum_h alpha^h_ij f^h(x_j) of a block of rows
    at a time (at most :data:`VECTOR_CHUNK_ELEMENTS` elements; sources j <= the block's last
    row only):

    - N: ||F_ij||_2;  N-Res: ||z_ij||_2, z_ij = F_ij + delta_ij x_i
      (:func:`cmixlib.methods.layer_math.vector_norms`);
    - ALTI: c_ij = max(0, ||m_i||_1 - ||m_i - z_ij||_1), m_i = resid_mid (r b_O included)
      (:func:`cmixlib.methods.layer_math.alti_contributions`)."""
    n, d = st.n, st.resid_in.shape[-1]
    like = st.resid_in
    out = {m: torch.zeros(n, n, dtype=like.dtype, device=like.device) for m in names}
    step = max(1, VECTOR_CHUNK_ELEMENTS // (n * d))
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        rows = torch.arange(r0, r1, device=like.device)
        z = decomposition.attention_vectors(st.attn_weights[:, r0:r1, :r1],
                                            st.head_out[:, :r1])                    # (r, s, d)
        if "attn_norm" in out:
            out["attn_norm"][r0:r1, :r1] = layer_math.vector_norms(z)
        if "attn_norm_res" in out or "alti_layer" in out:
            z = decomposition.add_residual(z, st.resid_in[rows], rows)
        if "attn_norm_res" in out:
            out["attn_norm_res"][r0:r1, :r1] = layer_math.vector_norms(z)
        if "alti_layer" in out:
            out["alti_layer"][r0:r1, :r1] = layer_math.alti_contributions(st.resid_mid[r0:r1], z)
    mask = causal_mask(n, like)
    return {m: v * mask for m, v in out.items()}


def attn_norm(st: DecoderLayerState) -> torch.Tensor:
    """N: ||F_ij||_2 = ||sum_h alpha^h_ij f^h(x_j)||_2, f^h from u_j = LN1(x_j), (n, n)."""
    return vector_maps(st, ("attn_norm",))["attn_norm"]


def attn_norm_res(st: DecoderLayerState) -> torch.Tensor:
    """N-Res: ||F_ij + delta_ij x_i||_2 (the un-normalised residual x_i on the diagonal)."""
    return vector_maps(st, ("attn_norm_res",))["attn_norm_res"]


def alti_layer(st: DecoderLayerState) -> torch.Tensor:
    """ALTI: c_ij = max(0, ||m_i||_1 - ||m_i - z_ij||_1), m_i = resid_mid (b_O included),
    z_ij = F_ij + delta_ij x_i; (n, n), un-normalised (rows are normalised by the caller)."""
    return vector_maps(st, ("alti_layer",))["alti_layer"]


def fixed_residual(mat: torch.Tensor) -> torch.Tensor:
    """0.5 rownorm(mat) + 0.5 I (:func:`cmixlib.methods.layer_math.fixed_residual`, every row)."""
    return layer_math.fixed_residual(mat, torch.arange(mat.shape[0], device=mat.device), 0.5)


def w_fixedres(st: DecoderLayerState) -> torch.Tensor:
    """W-FixedRes: 0.5 A + 0.5 I."""
    return fixed_residual(attention_mean(st))


def n_fixedres(st: DecoderLayerState) -> torch.Tensor:
    """N-FixedRes: 0.5 N / rowsum(N) + 0.5 I."""
    return fixed_residual(attn_norm(st))


#: The layer-wise methods of a decoder other than Value Zeroing: name -> function of a
#: :class:`~cmixlib.forward.decoder.DecoderLayerState` giving its un-normalised (n, n) map.
LAYER_FUNCTIONS = {
    "attention": attention_mean,
    "attn_norm": attn_norm,
    "attn_norm_res": attn_norm_res,
    "alti_layer": alti_layer,
    "w_fixedres": w_fixedres,
    "n_fixedres": n_fixedres,
}


def alti_rollout(capture: DecoderCapture) -> np.ndarray:
    """R^l = C~^l C~^(l-1) ... C~^0 with C~ the row-normalised ALTI maps, (L, n, n) float64."""
    maps = []
    for st in capture.layers:
        maps.append(alti_layer(st))
        st.release()
    return aggregation.rollout(torch.stack(maps).double().cpu().numpy(), add_identity=False,
                               normalize=True)


# --------------------------------------------------------------------------- per-head maps
def attention_heads(st: DecoderLayerState) -> torch.Tensor:
    """A^h_ij = alpha^h_ij, (H, n, n), 0 for j > i; its mean over heads is
    :func:`attention_mean`."""
    a = layer_math.head_attention(st.attn_weights)
    return a * causal_mask(st.n, a)


def attn_norm_heads(st: DecoderLayerState) -> torch.Tensor:
    """N^h_ij = ||alpha^h_ij f^h(x_j)||_2, f^h(x_j) = r (u_j W_V^g(h) + b_V^g(h)) W_O^h,
    (H, n, n), 0 for j > i; N_ij <= sum_h N^h_ij (:func:`cmixlib.methods.layer_math.head_norms`)."""
    a = layer_math.head_norms(st.attn_weights, st.head_out)
    return a * causal_mask(st.n, a)


def alti_heads(st: DecoderLayerState) -> torch.Tensor:
    """c^h_ij = max(0, ||o^h_i||_1 - ||o^h_i - alpha^h_ij f^h(x_j)||_1), o^h_i = sum_j
    alpha^h_ij f^h(x_j) what head h writes to the residual (before b_O), (H, n, n), 0 for
    j > i (our definition, :func:`cmixlib.methods.layer_math.head_alti`)."""
    a = layer_math.head_alti(st.attn_weights, st.head_out)
    return a * causal_mask(st.n, a)


#: The per-head layer maps of a decoder: name -> function of a layer state and the options
#: giving the un-normalised (H, n, n) map.
HEAD_FUNCTIONS = {
    "attention": lambda st, options: attention_heads(st),
    "attn_norm": lambda st, options: attn_norm_heads(st),
    "alti_layer": lambda st, options: alti_heads(st),
    "value_zeroing": lambda st, options: value_zeroing_heads(st, options["vz_distance"],
                                                             options["vz_standardize"]),
}


@torch.no_grad()
def decoder_head_maps(model: torch.nn.Module, ids: torch.Tensor, methods: Sequence[str],
                      rows: np.ndarray | None, options: dict) -> dict[str, np.ndarray]:
    """Per-head maps (L, H, n, n) of ``methods`` (names of :data:`HEAD_FUNCTIONS`) for one
    unpadded sentence ``ids``: each head's rows normalised with ``options["normalize"]``, rows
    other than ``rows`` NaN (None: every row); layers streamed as in
    :func:`cmixlib.methods.decoder.decoder_context_mixing`."""
    cap = run_decoder(model, ids)
    raw: dict[str, list] = {name: [] for name in methods}
    for st in cap.layers:
        for name in methods:
            raw[name].append(HEAD_FUNCTIONS[name](st, options))
        st.release()
    out = {}
    for name, maps in raw.items():
        maps = torch.stack(maps).cpu().numpy()
        maps = aggregation.normalize_rows(maps) if options["normalize"] else maps
        if rows is not None:
            full = np.full_like(maps, np.nan)
            full[..., rows, :] = maps[..., rows, :]
            maps = full
        out[name] = maps
    return out
