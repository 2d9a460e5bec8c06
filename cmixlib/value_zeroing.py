"""Value Zeroing (Mohebbi et al. 2023), computed exactly in one batched pass per layer.

Definition (pinned to the paper and the authors' code): for layer l, token j and every query i
(including i = j), zero j's value vector in all heads, bias included, after the attention weights
are computed (queries and keys untouched, weights not renormalised); re-run only layer l from its
original input; C^l[i, j] = distance(o~_i^(not j), o_i). The diagonal is kept. Rows are
normalised by the caller.

Exact batched form: zeroing v_j removes exactly F_ij = sum_h alpha^h_ij f^h(x_j) from the LN1
input of every query, so p~_i^(not j) = p_i - F_ij. All n x n perturbed LN1 inputs are formed at
once and pushed through LN1, the FFN and LN2 as one large matrix batch: the n^2 FFN evaluations
that any implementation needs, without re-running queries, keys, softmax or the value projection
n times.
"""
from __future__ import annotations

import torch

from .encoder import LayerState

DISTANCES = ("cosine", "euclidean", "spearman")

# elements of the largest (rows * n, d_ff) intermediate tensor in one chunk
CHUNK_ELEMENTS = 2 ** 25


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 - cos(a, b) over the last axis, computed as ||a/|a| - b/|b|||^2 / 2.

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


@torch.no_grad()
def value_zeroing_layer(st: LayerState, distance: str = "cosine", standardize=None,
                        chunk_elements: int = CHUNK_ELEMENTS) -> torch.Tensor:
    """Raw Value Zeroing distances of one layer for the selected rows: (r, n), diagonal kept.

    C[i, j] = distance(LN2(FFN(y~) + y~), o_i) with y~ = LN1(p_i - F_ij); o_i is the layer output
    recomputed through the same path (identical to the model's output up to rounding).
    """
    try:
        dist_fn = DISTANCE_FUNCTIONS[distance]
    except KeyError:
        raise ValueError(f"Unknown Value Zeroing distance {distance!r}; choose one of {DISTANCES}.") from None
    m = st.mods
    rows = st.row_index
    n, d = st.x.shape
    p = st.ln1_input[rows]                                  # (r, d)
    original = st.recompute_output()[rows]                  # (r, d)
    stdz = _standardizer(st, standardize)
    if stdz is not None:
        original = (original - stdz[0]) / stdz[1]
    d_ff = m.ffn_in.out_features
    step = max(1, chunk_elements // (n * max(d_ff, d)))
    out = torch.empty(len(rows), n, dtype=st.x.dtype, device=st.x.device)
    for start in range(0, len(rows), step):
        sl = slice(start, start + step)
        fvec = st.attn_vectors_for(rows[sl])       # (c, n, d), per chunk so memory stays bounded
        pert = (p[sl, None, :] - fvec).reshape(-1, d)                          # (c*n, d)
        y = m.ln1(pert)
        o = m.ln2(m.ffn_out(m.act(m.ffn_in(y))) + y).view(-1, n, d)
        if stdz is not None:
            o = (o - stdz[0]) / stdz[1]
        out[sl] = dist_fn(o, original[sl, None, :])
    return out
