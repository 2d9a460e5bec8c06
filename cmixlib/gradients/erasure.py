r"""Erasure (blank-out) scores: how much the target's probability drops when a token is replaced.

Owns :func:`blank_out` (and ``blank_out_batch``, several sequences in one forward):

.. math:: s_j = p(y \mid x) - p(y \mid x_{j \leftarrow r}),

with :math:`p` from :func:`.targets.target_probability` (for an MLM with a foil the softmax over
{target, foil} only, Value Zeroing §7), whatever score the target names. Used by Value Zeroing
(§7) and by ALTI on SVA.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from cmixlib.validation import check_positive_int
from cmixlib.gradients.layers import Level
from cmixlib.gradients.target_rows import first_row_head
from cmixlib.gradients.scores import ScoreModule, target_tensors
from cmixlib.gradients.targets import (GradientAttributionError, MLMTarget, Target,
                                       attribution_errors, extra_inputs, prepare_batch,
                                       single_sequence, special_positions, token_id)

__all__ = ["blank_out", "blank_out_batch"]


@torch.no_grad()
def blank_out(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
              attention_mask: torch.Tensor | None = None, replacement: int | str = "unk",
              tokenizer: Any = None, skip_special: bool = True,
              batch_size: int | None = None, token_type_ids: torch.Tensor | None = None,
              position_ids: torch.Tensor | None = None) -> np.ndarray:
    r"""Erasure scores :math:`s_j = p(y \mid x) - p(y \mid x_{j \leftarrow r})`.

    Token j is replaced by ``replacement`` ([UNK] by default, as in the Value Zeroing paper;
    ``"mask"``, ``"pad"`` or an integer id; names need ``tokenizer`` unless the config knows the
    id). :math:`p` is :func:`target_probability`: the softmax over {target, foil} for an
    :class:`MLMTarget` with a foil (VZ §7), the full-vocabulary softmax without one, the softmax
    over classes for a :class:`ClassTarget` (whose ``class_index=None`` means the class predicted
    for the *unperturbed* input). The n perturbed copies run in one batched forward
    (``batch_size`` splits it); ``blank_out_batch`` does the same for several sequences.

    With ``skip_special`` (default), special positions (:func:`special_positions`) and the MLM
    target position get 0; with ``skip_special=False`` every attended position is blanked (ALTI's
    variant). Padded positions always get 0. ``token_type_ids`` / ``position_ids`` (optional, a
    sentence pair's segment ids) go to every forward, the erased copies keeping them. Returns
    ``(n,)``; positive = the token helped.
    """
    return blank_out_batch(model, single_sequence(input_ids), [target], attention_mask=attention_mask,
                           replacement=replacement, tokenizer=tokenizer,
                           skip_special=skip_special, batch_size=batch_size,
                           token_type_ids=token_type_ids, position_ids=position_ids)[0]


@torch.no_grad()
def blank_out_batch(model: nn.Module, input_ids: torch.Tensor, targets: Sequence[Target], *,
                    attention_mask: torch.Tensor | None = None, replacement: int | str = "unk",
                    tokenizer: Any = None, skip_special: bool = True,
                    batch_size: int | None = None, token_type_ids: torch.Tensor | None = None,
                    position_ids: torch.Tensor | None = None) -> np.ndarray:
    r"""Erasure scores of every sequence of a padded batch,
    :math:`s_{bj} = p(y_b \mid x_b) - p(y_b \mid x_{b,\, j \leftarrow r})`, as :func:`blank_out`
    for each row b with its own target: ``(B, n)``, 0 at padded (and, with ``skip_special``,
    special and target) positions.

    The originals and one erased copy per real token (padded positions are not erased) run
    shortest first in padded forwards (``batch_size``: at most that many sequences per forward;
    with right padding, each forward is cut to its longest sequence); an MLM is scored only at each
    row's target position, on the target and foil logits (:class:`ScoreModule`), and the last
    block's FFN runs at the scored row only (:func:`.target_rows.first_row_head`). Each score
    equals :func:`blank_out` of that row alone up to float rounding (the same computation in
    larger matrix products).

    ``input_ids``: ``(B, n)`` integer tensor; ``targets``: one target per row, all of one kind
    (:class:`MLMTarget` or :class:`ClassTarget`) and score; ``attention_mask``: ``(B, n)`` of
    0/1 (None: every position); ``token_type_ids`` / ``position_ids``: ``(B, n)`` or None, passed
    to the model with each row (and its erased copies). Raises :class:`GradientAttributionError`
    otherwise.
    """
    with attribution_errors():
        check_positive_int(batch_size, "batch_size", allow_none=True)
    ids, mask, targets, extras = prepare_batch(model, input_ids, attention_mask, list(targets),
                                          extra_inputs(token_type_ids, position_ids))
    B, n = ids.shape
    rid = token_id(model, replacement, tokenizer, "blank-out replacement")
    # the head reads one row (the target, or a classifier's first token): the last block's FFN
    # runs at that row only where that is checked to change nothing (.target_rows)
    score = ScoreModule(model, targets, score="prob", extra_names=tuple(extras),
                        target_rows_only=first_row_head(model, ids, mask, targets, extras))
    tg = target_tensors(targets, ids.device)                 # (B,) each
    # the B originals, then one copy per real token (b, j) with token j replaced
    bj = (mask != 0).nonzero()                               # (C, 2), by b then j
    src = torch.cat([torch.arange(B, device=ids.device), bj[:, 0]])
    seqs = ids[src]
    seqs[B + torch.arange(len(bj), device=ids.device), bj[:, 1]] = rid
    lengths = mask.sum(dim=1)
    right = torch.equal(mask != 0, torch.arange(n, device=ids.device)[None] < lengths[:, None])
    order = torch.argsort(lengths[src], stable=True)          # shortest first: little padding
    step = batch_size or len(src)
    probs = None
    for i in range(0, len(src), step):
        rows = order[i:i + step]
        width = int(lengths[src[rows]].max()) if right else n
        p = score(seqs[rows, :width], mask[src[rows], :width], *(a[src[rows]] for a in tg),
                  *(e[src[rows], :width] for e in extras.values()))
        probs = p.new_empty(len(src)) if probs is None else probs
        probs[rows] = p
    scores = probs.new_zeros(B, n)
    scores[bj[:, 0], bj[:, 1]] = probs[bj[:, 0]] - probs[B:]   # (B, n), 0 where padded
    skip = mask == 0
    if skip_special:
        special = np.stack([special_positions(ids[b], mask[b], tokenizer) for b in range(B)])
        skip = skip | torch.as_tensor(special, device=ids.device)
        for b, target in enumerate(targets):
            if isinstance(target, MLMTarget):
                skip[b, target.position] = True
    scores = torch.where(skip, torch.zeros_like(scores), scores)
    return scores.detach().to("cpu", torch.float64).numpy()


def blank_out_method(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                      level: Level = "input", **options: Any) -> np.ndarray:
    """:func:`blank_out` as an entry of :data:`cmixlib.gradients.METHODS` (input level only)."""
    if level != "input":
        raise GradientAttributionError(
            "blank_out is only defined at level='input' (it perturbs input tokens).")
    return blank_out(model, input_ids, target, **options)
