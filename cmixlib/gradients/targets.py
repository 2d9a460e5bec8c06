r"""What is explained: target objects, the scalar :math:`\phi` they define, and input checking.

Notation as in the book's conventions page: logits :math:`\lambda`, the explained scalar
:math:`\phi`, :math:`P(t \mid w)` the probability of the target over {target, foil}.

Owns :class:`MLMTarget`, :class:`ClassTarget`, :func:`target_score` (:math:`\phi` from full
logits), :func:`target_probability` (blank-out's :math:`P(t \mid w)`), :func:`resolve_target`,
:func:`special_positions`, ``token_id``, and the batch validation every method of
:mod:`cmixlib.gradients` runs (``prepare_batch``, ``single_sequence``, ``attribution_errors``;
internal). The same :math:`\phi` as the forward function captum differentiates is
:class:`cmixlib.gradients.scores.ScoreModule`.

* :class:`MLMTarget` (``*ForMaskedLM``), at token ``position`` with logits :math:`\lambda`:
  ``"logit"``: :math:`\phi = \lambda_t`; ``"logit_diff"``: :math:`\phi = \lambda_t - \lambda_f`;
  ``"prob"``: :math:`\phi = e^{\lambda_t}/(e^{\lambda_t}+e^{\lambda_f}) =
  \mathrm{sigmoid}(\lambda_t-\lambda_f) = P(t \mid w)` (softmax over {target, foil}, the Value
  Zeroing normalisation), or the full-vocabulary softmax :math:`P_t` without a foil. ``"auto"``
  (default) = ``"logit_diff"`` with a foil, else ``"logit"``. ``grad_l2`` and the G×I variants
  of ``"prob"`` and ``"logit_diff"`` differ only by the positive factor :math:`P(1-P)` (the
  sigmoid's derivative at the point), so their *normalised* maps agree; so do DeepLift's (the
  sigmoid contributes one multiplier shared by all positions: its local slope :math:`P(1-P)`,
  because ``torch.sigmoid`` is a functional call that captum back-propagates with its ordinary
  gradient, not the rescale rule's secant), not integrated gradients' (a path integral).
* :class:`ClassTarget` (``*ForSequenceClassification``): ``"logit"`` (default):
  :math:`\phi = \lambda_c`; ``"prob"``: :math:`\phi = P_c = \mathrm{softmax}(\lambda)_c` (ALTI's
  convention). ``class_index=None`` means the class the model predicts for the input.

An MLM is scored from the final hidden state of the target position only,
:math:`\lambda_t = \mathrm{transform}(o_{pos})\cdot W_t + b_t` (:func:`cmixlib.models.arch.mlm_head`),
not from the full ``(n, vocab)`` logits (:mod:`cmixlib.gradients.scores`).

**Special tokens.** With a ``tokenizer``, special positions are those holding its CLS/SEP/BOS/EOS/
PAD ids; without one, the first and last attended positions. Padding (``attention_mask == 0``)
always counts as special.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Iterator, Literal, Sequence, Union

import numpy as np
import torch
from torch import nn

from cmixlib.models.devices import model_device
from cmixlib.forward.encoding import check_extra_inputs
from cmixlib.validation import InputError, check_ids_and_mask

__all__ = ["GradientAttributionError", "MLMTarget", "ClassTarget", "Target", "target_score",
           "extra_inputs",
           "target_probability", "resolve_target", "special_positions"]


class GradientAttributionError(InputError):
    """Bad input to an attribution function (unknown method, bad target, headless model, ids
    outside the vocabulary, a bad mask...); a :class:`~cmixlib.InputError`, so a ValueError."""


@contextmanager
def attribution_errors() -> Iterator[None]:
    """Re-raise an :class:`~cmixlib.InputError` of the checks inside as a
    :class:`GradientAttributionError` (the error every function here raises)."""
    try:
        yield
    except GradientAttributionError:
        raise
    except InputError as exc:
        raise GradientAttributionError(str(exc)) from None


@dataclass(frozen=True)
class MLMTarget:
    """Explain a masked-LM prediction at token ``position`` (0-based, counting [CLS]).

    ``score``: ``"logit"`` (:math:`\\lambda_t`), ``"logit_diff"`` (:math:`\\lambda_t - \\lambda_f`,
    needs a foil), ``"prob"`` (:math:`P(t \\mid w)` with a foil, full-vocabulary softmax without) or
    ``"auto"`` (``"logit_diff"`` if a foil is given, else ``"logit"``).
    """

    position: int
    target_id: int
    foil_id: int | None = None
    score: Literal["auto", "logit", "logit_diff", "prob"] = "auto"

    def resolved_score(self) -> str:
        if self.score == "auto":
            return "logit_diff" if self.foil_id is not None else "logit"
        return self.score


@dataclass(frozen=True)
class ClassTarget:
    """Explain a sequence classifier's class ``class_index`` (None: the predicted class).

    ``score``: ``"logit"`` (:math:`z_c`, default) or ``"prob"`` (:math:`\\mathrm{softmax}(z)_c`).
    """

    class_index: int | None = None
    score: Literal["auto", "logit", "prob"] = "auto"

    def resolved_score(self) -> str:
        return "logit" if self.score == "auto" else self.score


Target = Union[MLMTarget, ClassTarget]

_MLM_SCORES = ("auto", "logit", "logit_diff", "prob")
_CLS_SCORES = ("auto", "logit", "prob")


def output_logits(output: Any) -> torch.Tensor:
    """The logits of a model's output (its ``logits``, or the first item of a tuple); a
    :class:`GradientAttributionError` for a model without a head."""
    logits = getattr(output, "logits", None)
    if logits is None and isinstance(output, (tuple, list)):
        logits = output[0]
    if logits is None:
        raise GradientAttributionError("The model returned no logits; it needs a head.")
    return logits


def target_score(logits: torch.Tensor, target: Target) -> torch.Tensor:
    """The explained scalar :math:`f` per batch row, from the model's ``logits``.

    ``logits`` is ``(batch, n, vocab)`` for an :class:`MLMTarget`, ``(batch, classes)`` for a
    :class:`ClassTarget`. Returns shape ``(batch,)``. See the module docstring for the formulas.
    """
    if isinstance(target, MLMTarget):
        z = logits[:, target.position, :]
        kind = target.resolved_score()
        zt = z[:, target.target_id]
        if kind == "logit":
            return zt
        if kind == "logit_diff":
            return zt - z[:, target.foil_id]
        if target.foil_id is None:  # "prob", full-vocabulary softmax
            return torch.softmax(z, dim=-1)[:, target.target_id]
        return torch.sigmoid(zt - z[:, target.foil_id])
    if target.class_index is None:
        raise GradientAttributionError("ClassTarget.class_index is None: call resolve_target first.")
    kind = target.resolved_score()
    if kind == "logit":
        return logits[:, target.class_index]
    return torch.softmax(logits, dim=-1)[:, target.class_index]


def target_probability(logits: torch.Tensor, target: Target) -> torch.Tensor:
    """Probability of the target used by blank-out, shape ``(batch,)``.

    MLM: :math:`e^{\\lambda_t}/(e^{\\lambda_t}+e^{\\lambda_f})` with a foil (Value Zeroing §7), else the full-vocabulary
    softmax. Classifier: :math:`\\mathrm{softmax}(z)_c`.
    """
    return target_score(logits, replace(target, score="prob"))


def _is_mlm(model: nn.Module) -> bool:
    return type(model).__name__.endswith("ForMaskedLM") or (
        model.get_output_embeddings() is not None
        and "ForSequenceClassification" not in type(model).__name__)


def _is_classifier(model: nn.Module) -> bool:
    return "ForSequenceClassification" in type(model).__name__


def _check_model_and_target(model: nn.Module, target: Target, n: int) -> None:
    name = type(model).__name__
    if isinstance(target, MLMTarget):
        if not _is_mlm(model):
            raise GradientAttributionError(
                f"MLMTarget needs a masked-LM model (*ForMaskedLM) with an output head; got {name}. "
                "A base encoder (task='base') has no head to score; load it with task='mlm'.")
        if target.score not in _MLM_SCORES:
            raise GradientAttributionError(
                f"Unknown MLM score {target.score!r}; choose one of {_MLM_SCORES}.")
        if not isinstance(target.position, (int, np.integer)) or isinstance(target.position, bool) \
                or not 0 <= target.position < n:
            raise GradientAttributionError(
                f"MLMTarget.position={target.position} is out of range for a sequence of {n} "
                f"tokens (0..{n - 1}).")
        vocab = model.get_output_embeddings().weight.shape[0]
        for label, tid in (("target_id", target.target_id), ("foil_id", target.foil_id)):
            if tid is not None and not 0 <= int(tid) < vocab:
                raise GradientAttributionError(
                    f"MLMTarget.{label}={tid} is outside the vocabulary (0..{vocab - 1}).")
        if target.resolved_score() == "logit_diff" and target.foil_id is None:
            raise GradientAttributionError("score='logit_diff' needs MLMTarget.foil_id.")
    elif isinstance(target, ClassTarget):
        if not _is_classifier(model):
            raise GradientAttributionError(
                f"ClassTarget needs a sequence classifier (*ForSequenceClassification); got {name}. "
                "A base encoder (task='base') has no head to score.")
        if target.score not in _CLS_SCORES:
            raise GradientAttributionError(
                f"Unknown class score {target.score!r}; choose one of {_CLS_SCORES}.")
        k = int(model.config.num_labels)
        if target.class_index is not None and not 0 <= int(target.class_index) < k:
            raise GradientAttributionError(
                f"ClassTarget.class_index={target.class_index} is out of range (0..{k - 1}).")
    else:
        raise GradientAttributionError(
            f"target must be an MLMTarget or a ClassTarget, not {type(target).__name__}.")


def extra_inputs(token_type_ids: Any = None, position_ids: Any = None) -> dict[str, Any]:
    """The extra per-token inputs a function was given, by name (None left out)."""
    return {k: v for k, v in (("token_type_ids", token_type_ids), ("position_ids", position_ids))
            if v is not None}


def prepare_batch(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
             targets: Sequence[Target], extras: dict[str, Any] | None = None,
             ) -> tuple[torch.Tensor, torch.Tensor, list[Target], dict[str, torch.Tensor]]:
    """Validate and move a batch ``(B, n)`` of ids, its mask, its extra inputs (``extras``:
    ``token_type_ids`` / ``position_ids`` shaped like the ids,
    :func:`cmixlib.validation.check_extra_inputs`) and one target per row; resolve
    predicted-class targets (with the extra inputs). Returns ids, mask, targets, extras."""
    if not isinstance(model, nn.Module) or not hasattr(model, "get_input_embeddings"):
        raise GradientAttributionError("model must be a Hugging Face PreTrainedModel.")
    if not torch.is_tensor(input_ids) or input_ids.dtype not in (torch.long, torch.int, torch.int32):
        raise GradientAttributionError("input_ids must be an integer torch tensor of shape (B, n).")
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise GradientAttributionError(
            f"input_ids must have shape (B, n); got {tuple(input_ids.shape)}.")
    targets = list(targets)
    if len(targets) != input_ids.shape[0]:
        raise GradientAttributionError(
            f"{len(targets)} target(s) for a batch of {input_ids.shape[0]} sequence(s): "
            "give one per row.")
    device = model_device(model)
    with attribution_errors():  # ids inside the vocabulary; a 0/1 mask of their shape, a token per row
        input_ids, attention_mask = check_ids_and_mask(
            input_ids, attention_mask, vocab_size=model.get_input_embeddings().num_embeddings)
        extras = check_extra_inputs({"input_ids": input_ids, **(extras or {})}, input_ids, model)
    input_ids = input_ids.to(device=device, dtype=torch.long)
    attention_mask = attention_mask.to(device=device, dtype=torch.long)
    extras = {k: v.to(device) for k, v in extras.items()}
    for b, target in enumerate(targets):
        _check_model_and_target(model, target, input_ids.shape[1])
        if isinstance(target, MLMTarget) and attention_mask[b, target.position] == 0:
            raise GradientAttributionError(
                f"MLMTarget.position={target.position} is a padded position.")
    kinds = {(type(t).__name__, t.resolved_score(), getattr(t, "foil_id", 0) is None)
             for t in targets}
    if len(kinds) > 1:
        raise GradientAttributionError(
            "All targets of a batch must be of one type and score, and all or none must have a "
            f"foil; got {sorted(kinds)}. Split the batch.")
    if isinstance(targets[0], ClassTarget) and any(t.class_index is None for t in targets):
        pred = _predicted_classes(model, input_ids, attention_mask, extras)
        targets = [t if t.class_index is not None else replace(t, class_index=p)
                   for t, p in zip(targets, pred)]
    return input_ids, attention_mask, targets, extras


@torch.no_grad()
def _predicted_classes(model: nn.Module, input_ids: torch.Tensor,
                       attention_mask: torch.Tensor | None,
                       extras: dict[str, torch.Tensor] | None = None) -> list[int]:
    device = model_device(model)
    mask = None if attention_mask is None else attention_mask.to(device)
    kw = {k: v.to(device) for k, v in (extras or {}).items()}
    with torch.no_grad():                    # only the argmax is needed: no autograd graph
        logits = output_logits(model(input_ids=input_ids.to(device), attention_mask=mask, **kw))
    return [int(c) for c in logits.argmax(-1).tolist()]


def single_sequence(input_ids: torch.Tensor) -> torch.Tensor:
    """The one-sequence functions take ``(1, n)`` or ``(n,)`` ids."""
    if not torch.is_tensor(input_ids):
        raise GradientAttributionError("input_ids must be an integer torch tensor of shape (1, n).")
    ids = input_ids.unsqueeze(0) if input_ids.dim() == 1 else input_ids
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise GradientAttributionError(
            f"input_ids must have shape (1, n); got {tuple(input_ids.shape)}. "
            "Use batch_attribute for a batch.")
    return ids


@torch.no_grad()
def resolve_target(model: nn.Module, input_ids: torch.Tensor, target: Target,
                   attention_mask: torch.Tensor | None = None, *,
                   token_type_ids: torch.Tensor | None = None,
                   position_ids: torch.Tensor | None = None) -> Target:
    """Replace ``ClassTarget(class_index=None)`` by the class the model predicts (on the ids with
    their mask, segment ids and positions); else no-op."""
    if isinstance(target, ClassTarget) and target.class_index is None:
        extras = extra_inputs(token_type_ids, position_ids)
        return replace(target, class_index=_predicted_classes(model, input_ids, attention_mask,
                                                              extras)[0])
    return target


# --------------------------------------------------------------------------------------------
# Special tokens and replacement ids
# --------------------------------------------------------------------------------------------
def special_positions(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      tokenizer: Any = None) -> np.ndarray:
    """Boolean ``(n,)`` mask of special positions ([CLS]/[SEP]/<s>/</s>/padding).

    With ``tokenizer``: positions holding its CLS, SEP, BOS, EOS or PAD id. Without: the first and
    last attended positions. Positions with ``attention_mask == 0`` are always special.
    """
    ids = input_ids.reshape(-1).cpu()
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask.reshape(-1).cpu()
    special = mask == 0
    if tokenizer is not None:
        sid = {getattr(tokenizer, a, None) for a in
               ("cls_token_id", "sep_token_id", "bos_token_id", "eos_token_id", "pad_token_id")} - {None}
        special |= torch.tensor([int(t) in sid for t in ids], dtype=torch.bool)
    else:
        att = torch.nonzero(mask).reshape(-1)
        if len(att):
            special[att[0]] = True
            special[att[-1]] = True
    return special.numpy()


_TOKEN_ATTR = {"mask": "mask_token_id", "unk": "unk_token_id", "pad": "pad_token_id"}


def token_id(model: nn.Module, token: int | str, tokenizer: Any, purpose: str) -> int:
    """The id of ``token`` (an id, or ``"mask"``/``"unk"``/``"pad"`` from the tokenizer or config)."""
    if isinstance(token, (int, np.integer)):
        return int(token)
    if token not in _TOKEN_ATTR:
        raise GradientAttributionError(
            f"Unknown {purpose} token {token!r}; use 'mask', 'unk', 'pad' or an integer id.")
    tid = getattr(tokenizer, _TOKEN_ATTR[token], None) if tokenizer is not None else None
    if tid is None:
        tid = getattr(model.config, _TOKEN_ATTR[token], None)
    if tid is None:
        raise GradientAttributionError(
            f"Cannot find the id of the {token!r} token for the {purpose}: pass tokenizer=... or "
            "an integer id.")
    return int(tid)
