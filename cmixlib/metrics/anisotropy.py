r"""Anisotropy: how much a set of vectors points one way (ALTI's Figure 3, Ferrando et al. 2022).

The anisotropy of a set of vectors :math:`v_1..v_N` is their mean pairwise cosine similarity
(Ethayarajh 2019): near 1 when they all lie close to one line, near 0 when their directions are
spread. With unit vectors :math:`u_k = v_k / \lVert v_k \rVert`, the mean over the
:math:`N(N-1)` ordered pairs of distinct vectors has a closed form:

.. math::

    \bar c = \frac{1}{N(N-1)} \sum_{j \ne k} u_j \cdot u_k
           = \frac{\lVert \sum_k u_k \rVert^2 - N}{N(N-1)},

since :math:`\lVert \sum_k u_k \rVert^2 = \sum_k \lVert u_k \rVert^2 + \sum_{j \ne k} u_j \cdot u_k`.
It is the exact expectation of the estimator in ALTI's code (the cosine of *one* random pair of
distinct positions per sentence), so no sampling is needed here.

Three sets of vectors per sentence, with the notation of :mod:`cmixlib.forward.encoder`:

* **hidden**: the token representations, layers 0..L (0 = the embedding output, l = layer l's
  output :math:`o_i`): the solid lines of ALTI's code;
* **transformed**: for each query i of layer l, the transformed vectors
  :math:`T_i(x_j),\ j = 1..n` (the LN1-linear part of :math:`z_{ij} = \sum_h \alpha^h_{ij}
  f^h(x_j) + [i=j]\, x_i`, :attr:`LayerState.ln1_vectors <cmixlib.forward.encoder.LayerState.ln1_vectors>`),
  then the mean over queries: the dashed lines. The scale :math:`\sigma(p_i)` of query i divides
  all of its vectors alike, so it does not change a cosine;
* **attn_output**: the attention-block outputs :math:`y_i = \mathrm{LN1}(p_i) = \sum_j T_i(x_j)
  + \gamma_1 \odot (b_O - \mu(b_O)) / \sigma(p_i) + \beta_1` of layer l: what the caption of
  Figure 3 names ("attention block output representations"), which the code replaces by the
  hidden states.

``include_special=False`` leaves out the first and the last position (``[CLS]``/``[SEP]``, or
``<s>``/``</s>``) as vectors and, for the transformed vectors, as queries; ALTI's code keeps them.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from cmixlib.forward.encoder import (Capture, LayerParts, LayerState, encoder_layers, layer_states,
                                     run_and_capture)

__all__ = ["mean_pairwise_cosine", "kept_positions", "hidden_states", "token_anisotropy",
           "transformed_anisotropy", "attn_output_anisotropy", "capture_anisotropy",
           "sentence_anisotropy", "KINDS"]

#: The three sets of vectors whose anisotropy is measured (see the module docstring).
KINDS = ("hidden", "attn_output", "transformed")


def mean_pairwise_cosine(vectors: torch.Tensor) -> torch.Tensor:
    r"""Mean cosine similarity over the ordered pairs of distinct vectors, batched.

    ``vectors``: ``(..., N, d)``; returns ``(...)`` (float64):

    .. math:: \bar c = \frac{\lVert \sum_k u_k \rVert^2 - N}{N(N-1)}, \quad
              u_k = v_k / \lVert v_k \rVert.

    Refuses fewer than 2 vectors (no pair) and zero or non-finite vectors (no direction).
    """
    if vectors.dim() < 2:
        raise ValueError(f"mean_pairwise_cosine expects (..., N, d) vectors, got shape {tuple(vectors.shape)}")
    n = vectors.shape[-2]
    if n < 2:
        raise ValueError(f"mean_pairwise_cosine needs at least 2 vectors per set (a pair), got N = {n}; "
                         "use longer inputs or keep the special tokens")
    v = vectors.double()
    if not torch.isfinite(v).all():
        raise ValueError("mean_pairwise_cosine: the vectors contain NaN or inf")
    norms = v.norm(dim=-1, keepdim=True)
    if (norms == 0).any():
        raise ValueError("mean_pairwise_cosine: a zero vector has no direction (its cosine is "
                         "undefined); leave it out of the set")
    s = (v / norms).sum(dim=-2)
    return ((s * s).sum(dim=-1) - n) / (n * (n - 1))


def kept_positions(n: int, include_special: bool = True, device=None) -> torch.Tensor:
    """Positions ``0..n-1`` of a sentence, or ``1..n-2`` without the first and last (special)
    tokens."""
    return torch.arange(0 if include_special else 1, n if include_special else n - 1, device=device)


def hidden_states(capture: Capture, b: int, keep: torch.Tensor) -> torch.Tensor:
    """``(L+1, n, d)``: sentence ``b``'s token representations at positions ``keep``: the
    embedding output (layer 0's input) and the output :math:`o_i` of every layer."""
    return torch.stack([capture.inputs[0][b, keep]] + [o[b, keep] for o in capture.outputs])


def token_anisotropy(hidden: torch.Tensor, include_special: bool = True) -> torch.Tensor:
    r"""``(L+1,)``: :math:`\bar c` of each layer's token representations ``hidden``
    ``(L+1, n, d)`` (:func:`mean_pairwise_cosine` over the n tokens)."""
    keep = kept_positions(hidden.shape[-2], include_special, hidden.device)
    return mean_pairwise_cosine(hidden[..., keep, :])


def _check_rows(state: LayerState, keep: torch.Tensor) -> None:
    if not torch.equal(state.row_index, keep):
        raise ValueError("the LayerState's rows must be the kept positions: build it with "
                         "rows=kept_positions(n, include_special)")


def transformed_anisotropy(state: LayerState, include_special: bool = True,
                           per_query: bool = False) -> torch.Tensor:
    r"""For each query i, :math:`\bar c_i` of its transformed vectors :math:`\{T_i(x_j)\}_j`
    (:attr:`LayerState.ln1_vectors`); ``per_query=True``: ``(r,)`` over the state's rows, else
    their mean :math:`\frac{1}{r}\sum_i \bar c_i` (a scalar). Without the special tokens the
    state's ``rows`` must be ``kept_positions(n, False)``."""
    keep = kept_positions(state.n, include_special, state.x.device)
    if not include_special:
        _check_rows(state, keep)
    c = mean_pairwise_cosine(state.ln1_vectors[:, keep, :])       # (r,)
    return c if per_query else c.mean()


def attn_output_anisotropy(state: LayerState, include_special: bool = True) -> torch.Tensor:
    r""":math:`\bar c` (a scalar) of the layer's attention-block outputs :math:`y_i` (LN1
    outputs) at the kept positions."""
    keep = kept_positions(state.n, include_special, state.x.device)
    return mean_pairwise_cosine(state.ln1_output[keep])


@torch.no_grad()
def capture_anisotropy(capture: Capture, mods: Sequence[LayerParts], b: int, keep: torch.Tensor,
                       include_special: bool = True) -> dict[str, torch.Tensor]:
    r"""The three anisotropies of sentence ``b`` of a captured (padded) batch, cropped to its
    real positions ``keep`` (:func:`cmixlib.forward.encoder.iter_sentences`):
    ``{"hidden": (L+1,), "attn_output": (L,), "transformed": (L, r)}``, the last per query i
    (r = the number of kept positions) for the caller to average."""
    n = len(keep)
    rows = None if include_special else kept_positions(n, False, keep.device)
    states = layer_states(capture, list(mods), b, keep, rows=rows)
    return {"hidden": token_anisotropy(hidden_states(capture, b, keep), include_special),
            "attn_output": torch.stack([attn_output_anisotropy(st, include_special) for st in states]),
            "transformed": torch.stack([transformed_anisotropy(st, include_special, per_query=True)
                                        for st in states])}


def sentence_anisotropy(model: torch.nn.Module, input_ids: torch.Tensor, include_special: bool = True,
                        per_query: bool = False) -> dict[str, torch.Tensor]:
    r"""The anisotropies of one sentence (``input_ids`` ``(n,)`` or ``(1, n)``, no padding):
    ``"hidden"`` ``(L+1,)`` (layers 0..L), ``"attn_output"`` ``(L,)`` and ``"transformed"``
    ``(L,)`` (layers 1..L; the mean over queries i of :math:`\bar c_i`, or ``(L, r)`` per query
    with ``per_query=True``). See the module docstring for the three sets of vectors."""
    ids = input_ids if input_ids.dim() == 2 else input_ids[None]
    if ids.shape[0] != 1:
        raise ValueError(f"sentence_anisotropy takes one sentence, got a batch of {ids.shape[0]}; "
                         "use capture_anisotropy for padded batches")
    cap = run_and_capture(model, ids)
    keep = torch.arange(ids.shape[1], device=cap.inputs[0].device)
    out = capture_anisotropy(cap, encoder_layers(model), 0, keep, include_special)
    if not per_query:
        out["transformed"] = out["transformed"].mean(dim=-1)
    return out
