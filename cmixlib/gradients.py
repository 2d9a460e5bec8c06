r"""Gradient-based, erasure (blank-out) and random baselines for token attribution.

These are the *baselines* the three papers compare context-mixing scores against:

* **Value Zeroing** (Mohebbi et al. 2023): Gradient×Input, Integrated Gradients and DeepLift,
  computed "with respect to the token representations at each layer" from the MLM head
  (Figures 1-2, **layer-wise**), and blank-out scores :math:`p(y_t|e) - p(y_t|e\setminus e_i)`
  with the probability normalised over the target and foil words only (§7).
* **ALTI** (Ferrando et al. 2022): the L2 norm of the gradient (``grad_l2``) on SST-2 and
  blank-out on SVA.
* **GlobEnc** (Modarressi et al. 2022): gradient×input saliency, aggregated with an L2 norm.

Everything is computed with `captum <https://captum.ai>`_ ``Layer*`` attribution classes, so the
model is always run through its own, unmodified ``forward``.

Conventions
-----------
**What is scored.** A target object says which scalar :math:`f(x)` is explained:

* :class:`MLMTarget` (``*ForMaskedLM``), at token ``position`` with logits :math:`z`:
  ``score="logit"``: :math:`f = z_t`; ``"logit_diff"``: :math:`f = z_t - z_f` (contrastive);
  ``"prob"``: :math:`f = e^{z_t}/(e^{z_t}+e^{z_f}) = \sigma(z_t-z_f)` (softmax over
  {target, foil}, the Value Zeroing normalisation), or the full-vocabulary softmax
  :math:`p_t` when there is no foil. Default ``"auto"`` = ``"logit_diff"`` when a foil is given,
  else ``"logit"``. Note that ``grad_l2`` and the G×I variants of ``"prob"`` and ``"logit_diff"``
  differ only by the positive factor :math:`\sigma'(z_t-z_f)`, so their *normalised* maps agree.
* :class:`ClassTarget` (``*ForSequenceClassification``): ``score="logit"`` (default):
  :math:`f = z_c`; ``"prob"``: :math:`f = \mathrm{softmax}(z)_c` (ALTI's convention, §1.7 of the
  reference-code notes). ``class_index=None`` means the class the model predicts for the input.

Blank-out always uses the probability (``"prob"`` semantics) whatever ``score`` says.

**Input level** (``level="input"``): :math:`x_j` is the output of the **word-embedding** module
(``model.get_input_embeddings()``), *before* position/token-type embeddings and LayerNorm. Captum's
``Layer*`` classes hook that module's output, so positions and LayerNorm are applied exactly once
(the authors' code fed the whole embedding-module output back as ``inputs_embeds``, which applies
them twice; we never do that). For ELECTRA, :math:`x_j` has ``embedding_size`` dimensions.

**Layer-wise** (``level="layers"``): row :math:`\ell` (:math:`\ell = 0..L-1`) attributes to the
representations **entering** encoder layer :math:`\ell`, i.e. ``hidden_states[ℓ]`` of a Hugging
Face forward with ``output_hidden_states=True``: the embedding-module output (after LayerNorm, and
after ``embeddings_project`` for ELECTRA) for :math:`\ell=0`, the output of layer :math:`\ell-1`
otherwise. This matches the Value Zeroing figures, where the map of layer :math:`\ell` says which
input tokens of that layer feed the target, and the paper's remark that the gradient "with respect
to the tokens in the input embedding layer (ℓ = 0) provides aggregated scores". Row 0 is also
GlobEnc/DecompX's "gradient × ``hidden_states[0]``" saliency. Captum hooks the *output* of the
module that produces ``hidden_states[ℓ]``.

**Aggregation over the hidden dimension** (``g = ∂f/∂x_j``, all return one value per token):

=========================  =========================================================
``grad_l2``                :math:`\lVert g_j \rVert_2`
``grad_x_input_l2``        :math:`\lVert g_j \odot x_j \rVert_2`
``grad_x_input_abs``       :math:`\lvert g_j \cdot x_j \rvert = |\sum_d g_{jd} x_{jd}|`
``integrated_gradients``   :math:`A_j = \sum_d (x_{jd}-x'_{jd}) \int_0^1 g_{jd}(x'+\alpha(x-x'))d\alpha`
``deeplift``               :math:`A_j = \sum_d (x_{jd}-x'_{jd})\, m_{jd}` (DeepLift multipliers)
``blank_out``              :math:`p(y|x) - p(y|x \text{ with token } j \text{ replaced})`
``random``                 :math:`U(0,1)` (seeded)
=========================  =========================================================

IG and DeepLift default to the signed sum over dimensions (``aggregate="sum"``), for which
completeness :math:`\sum_j A_j \approx f(x)-f(x')` holds for IG; ``aggregate="l2"`` (ALTI's
``ig_l2``) and ``"abs"`` are options. Scores are **not** normalised; do that downstream.

**Baselines (IG, DeepLift).** The baseline is an *input-id* sequence: every token replaced by
``baseline`` ([MASK] by default, as in the ALTI code; also ``"pad"``, ``"unk"``, an id, or a full
``(1, n)`` id tensor) with the special tokens ([CLS]/[SEP]/<s>/</s>, padding) kept. Captum runs
the model on it, so at layer :math:`\ell` the baseline is the layer-:math:`\ell` representation of
that sequence. (RoBERTa derives position ids from the pad id, so a ``"pad"`` baseline also moves
the positions of the baseline; prefer ``"mask"`` there.) DeepLift's treatment of GELU, softmax and
LayerNorm is described in :func:`deeplift`.

**Special tokens.** With a ``tokenizer``, special positions are those holding its CLS/SEP/BOS/EOS/
PAD ids; without one, the first and last attended positions. Padding (``attention_mask == 0``)
always counts as special.
"""
from __future__ import annotations

import contextlib
import inspect
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Literal, Union

import numpy as np
import torch
from torch import nn

from .models import model_device

__all__ = [
    "MLMTarget", "ClassTarget", "Target", "GradientAttributionError", "METHODS", "LEVELS",
    "attribute", "grad_l2", "grad_x_input_l2", "grad_x_input_abs", "integrated_gradients",
    "deeplift", "blank_out", "random_scores", "resolve_target", "target_score",
    "target_probability", "substitute_word_embeddings", "attribution_layers", "special_positions",
]

Level = Literal["input", "layers"]
LEVELS: tuple[str, ...] = ("input", "layers")


class GradientAttributionError(ValueError):
    """Bad input to an attribution function (unknown method, bad target, headless model...)."""


# --------------------------------------------------------------------------------------------
# Targets and scores
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MLMTarget:
    """Explain a masked-LM prediction at token ``position`` (0-based, counting [CLS]).

    ``score``: ``"logit"`` (:math:`z_t`), ``"logit_diff"`` (:math:`z_t - z_f`, needs a foil),
    ``"prob"`` (:math:`\\sigma(z_t - z_f)` with a foil, full-vocabulary softmax without) or
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


def _logits(output: Any) -> torch.Tensor:
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

    MLM: :math:`e^{z_t}/(e^{z_t}+e^{z_f})` with a foil (Value Zeroing §7), else the full-vocabulary
    softmax. Classifier: :math:`\\mathrm{softmax}(z)_c`.
    """
    return target_score(logits, replace(target, score="prob"))


def _is_mlm(model: nn.Module) -> bool:
    return type(model).__name__.endswith("ForMaskedLM") or (
        model.get_output_embeddings() is not None and "ForSequenceClassification" not in type(model).__name__)


def _is_classifier(model: nn.Module) -> bool:
    return "ForSequenceClassification" in type(model).__name__


def _num_layers(model: nn.Module) -> int:
    cfg = model.config
    return int(getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layers"))


def _check_model_and_target(model: nn.Module, target: Target, n: int) -> None:
    name = type(model).__name__
    if isinstance(target, MLMTarget):
        if not _is_mlm(model):
            raise GradientAttributionError(
                f"MLMTarget needs a masked-LM model (*ForMaskedLM) with an output head; got {name}. "
                "A base encoder (task='base') has no head to score; load it with task='mlm'.")
        if target.score not in _MLM_SCORES:
            raise GradientAttributionError(f"Unknown MLM score {target.score!r}; choose one of {_MLM_SCORES}.")
        if not isinstance(target.position, (int, np.integer)) or not 0 <= target.position < n:
            raise GradientAttributionError(
                f"MLMTarget.position={target.position} is out of range for a sequence of {n} tokens (0..{n - 1}).")
        vocab = model.get_output_embeddings().weight.shape[0]
        for label, tid in (("target_id", target.target_id), ("foil_id", target.foil_id)):
            if tid is not None and not 0 <= int(tid) < vocab:
                raise GradientAttributionError(f"MLMTarget.{label}={tid} is outside the vocabulary (0..{vocab - 1}).")
        if target.resolved_score() == "logit_diff" and target.foil_id is None:
            raise GradientAttributionError("score='logit_diff' needs MLMTarget.foil_id.")
    elif isinstance(target, ClassTarget):
        if not _is_classifier(model):
            raise GradientAttributionError(
                f"ClassTarget needs a sequence classifier (*ForSequenceClassification); got {name}. "
                "A base encoder (task='base') has no head to score.")
        if target.score not in _CLS_SCORES:
            raise GradientAttributionError(f"Unknown class score {target.score!r}; choose one of {_CLS_SCORES}.")
        k = int(model.config.num_labels)
        if target.class_index is not None and not 0 <= int(target.class_index) < k:
            raise GradientAttributionError(f"ClassTarget.class_index={target.class_index} is out of range (0..{k - 1}).")
    else:
        raise GradientAttributionError(
            f"target must be an MLMTarget or a ClassTarget, not {type(target).__name__}.")


# --------------------------------------------------------------------------------------------
# Input preparation
# --------------------------------------------------------------------------------------------
def _prepare(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
             target: Target) -> tuple[torch.Tensor, torch.Tensor, Target]:
    """Validate and move inputs; resolve a predicted-class target. Returns ids, mask, target."""
    if not isinstance(model, nn.Module) or not hasattr(model, "get_input_embeddings"):
        raise GradientAttributionError("model must be a Hugging Face PreTrainedModel.")
    if not torch.is_tensor(input_ids) or input_ids.dtype not in (torch.long, torch.int, torch.int32):
        raise GradientAttributionError("input_ids must be an integer torch tensor of shape (1, n).")
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise GradientAttributionError(f"input_ids must have shape (1, n); got {tuple(input_ids.shape)}.")
    device = model_device(model)
    input_ids = input_ids.to(device=device, dtype=torch.long)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    else:
        attention_mask = attention_mask.reshape(input_ids.shape).to(device=device, dtype=torch.long)
    _check_model_and_target(model, target, input_ids.shape[1])
    if isinstance(target, MLMTarget) and attention_mask[0, target.position] == 0:
        raise GradientAttributionError(f"MLMTarget.position={target.position} is a padded position.")
    target = resolve_target(model, input_ids, target, attention_mask=attention_mask)
    return input_ids, attention_mask, target


@torch.no_grad()
def resolve_target(model: nn.Module, input_ids: torch.Tensor, target: Target,
                   attention_mask: torch.Tensor | None = None) -> Target:
    """Replace ``ClassTarget(class_index=None)`` by the class the model predicts; else no-op."""
    if isinstance(target, ClassTarget) and target.class_index is None:
        device = model_device(model)
        logits = _logits(model(input_ids=input_ids.to(device),
                               attention_mask=None if attention_mask is None else attention_mask.to(device)))
        return replace(target, class_index=int(logits[0].argmax()))
    return target


class _ScoreModule(nn.Module):
    """``f(input_ids, attention_mask) -> (batch,)``: the model's real forward, then the score."""

    def __init__(self, model: nn.Module, target: Target):
        super().__init__()
        self.model = model
        self.target = target

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return target_score(_logits(out), self.target)


def _base(model: nn.Module) -> nn.Module:
    return getattr(model, model.base_model_prefix, model) if hasattr(model, "base_model_prefix") else model


def attribution_layers(model: nn.Module, level: Level) -> list[nn.Module]:
    """Modules whose *outputs* captum hooks: the word embeddings for ``"input"``; for
    ``"layers"``, the modules producing ``hidden_states[0..L-1]`` (the inputs of layers 0..L-1)."""
    if level == "input":
        return [model.get_input_embeddings()]
    if level != "layers":
        raise GradientAttributionError(f"Unknown level {level!r}; choose one of {LEVELS}.")
    base = _base(model)
    if hasattr(base, "encoder") and hasattr(base.encoder, "layer"):
        blocks = list(base.encoder.layer)
    elif hasattr(base, "transformer") and hasattr(base.transformer, "layer"):
        blocks = list(base.transformer.layer)
    else:
        raise GradientAttributionError(f"Cannot find the encoder layers of {type(model).__name__}.")
    first = getattr(base, "embeddings_project", None) or base.embeddings
    return [first] + blocks[:-1]


@contextlib.contextmanager
def substitute_word_embeddings(model: nn.Module, word_embeds: torch.Tensor) -> Iterator[None]:
    """Within the block, the word-embedding module returns ``word_embeds`` instead of its output.

    The rest of the forward (positions, token types, LayerNorm, encoder, head) is untouched, so
    ``model(input_ids=ids)`` inside the block computes :math:`f` at word embeddings ``word_embeds``.
    ``word_embeds`` must have the shape of the module's output, ``(batch, n, d_emb)``.
    """
    def hook(module, inputs, output):
        if output.shape != word_embeds.shape:
            raise GradientAttributionError(
                f"word_embeds has shape {tuple(word_embeds.shape)}, the embedding output {tuple(output.shape)}.")
        return word_embeds

    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


# --------------------------------------------------------------------------------------------
# Special tokens and baselines
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


def _token_id(model: nn.Module, token: int | str, tokenizer: Any, purpose: str) -> int:
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
            f"Cannot find the id of the {token!r} token for the {purpose}: pass tokenizer=... or an integer id.")
    return int(tid)


def _baseline_ids(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  baseline: int | str | torch.Tensor, tokenizer: Any) -> torch.Tensor:
    if torch.is_tensor(baseline):
        if baseline.shape != input_ids.shape:
            raise GradientAttributionError(
                f"baseline id tensor has shape {tuple(baseline.shape)}, expected {tuple(input_ids.shape)}.")
        return baseline.to(input_ids.device, dtype=torch.long)
    tid = _token_id(model, baseline, tokenizer, "baseline")
    keep = torch.as_tensor(special_positions(input_ids, attention_mask, tokenizer), device=input_ids.device)
    return torch.where(keep.unsqueeze(0), input_ids, torch.full_like(input_ids, tid))


def _aggregate(attr: torch.Tensor, how: str) -> torch.Tensor:
    """(…, n, d) -> (…, n)."""
    if how == "sum":
        return attr.sum(-1)
    if how == "abs":
        return attr.sum(-1).abs()
    if how == "l2":
        return attr.norm(dim=-1)
    raise GradientAttributionError(f"Unknown aggregate {how!r}; choose 'sum', 'abs' or 'l2'.")


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise GradientAttributionError(f"Unknown level {level!r}; choose one of {LEVELS}.")


# --------------------------------------------------------------------------------------------
# Gradient methods (captum LayerGradientXActivation)
# --------------------------------------------------------------------------------------------
def _layer_grad(model: nn.Module, input_ids: torch.Tensor, target: Target,
                attention_mask: torch.Tensor | None, level: Level, multiply: bool) -> list[torch.Tensor]:
    """Per hooked module, (n, d) gradient (or gradient ⊙ activation) of f w.r.t. its output."""
    from captum.attr import LayerGradientXActivation

    _check_level(level)
    ids, mask, target = _prepare(model, input_ids, attention_mask, target)
    layers = attribution_layers(model, level)
    method = LayerGradientXActivation(_ScoreModule(model, target), layers, multiply_by_inputs=multiply)
    with torch.enable_grad():
        attrs = method.attribute(ids, additional_forward_args=(mask,))
    if not isinstance(attrs, (list, tuple)):
        attrs = [attrs]
    return [a[0] for a in attrs]


def _stack(rows: list[torch.Tensor], level: Level) -> np.ndarray:
    out = torch.stack(rows)
    return _np(out[0] if level == "input" else out)


def grad_l2(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
            attention_mask: torch.Tensor | None = None, level: Level = "input",
            tokenizer: Any = None) -> np.ndarray:
    r"""Gradient norm :math:`s_j = \lVert \partial f / \partial x_j \rVert_2`.

    ``x_j``: word embedding of token j (``level="input"``) or ``hidden_states[ℓ][j]``
    (``level="layers"``). Returns ``(n,)`` or ``(L, n)``.
    """
    grads = _layer_grad(model, input_ids, target, attention_mask, level, multiply=False)
    return _stack([_aggregate(g, "l2") for g in grads], level)


def grad_x_input_l2(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                    attention_mask: torch.Tensor | None = None, level: Level = "input",
                    tokenizer: Any = None) -> np.ndarray:
    r"""Gradient × input, L2 over dims: :math:`s_j = \lVert (\partial f / \partial x_j) \odot x_j \rVert_2`.

    GlobEnc's saliency aggregation. Returns ``(n,)`` or ``(L, n)``.
    """
    gx = _layer_grad(model, input_ids, target, attention_mask, level, multiply=True)
    return _stack([_aggregate(g, "l2") for g in gx], level)


def grad_x_input_abs(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                     attention_mask: torch.Tensor | None = None, level: Level = "input",
                     tokenizer: Any = None) -> np.ndarray:
    r"""Gradient × input, summed then absolute: :math:`s_j = \lvert (\partial f/\partial x_j)\cdot x_j \rvert`.

    Returns ``(n,)`` or ``(L, n)``.
    """
    gx = _layer_grad(model, input_ids, target, attention_mask, level, multiply=True)
    return _stack([_aggregate(g, "abs") for g in gx], level)


# --------------------------------------------------------------------------------------------
# Integrated gradients and DeepLift
# --------------------------------------------------------------------------------------------
def integrated_gradients(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                         attention_mask: torch.Tensor | None = None, level: Level = "input",
                         baseline: int | str | torch.Tensor = "mask", tokenizer: Any = None,
                         n_steps: int = 50, method: str = "gausslegendre",
                         internal_batch_size: int | None = None, aggregate: str = "sum",
                         return_delta: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""Integrated gradients (captum ``LayerIntegratedGradients``):

    .. math:: A_j = \sum_d (x_{jd} - x'_{jd}) \int_0^1
              \frac{\partial f(x' + \alpha (x - x'))}{\partial x_{jd}}\, d\alpha,
              \qquad \sum_j A_j \approx f(x) - f(x').

    ``x'`` is the representation of the baseline ids (see module docstring; default every
    non-special token -> [MASK], needing ``tokenizer`` or an integer ``baseline``). For
    ``level="layers"`` each layer is integrated separately (one captum run per layer, the path
    being the straight line between the input's and the baseline's ``hidden_states[ℓ]``).
    ``aggregate``: ``"sum"`` (signed, default), ``"abs"`` or ``"l2"`` over dims.

    Returns ``(n,)`` / ``(L, n)``; with ``return_delta`` also the convergence delta
    :math:`\sum_{j,d} A_{jd} - (f(x) - f(x'))` as a ``(1,)`` / ``(L,)`` array.
    """
    from captum.attr import LayerIntegratedGradients

    _check_level(level)
    if int(n_steps) < 2:
        raise GradientAttributionError(f"n_steps must be >= 2 (captum's requirement); got {n_steps}.")
    ids, mask, target = _prepare(model, input_ids, attention_mask, target)
    base_ids = _baseline_ids(model, ids, mask, baseline, tokenizer)
    fwd = _ScoreModule(model, target)
    rows, deltas = [], []
    for layer in attribution_layers(model, level):
        lig = LayerIntegratedGradients(fwd, layer, multiply_by_inputs=True)
        with torch.enable_grad():
            attr, delta = lig.attribute(ids, baselines=base_ids, additional_forward_args=(mask,),
                                        n_steps=n_steps, method=method,
                                        internal_batch_size=internal_batch_size,
                                        return_convergence_delta=True)
        rows.append(_aggregate(attr[0], aggregate))
        deltas.append(delta.reshape(-1)[0])
    out = _stack(rows, level)
    return (out, _np(torch.stack(deltas))) if return_delta else out


_ACTIVATION_NAMES = ("GELUActivation", "NewGELUActivation", "FastGELUActivation", "QuickGELUActivation",
                     "AccurateGELUActivation", "GELUTanh", "SiLUActivation", "MishActivation")


def _elementwise_activation_types() -> list[type]:
    import transformers.activations as act

    types: list[type] = [nn.GELU, nn.SiLU, nn.Mish]
    types += [getattr(act, name) for name in _ACTIVATION_NAMES if isinstance(getattr(act, name, None), type)]
    return types


@contextlib.contextmanager
def _deeplift_activations(enabled: bool) -> Iterator[None]:
    """Temporarily give element-wise activation modules captum's DeepLift rescale rule."""
    if not enabled:
        yield
        return
    from captum.attr._core import deep_lift as dl

    added = [t for t in _elementwise_activation_types() if t not in dl.SUPPORTED_NON_LINEAR]
    for t in added:
        dl.SUPPORTED_NON_LINEAR[t] = dl.nonlinear
    try:
        yield
    finally:
        for t in added:
            dl.SUPPORTED_NON_LINEAR.pop(t, None)


def deeplift(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
             attention_mask: torch.Tensor | None = None, level: Level = "input",
             baseline: int | str | torch.Tensor = "mask", tokenizer: Any = None,
             aggregate: str = "sum", rescale_activations: bool = True,
             return_delta: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""DeepLift, rescale rule (captum ``LayerDeepLift``): :math:`A_j = \sum_d (x_{jd}-x'_{jd})\,m_{jd}`.

    The multipliers :math:`m` are gradients in which the backward pass of every non-linearity
    that captum recognises **as an ``nn.Module`` of a known type** (``nn.ReLU``, ``nn.Tanh``,
    ``nn.Sigmoid``, ``nn.Softmax``, ...) is replaced by the rescale multiplier
    :math:`\Delta y / \Delta x` between input and baseline. Out of the box, most non-linearities
    of a Hugging Face encoder are *not* such modules: the FFN's GELU is
    ``transformers.activations.GELUActivation``, the attention softmax and RoBERTa's LM-head GELU
    are functional calls, and LayerNorm is not treated as a non-linearity at all. Captum back-
    propagates those with their ordinary gradient at the input, so plain captum DeepLift on BERT is
    nearly gradient × (x − x') (exactly so for the MLM models here).

    ``rescale_activations=True`` (default) registers, for this call only, the element-wise
    activation modules of ``transformers.activations`` (GELU variants, SiLU, Mish) and ``nn.GELU``/
    ``nn.SiLU`` with captum's rescale rule (by adding them to captum's module table and removing
    them afterwards), so the FFN GELUs are handled as DeepLift prescribes.
    ``rescale_activations=False`` gives captum's out-of-the-box behaviour. Either way the attention
    softmax, the attention product and LayerNorm use plain gradients, so summation-to-delta
    (:math:`\sum A = f(x) - f(x')`) holds only approximately: check ``return_delta``. The
    ``nn.Tanh`` of the BERT/ELECTRA pooler and the ``nn.ReLU`` of DistilBERT's classifier always get
    the rescale rule. Captum's warnings about hooks on non-linear modules are silenced.

    Baseline and ``aggregate`` as in :func:`integrated_gradients`. Returns ``(n,)``/``(L, n)``,
    with ``return_delta`` also :math:`\sum A - (f(x)-f(x'))` per row.
    """
    from captum.attr import LayerDeepLift

    _check_level(level)
    ids, mask, target = _prepare(model, input_ids, attention_mask, target)
    base_ids = _baseline_ids(model, ids, mask, baseline, tokenizer)
    fwd = _ScoreModule(model, target)
    rows, deltas = [], []
    for layer in attribution_layers(model, level):
        ldl = LayerDeepLift(fwd, layer, multiply_by_inputs=True)
        with torch.enable_grad(), warnings.catch_warnings(), _deeplift_activations(rescale_activations):
            warnings.filterwarnings("ignore", message=".*(hooks|non-linear|dtype of|Gradients cannot).*")
            attr, delta = ldl.attribute(ids, baselines=base_ids, additional_forward_args=(mask,),
                                        return_convergence_delta=True)
        rows.append(_aggregate(attr[0], aggregate))
        deltas.append(delta.reshape(-1)[0])
    out = _stack(rows, level)
    return (out, _np(torch.stack(deltas))) if return_delta else out


# --------------------------------------------------------------------------------------------
# Blank-out and random
# --------------------------------------------------------------------------------------------
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
    ids, mask, target = _prepare(model, input_ids, attention_mask, target)
    n = ids.shape[1]
    rid = _token_id(model, replacement, tokenizer, "blank-out replacement")
    p0 = target_probability(_logits(model(input_ids=ids, attention_mask=mask)), target)[0]
    batch = ids.repeat(n, 1)
    batch[torch.arange(n), torch.arange(n)] = rid
    masks = mask.repeat(n, 1)
    step = batch_size or n
    probs = torch.cat([target_probability(_logits(model(input_ids=batch[i:i + step],
                                                        attention_mask=masks[i:i + step])), target)
                       for i in range(0, n, step)])
    scores = p0 - probs
    skip = torch.as_tensor(mask[0] == 0)
    if skip_special:
        skip = skip | torch.as_tensor(special_positions(ids, mask, tokenizer), device=ids.device)
        if isinstance(target, MLMTarget):
            skip[target.position] = True
    scores = torch.where(skip, torch.zeros_like(scores), scores)
    return _np(scores)


def random_scores(n: int, *, num_layers: int | None = None, seed: int = 0) -> np.ndarray:
    """Uniform(0, 1) scores from ``numpy.random.default_rng(seed)``: ``(n,)`` or ``(num_layers, n)``."""
    if n < 1:
        raise GradientAttributionError("n must be >= 1.")
    rng = np.random.default_rng(seed)
    return rng.uniform(size=n if num_layers is None else (num_layers, n))


# --------------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------------
def _random_method(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                   attention_mask: torch.Tensor | None = None, level: Level = "input",
                   seed: int = 0, tokenizer: Any = None) -> np.ndarray:
    _check_level(level)
    ids, _, _ = _prepare(model, input_ids, attention_mask, target)
    return random_scores(ids.shape[1], num_layers=None if level == "input" else _num_layers(model), seed=seed)


def _blank_out_method(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                      level: Level = "input", **options: Any) -> np.ndarray:
    if level != "input":
        raise GradientAttributionError("blank_out is only defined at level='input' (it perturbs input tokens).")
    return blank_out(model, input_ids, target, **options)


METHODS: dict[str, Callable[..., Any]] = {
    "grad_l2": grad_l2,
    "grad_x_input_l2": grad_x_input_l2,
    "grad_x_input_abs": grad_x_input_abs,
    "integrated_gradients": integrated_gradients,
    "deeplift": deeplift,
    "blank_out": _blank_out_method,
    "random": _random_method,
}


def attribute(model: nn.Module, input_ids: torch.Tensor, target: Target, method: str = "grad_l2",
              level: Level = "input", **options: Any) -> Any:
    """Dispatch to one of :data:`METHODS` (``grad_l2``, ``grad_x_input_l2``, ``grad_x_input_abs``,
    ``integrated_gradients``, ``deeplift``, ``blank_out``, ``random``).

    ``level="input"`` gives ``(n,)``, ``level="layers"`` ``(L, n)`` (blank-out: input only).
    ``options`` (e.g. ``attention_mask``, ``tokenizer``, ``baseline``, ``n_steps``, ``seed``)
    go to the method; every method accepts ``attention_mask`` and ``tokenizer`` (the gradient
    methods ignore the latter), an option a method does not take is an error.
    """
    if method not in METHODS:
        raise GradientAttributionError(f"Unknown method {method!r}; choose one of {sorted(METHODS)}.")
    func = METHODS[method]
    allowed = set(inspect.signature(func).parameters) | (
        set(inspect.signature(blank_out).parameters) if method == "blank_out" else set())
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise GradientAttributionError(
            f"Method {method!r} does not take option(s) {unknown}; it takes "
            f"{sorted(allowed - {'model', 'input_ids', 'target', 'options'})}.")
    return func(model, input_ids, target, level=level, **options)
