r"""The scored function :math:`\phi` as captum differentiates it: :class:`ScoreModule` runs the
model's real forward and returns each row's :func:`~cmixlib.gradients.targets.target_score`,
computed only where it is needed: an MLM from the final hidden state of the target position only,
:math:`\lambda_t = \mathrm{transform}(o_{pos})\cdot W_t + b_t` (:func:`mlm_score`), a classifier
from its logits (:func:`class_score`); the last block's FFN may run at the scored row only
(``cmixlib.gradients.target_rows``, internal). :func:`target_tensors` gives its extra arguments.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from cmixlib.gradients.target_rows import last_ffn_in, target_row_ffn
from cmixlib.gradients.targets import MLMTarget, Target, output_logits
from cmixlib.models import arch

__all__ = ["ScoreModule", "target_tensors", "mlm_score", "class_score"]


def target_tensors(targets: Sequence[Target], device: torch.device) -> tuple[torch.Tensor, ...]:
    """``(position, target_or_class, foil)`` as ``(B,)`` long tensors (-1 where unused): the
    extra arguments of :class:`ScoreModule` (captum's ``additional_forward_args``)."""
    if isinstance(targets[0], MLMTarget):
        rows = [(t.position, t.target_id, -1 if t.foil_id is None else t.foil_id) for t in targets]
    else:
        rows = [(0, t.class_index, -1) for t in targets]
    return tuple(torch.tensor(col, dtype=torch.long, device=device) for col in zip(*rows))


def mlm_score(model: nn.Module, hidden: torch.Tensor, position: torch.Tensor, target: torch.Tensor,
               foil: torch.Tensor, kind: str) -> torch.Tensor:
    """:func:`~cmixlib.gradients.targets.target_score` from the final hidden states ``(B, n, d)``, at ``position`` only."""
    transform, decoder = arch.mlm_head(model)
    h = transform(hidden[torch.arange(hidden.shape[0], device=hidden.device), position])  # (B, d')
    if kind == "prob" and bool((foil < 0).any()):          # full-vocabulary softmax
        return torch.softmax(decoder(h), dim=-1).gather(1, target[:, None])[:, 0]

    def logit(ids: torch.Tensor) -> torch.Tensor:
        z = (h * decoder.weight[ids]).sum(-1)
        return z if decoder.bias is None else z + decoder.bias[ids]

    zt = logit(target)
    if kind == "logit":
        return zt
    return zt - logit(foil) if kind == "logit_diff" else torch.sigmoid(zt - logit(foil))


def class_score(logits: torch.Tensor, cls: torch.Tensor, kind: str) -> torch.Tensor:
    r"""A classifier's :math:`\phi` per row: the logit (``kind="logit"``) or the softmax
    probability of class ``cls[b]``."""
    idx = cls[:, None]
    return (logits if kind == "logit" else torch.softmax(logits, dim=-1)).gather(1, idx)[:, 0]


class ScoreModule(nn.Module):
    """``f(input_ids, attention_mask, position, target, foil, *extras) -> (B,)``: the model's real
    forward and the score of each row's target (:func:`~cmixlib.gradients.targets.target_score`; for an MLM the base model,
    then the head at the target position only). ``position, target, foil`` come from
    :func:`target_tensors`; ``extras`` are the extra inputs named ``extra_names`` (e.g.
    ``("token_type_ids",)``), passed to the model's forward (captum expands them with the batch
    as it does the mask); ``score`` overrides the targets' score kind (blank-out: ``"prob"``).
    ``target_rows_only``: the last block's FFN runs at the scored row only
    (``target_rows.target_row_ffn``; exact, for heads that read only that row)."""

    def __init__(self, model: nn.Module, targets: Sequence[Target], score: str | None = None,
                 target_rows_only: bool = False, extra_names: Sequence[str] = ()):
        super().__init__()
        self.model = model
        self.mlm = isinstance(targets[0], MLMTarget)
        self.kind = score or targets[0].resolved_score()
        self.last_ffn_in = last_ffn_in(model) if target_rows_only else None
        self.extra_names = tuple(extra_names)

    def forward(self, input_ids, attention_mask, position, target, foil, *extras) -> torch.Tensor:
        # position: the MLM target's row; a classifier's head reads row 0 (target_rows_only)
        rows = position if self.mlm else torch.zeros_like(position)
        kw = dict(zip(self.extra_names, extras, strict=True))
        with target_row_ffn(self.last_ffn_in, rows, input_ids.shape[1]):
            if self.mlm:
                hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                               **kw)[0]
                return mlm_score(self.model, hidden, position, target, foil, self.kind)
            logits = output_logits(self.model(input_ids=input_ids, attention_mask=attention_mask, **kw))
        return class_score(logits, target, self.kind)
