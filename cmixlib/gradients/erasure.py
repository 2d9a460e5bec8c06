r"""Erasure (blank-out) scores: how much the target's probability drops when a token is replaced.

Owns :func:`blank_out`:

.. math:: s_j = p(y \mid x) - p(y \mid x_{j \leftarrow r}),

with :math:`p` from :func:`.targets.target_probability` (for an MLM with a foil the softmax over
{target, foil} only, Value Zeroing §7), whatever score the target names. Used by Value Zeroing
(§7) and by ALTI on SVA.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ..validation import check_positive_int
from .layers import Level
from .targets import (GradientAttributionError, MLMTarget, ScoreModule, Target, _attribution_errors, _prepare,
                      _single, _token_id, special_positions, target_tensors)

__all__ = ["blank_out"]


@torch.no_grad()
def blank_out(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
              attention_mask: torch.Tensor | None = None, replacement: int | str = "unk",
              tokenizer: Any = None, skip_special: bool = True,
              batch_size: int | None = None) -> np.ndarray:
    r"""Erasure scores :math:`s_j = p(y \mid x) - p(y \mid x_{j \leftarrow r})`.

    Token j is replaced by ``replacement`` ([UNK] by default, as in the Value Zeroing paper;
    ``"mask"``, ``"pad"`` or an integer id; names need ``tokenizer`` unless the config knows the
    id). :math:`p` is :func:`target_probability`: the softmax over {target, foil} for an
    :class:`MLMTarget` with a foil (VZ §7), the full-vocabulary softmax without one, the softmax
    over classes for a :class:`ClassTarget` (whose ``class_index=None`` means the class predicted
    for the *unperturbed* input). The n perturbed copies run in one batched forward
    (``batch_size`` splits it).

    With ``skip_special`` (default), special positions (:func:`special_positions`) and the MLM
    target position get 0; with ``skip_special=False`` every attended position is blanked (ALTI's
    variant). Padded positions always get 0. Returns ``(n,)``; positive = the token helped.
    """
    with _attribution_errors():
        check_positive_int(batch_size, "batch_size", allow_none=True)
    ids, mask, (target,) = _prepare(model, _single(input_ids), attention_mask, [target])
    n = ids.shape[1]
    rid = _token_id(model, replacement, tokenizer, "blank-out replacement")
    score = ScoreModule(model, [target], score="prob")
    tg = target_tensors([target], ids.device)
    batch = torch.cat([ids, ids.repeat(n, 1)])
    batch[1 + torch.arange(n), torch.arange(n)] = rid
    masks = mask.repeat(n + 1, 1)
    step = batch_size or n + 1
    probs = torch.cat([score(batch[i:i + step], masks[i:i + step],
                             *(t.expand(len(batch[i:i + step])) for t in tg))
                       for i in range(0, n + 1, step)])
    scores = probs[0] - probs[1:]
    skip = torch.as_tensor(mask[0] == 0)
    if skip_special:
        skip = skip | torch.as_tensor(special_positions(ids, mask, tokenizer), device=ids.device)
        if isinstance(target, MLMTarget):
            skip[target.position] = True
    scores = torch.where(skip, torch.zeros_like(scores), scores)
    return scores.detach().to("cpu", torch.float64).numpy()


def _blank_out_method(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                      level: Level = "input", **options: Any) -> np.ndarray:
    """:func:`blank_out` as an entry of :data:`cmixlib.gradients.METHODS` (input level only)."""
    if level != "input":
        raise GradientAttributionError(
            "blank_out is only defined at level='input' (it perturbs input tokens).")
    return blank_out(model, input_ids, target, **options)
