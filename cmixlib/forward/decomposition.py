"""The per-source decomposition of an attention block, one definition for post-LN encoders
(:class:`cmixlib.forward.encoder.LayerState`) and pre-LN decoders
(:class:`cmixlib.forward.decoder.DecoderLayerState`), read from their capture points
``attn_weights`` (alpha) and ``head_out`` (f^h(x_j)) and ``resid_in`` (x_i)::

    F_ij = sum_h alpha^h_ij f^h(x_j)         what token j sends to token i through attention
    z_ij = F_ij + delta_ij x_i               the same with the residual on the diagonal

The two families differ in what f^h reads (an encoder's x_j, a decoder's LN1(x_j)) and in the
norms around the block, not in these sums: the methods of :mod:`cmixlib.methods` build on them.
"""
from __future__ import annotations

import torch

__all__ = ["attention_vectors", "add_residual"]


def attention_vectors(alpha: torch.Tensor, head_out: torch.Tensor) -> torch.Tensor:
    """F_ij = sum_h alpha^h_ij f^h(x_j), (r, s, d), from the weights ``alpha`` (H, r, s) of r
    query rows over s sources and the head outputs ``head_out`` (H, s, d) of those sources.

    Batched over j: (s, r, H) @ (s, H, d) -> (s, r, d); contiguous operands make ``bmm``
    several times faster on CPU (the same values)."""
    out = torch.bmm(alpha.permute(2, 1, 0).contiguous(), head_out.transpose(0, 1).contiguous())
    return out.transpose(0, 1)


def add_residual(z: torch.Tensor, x_rows: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """z_ij = F_ij + delta_ij x_i, **in place** on ``z`` = F (r, s, d) of query rows ``rows``
    (r,), whose own position i = rows[k] receives x_i = ``x_rows[k]``; returns ``z``."""
    z[torch.arange(len(rows), device=z.device), rows] += x_rows
    return z
