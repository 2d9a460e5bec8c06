r"""The last encoder block's FFN at the scored row only: exact work saved in every gradient method.

An MLM score reads the final hidden state of the target position only, and the classification
heads of :data:`cmixlib.models.arch.FAMILIES` read that of the first token only. The FFN of a
Transformer block is position-wise, so in the **last** block it needs to run at that one row:
within :func:`target_row_ffn` the FFN input :math:`u` ``(B, n, d)`` of the last block becomes
:math:`u_{b,\mathrm{pos}_b}` ``(B, 1, d)``, and the block's post-FFN residual
:math:`\mathrm{LN}(\mathrm{FFN}(u_{\mathrm{pos}}) + u_j)` broadcasts over :math:`j`; its row
:math:`j = \mathrm{pos}_b` is the block's true output, every other row is unused (no gradient
flows through it). This saves about two thirds of the last block's work at every forward and
backward pass of IG, DeepLift and the plain gradients (:class:`.scores.ScoreModule`,
:class:`.layers.MLMTail`). :func:`first_row_head` checks a classifier's head on each call.

Owns :func:`last_ffn_in`, :func:`target_row_ffn`, :func:`first_row_head` (used by
:mod:`.scores`, :mod:`.layers`, :mod:`.captum_methods` and :mod:`.erasure`).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
from torch import nn

from cmixlib.gradients.targets import GradientAttributionError, MLMTarget, Target, output_logits
from cmixlib.models import arch


def last_ffn_in(model: nn.Module) -> nn.Module | None:
    """The FFN input layer of the last encoder block (:func:`cmixlib.models.arch.layer_parts`), or None
    where :func:`target_row_ffn` must not be used: a family cmixlib does not know, or a model
    that runs its FFN in sequence chunks (``chunk_size_feed_forward``)."""
    if int(getattr(model.config, "chunk_size_feed_forward", 0) or 0):
        return None
    try:
        return arch.layer_parts(model)[-1].ffn_in
    except (arch.UnsupportedModelError, AttributeError, KeyError):
        return None


@contextmanager
def target_row_ffn(ffn_in: nn.Module | None, position: torch.Tensor, n: int) -> Iterator[None]:
    r"""Within the block, the FFN input layer ``ffn_in`` of the last encoder block sees only row
    ``position[b]`` of each sequence: its input :math:`u` ``(B, n, d)`` becomes
    :math:`u_{b,\mathrm{pos}_b}` ``(B, 1, d)``. The block's post-FFN residual
    :math:`\mathrm{LN}(\mathrm{FFN}(u_{\mathrm{pos}}) + u_j)` then broadcasts over :math:`j`, which
    is the block's true output at :math:`j = \mathrm{pos}_b`, the only row the MLM score reads
    (every other row is unused, so no gradient flows through it). The FFN is position-wise, so
    this is exact; it saves about two thirds of the last block's work at every IG/DeepLift step.
    For a classifier ``position`` is 0: the heads of :data:`cmixlib.models.arch.FAMILIES` read the first
    token only (checked per call by :func:`first_row_head`). ``None``: nothing
    changes."""
    if ffn_in is None:
        yield
        return

    def pick(module, inputs):
        u = inputs[0]
        if u.dim() != 3 or u.shape[1] != n or u.shape[0] != position.shape[0]:
            raise GradientAttributionError(
                f"Unexpected FFN input of shape {tuple(u.shape)} in the last block (expected "
                f"({position.shape[0]}, {n}, d)): this layout is not supported here.")
        rows = u[torch.arange(u.shape[0], device=u.device), position][:, None]
        return (rows,) + tuple(inputs[1:])

    handle = ffn_in.register_forward_pre_hook(pick)
    try:
        yield
    finally:
        handle.remove()


def first_row_head(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                    targets: Sequence[Target], extras: dict | None = None) -> bool:
    """Whether :class:`.scores.ScoreModule` may run the last block's FFN at the scored row only
    (:func:`target_row_ffn`): always for an MLM (the score reads the target position);
    for a classifier if its logits on the batch's first row are unchanged by it (the heads of
    :data:`cmixlib.models.arch.FAMILIES` read the first token; a head that reads more fails the check
    and runs in full). ``extras``: the batch's extra inputs (``token_type_ids``...)."""
    ffn = last_ffn_in(model)
    if ffn is None or isinstance(targets[0], MLMTarget):
        return ffn is not None
    kw = {k: v[:1] for k, v in (extras or {}).items()}
    with torch.no_grad():
        want = output_logits(model(input_ids=ids[:1], attention_mask=mask[:1], **kw))
        first = torch.zeros(1, dtype=torch.long, device=ids.device)
        with target_row_ffn(ffn, first, ids.shape[1]):
            got = output_logits(model(input_ids=ids[:1], attention_mask=mask[:1], **kw))
    tol = 1e-4 if got.dtype == torch.float32 else 1e-8      # as .layers.check_tail
    return bool(torch.allclose(got, want, rtol=tol, atol=tol))
