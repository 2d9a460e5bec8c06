r"""Gradient-based, erasure (blank-out) and random baselines for token attribution.

These are the *baselines* the three papers compare context-mixing scores against:

* **Value Zeroing** (Mohebbi et al. 2023): Gradient×Input, Integrated Gradients and DeepLift,
  computed "with respect to the token representations at each layer" from the MLM head
  (Figures 1-2, **layer-wise**), and blank-out scores :math:`p(y_t|e) - p(y_t|e\setminus e_i)`
  with the probability normalised over the target and foil words only (§7).
* **ALTI** (Ferrando et al. 2022): the L2 norm of the gradient (``grad_l2``) on SST-2 and
  blank-out on SVA.
* **GlobEnc** (Modarressi et al. 2022): gradient×input saliency, aggregated with an L2 norm.

Everything is computed with `captum <https://captum.ai>`_ attribution classes on the model's own,
unmodified modules. :func:`batch_attribute` does a padded batch and several methods at once (the
one-sequence functions below call it with a batch of one):

* grad-L2 and the G×I variants share one forward and backward pass (captum
  ``LayerGradientXActivation``) that gives the gradient at every hooked layer;
* **layer-wise IG** integrates, for each layer :math:`\ell`, the function :math:`f(h_\ell)` of
  ``hidden_states[ℓ]`` alone (captum ``IntegratedGradients``): for an MLM only the encoder blocks
  :math:`\ell..L-1` and the head at the target position run at each step, instead of the whole
  model as captum's ``LayerIntegratedGradients`` does, which gives the same numbers (tested);
* **layer-wise DeepLift** of an MLM needs a single captum ``DeepLift`` pass from layer 0: the
  multipliers that reach ``hidden_states[ℓ]`` in that pass are exactly those of
  ``LayerDeepLift`` at layer :math:`\ell` (tested against it), because the forward activations the
  rescale rule compares are the same;
* an MLM is scored from the final hidden state of the target position only (:func:`mlm_head`),
  not from the full ``(n, vocab)`` logits; every call checks this against the model's logits.

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
from typing import Any, Callable, Iterator, Literal, Sequence, Union

import numpy as np
import torch
from torch import nn

from .encoder import encoder_layers, layer_output, record_layer_calls
from .models import mlm_head, model_device

__all__ = [
    "MLMTarget", "ClassTarget", "Target", "GradientAttributionError", "METHODS", "LEVELS",
    "attribute", "batch_attribute", "GRADIENT_METHODS", "mlm_head", "grad_l2", "grad_x_input_l2", "grad_x_input_abs", "integrated_gradients",
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
# Input preparation (a batch of sequences, one target each)
# --------------------------------------------------------------------------------------------
def _prepare(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
             targets: Sequence[Target]) -> tuple[torch.Tensor, torch.Tensor, list[Target]]:
    """Validate and move a batch ``(B, n)`` of ids, its mask and one target per row; resolve
    predicted-class targets. Returns ids, mask, targets."""
    if not isinstance(model, nn.Module) or not hasattr(model, "get_input_embeddings"):
        raise GradientAttributionError("model must be a Hugging Face PreTrainedModel.")
    if not torch.is_tensor(input_ids) or input_ids.dtype not in (torch.long, torch.int, torch.int32):
        raise GradientAttributionError("input_ids must be an integer torch tensor of shape (B, n).")
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise GradientAttributionError(f"input_ids must have shape (B, n); got {tuple(input_ids.shape)}.")
    targets = list(targets)
    if len(targets) != input_ids.shape[0]:
        raise GradientAttributionError(
            f"{len(targets)} target(s) for a batch of {input_ids.shape[0]} sequence(s): give one per row.")
    device = model_device(model)
    input_ids = input_ids.to(device=device, dtype=torch.long)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    else:
        attention_mask = attention_mask.reshape(input_ids.shape).to(device=device, dtype=torch.long)
    for b, target in enumerate(targets):
        _check_model_and_target(model, target, input_ids.shape[1])
        if isinstance(target, MLMTarget) and attention_mask[b, target.position] == 0:
            raise GradientAttributionError(f"MLMTarget.position={target.position} is a padded position.")
    kinds = {(type(t).__name__, t.resolved_score(), getattr(t, "foil_id", 0) is None) for t in targets}
    if len(kinds) > 1:
        raise GradientAttributionError(
            "All targets of a batch must be of one type and score, and all or none must have a foil; "
            f"got {sorted(kinds)}. Split the batch.")
    if isinstance(targets[0], ClassTarget) and any(t.class_index is None for t in targets):
        pred = _predicted_classes(model, input_ids, attention_mask)
        targets = [t if t.class_index is not None else replace(t, class_index=p) for t, p in zip(targets, pred)]
    return input_ids, attention_mask, targets


@torch.no_grad()
def _predicted_classes(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[int]:
    device = model_device(model)
    logits = _logits(model(input_ids=input_ids.to(device),
                           attention_mask=None if attention_mask is None else attention_mask.to(device)))
    return [int(c) for c in logits.argmax(-1).tolist()]


def _single(input_ids: torch.Tensor) -> torch.Tensor:
    """The one-sequence functions take ``(1, n)`` or ``(n,)`` ids."""
    if not torch.is_tensor(input_ids):
        raise GradientAttributionError("input_ids must be an integer torch tensor of shape (1, n).")
    ids = input_ids.unsqueeze(0) if input_ids.dim() == 1 else input_ids
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise GradientAttributionError(
            f"input_ids must have shape (1, n); got {tuple(input_ids.shape)}. Use batch_attribute for a batch.")
    return ids


@torch.no_grad()
def resolve_target(model: nn.Module, input_ids: torch.Tensor, target: Target,
                   attention_mask: torch.Tensor | None = None) -> Target:
    """Replace ``ClassTarget(class_index=None)`` by the class the model predicts; else no-op."""
    if isinstance(target, ClassTarget) and target.class_index is None:
        return replace(target, class_index=_predicted_classes(model, input_ids, attention_mask)[0])
    return target


# --------------------------------------------------------------------------------------------
# The scored function, computed only where it is needed
# --------------------------------------------------------------------------------------------
def _target_tensors(targets: Sequence[Target], device: torch.device) -> tuple[torch.Tensor, ...]:
    """``(position, target_or_class, foil)`` as ``(B,)`` long tensors (-1 where unused)."""
    if isinstance(targets[0], MLMTarget):
        rows = [(t.position, t.target_id, -1 if t.foil_id is None else t.foil_id) for t in targets]
    else:
        rows = [(0, t.class_index, -1) for t in targets]
    return tuple(torch.tensor(col, dtype=torch.long, device=device) for col in zip(*rows))


def _mlm_score(model: nn.Module, hidden: torch.Tensor, position: torch.Tensor, target: torch.Tensor,
               foil: torch.Tensor, kind: str) -> torch.Tensor:
    """:func:`target_score` computed from the final hidden states ``(B, n, d)``, at ``position`` only."""
    transform, decoder = mlm_head(model)
    h = transform(hidden[torch.arange(hidden.shape[0], device=hidden.device), position])   # (B, d')
    if kind == "prob" and bool((foil < 0).any()):          # full-vocabulary softmax
        return torch.softmax(decoder(h), dim=-1).gather(1, target[:, None])[:, 0]

    def logit(ids: torch.Tensor) -> torch.Tensor:
        z = (h * decoder.weight[ids]).sum(-1)
        return z if decoder.bias is None else z + decoder.bias[ids]

    zt = logit(target)
    if kind == "logit":
        return zt
    return zt - logit(foil) if kind == "logit_diff" else torch.sigmoid(zt - logit(foil))


def _class_score(logits: torch.Tensor, cls: torch.Tensor, kind: str) -> torch.Tensor:
    idx = cls[:, None]
    return (logits if kind == "logit" else torch.softmax(logits, dim=-1)).gather(1, idx)[:, 0]


class _ScoreModule(nn.Module):
    """``f(input_ids, attention_mask, position, target, foil) -> (B,)``: the model's real forward and
    the score of each row's target (for an MLM the base model, then the head at the target only)."""

    def __init__(self, model: nn.Module, targets: Sequence[Target], score: str | None = None):
        super().__init__()
        self.model = model
        self.mlm = isinstance(targets[0], MLMTarget)
        self.kind = score or targets[0].resolved_score()

    def forward(self, input_ids, attention_mask, position, target, foil) -> torch.Tensor:
        if self.mlm:
            hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
            return _mlm_score(self.model, hidden, position, target, foil, self.kind)
        return _class_score(_logits(self.model(input_ids=input_ids, attention_mask=attention_mask)), target, self.kind)


def _encoder_blocks(model: nn.Module) -> list[nn.Module]:
    return [lm.layer for lm in encoder_layers(model)]


def attribution_layers(model: nn.Module, level: Level) -> list[nn.Module]:
    """Modules whose *outputs* captum hooks: the word embeddings for ``"input"``; for
    ``"layers"``, the modules producing ``hidden_states[0..L-1]`` (the inputs of layers 0..L-1)."""
    if level == "input":
        return [model.get_input_embeddings()]
    if level != "layers":
        raise GradientAttributionError(f"Unknown level {level!r}; choose one of {LEVELS}.")
    base = model.base_model
    first = getattr(base, "embeddings_project", None) or base.embeddings
    return [first] + _encoder_blocks(model)[:-1]


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


@contextlib.contextmanager
def _frozen(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """No parameter gradients while attributing (only gradients w.r.t. activations are needed).

    Not used for classifiers: their layer-wise path re-runs the blocks before the attributed layer,
    where captum's DeepLift hooks need tensors that require gradients."""
    flags = [(p, p.requires_grad) for p in model.parameters()] if enabled else []
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        with torch.enable_grad():
            yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


# --------------------------------------------------------------------------------------------
# Layer-wise functions f(h_l): the rest of the network from hidden_states[l]
# --------------------------------------------------------------------------------------------
@dataclass
class _LayerCalls:
    """What the encoder passed to each block besides the hidden states (masks...), captured by a
    pre-hook on a real forward, with its tensors pulled out so captum can expand them per step."""

    calls: list[tuple[list, dict]]      # per block: (positional args after h, keyword args)
    tensors: list[torch.Tensor]          # every tensor in `calls`, in order (replaced by slots)

    def rebuild(self, k: int, tensors: Sequence[torch.Tensor]) -> tuple[list, dict]:
        args, kwargs = self.calls[k]
        pick = lambda v: tensors[v.index] if isinstance(v, _Slot) else v  # noqa: E731
        return [pick(a) for a in args], {key: pick(v) for key, v in kwargs.items()}


@dataclass(frozen=True)
class _Slot:
    index: int


def _hidden_states_and_calls(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                             ) -> tuple[list[torch.Tensor], _LayerCalls]:
    """``hidden_states[0..L-1]`` (each block's input) and the other arguments of each block call
    (:func:`cmixlib.encoder.record_layer_calls`), tensors moved into slots."""
    inputs: list[torch.Tensor] = []
    calls: list[tuple[list, dict]] = []
    tensors: list[torch.Tensor] = []

    def slot(v):
        if torch.is_tensor(v):
            tensors.append(v)
            return _Slot(len(tensors) - 1)
        return v

    for args, kwargs, _ in record_layer_calls(model, ids, mask):
        kwargs = dict(kwargs)
        if args:
            h, rest = args[0], list(args[1:])
        else:
            h, rest = kwargs.pop("hidden_states"), []
        inputs.append(h)
        calls.append(([slot(a) for a in rest], {key: slot(v) for key, v in kwargs.items()}))
    return inputs, _LayerCalls(calls, tensors)


class _Tail(nn.Module):
    """``f(h, position, target, foil, *call_tensors)`` for ``h = hidden_states[start]`` of an MLM:
    the encoder blocks ``start..L-1`` called as the model calls them, then the head at the target
    only. Running only the remaining blocks is what makes layer-wise IG/DeepLift affordable."""

    def __init__(self, model: nn.Module, start: int, calls: _LayerCalls, kind: str, tap: bool = False):
        super().__init__()
        self.model = model
        self.start = start
        self.blocks = _encoder_blocks(model)
        self.calls = calls
        self.kind = kind
        self.tapped: dict[int, torch.Tensor] | None = {} if tap else None

    def forward(self, h, position, target, foil, *tensors):
        for k, blk in enumerate(self.blocks[self.start:], start=self.start):
            if self.tapped is not None and k > self.start and h.requires_grad:
                # the gradient (DeepLift: the multipliers) reaching hidden_states[k] in the backward pass
                h.register_hook(lambda g, k=k: self.tapped.__setitem__(k, g))
            args, kwargs = self.calls.rebuild(k, tensors)
            out = blk(h, *args, **kwargs)
            h = layer_output(out)
        return _mlm_score(self.model, h, position, target, foil, self.kind)


class _Substituted(nn.Module):
    """``f(h, position, target, foil, input_ids, attention_mask)`` for any model: the full forward on
    ``input_ids`` with ``hidden_states[start]`` replaced by ``h`` (used for classifiers, whose heads
    differ too much between architectures to call them directly)."""

    def __init__(self, model: nn.Module, start: int, kind: str):
        super().__init__()
        self.model = model
        self.layer = attribution_layers(model, "layers")[start]
        self.kind = kind

    def forward(self, h, position, target, foil, input_ids, attention_mask):
        def hook(module, inputs, output):
            return (h,) + tuple(output[1:]) if isinstance(output, tuple) else h

        handle = self.layer.register_forward_hook(hook)
        try:
            logits = _logits(self.model(input_ids=input_ids, attention_mask=attention_mask))
        finally:
            handle.remove()
        return _class_score(logits, target, self.kind)


def _check_tail(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, targets: Sequence[Target],
                got: torch.Tensor) -> None:
    """Raise if the fast layer-wise function disagrees with the model's own logits at the input
    (checked on the first row of the batch: the full-vocabulary logits are costly)."""
    with torch.no_grad():
        logits = _logits(model(input_ids=ids[:1], attention_mask=mask[:1]))
        want = target_score(logits, targets[0])
        got = got[:1]
    tol = 1e-4 if got.dtype == torch.float32 else 1e-8
    if not torch.allclose(got.detach().to(want.dtype), want, rtol=tol, atol=tol):
        raise GradientAttributionError(
            f"The layer-wise score of {type(model).__name__} does not reproduce the model's logits "
            f"(max difference {float((got.detach() - want).abs().max()):.3g}): this architecture is not supported "
            "by the layer-wise IG/DeepLift path.")


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
# Batched attribution: one function for all gradient methods
# --------------------------------------------------------------------------------------------
GRADIENT_METHODS: tuple[str, ...] = ("grad_l2", "grad_x_input_l2", "grad_x_input_abs",
                                     "integrated_gradients", "deeplift")
_TOKENS_PER_CHUNK = 16384   # IG: expanded (steps x batch) sequences are run in chunks of ~this many tokens


def _gradients_and_inputs(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, targets: Sequence[Target],
                          level: Level) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per hooked module, ``(B, n, d)`` gradients :math:`\\partial f/\\partial x` (captum
    ``LayerGradientXActivation`` without the multiplication) and the activations ``x`` themselves
    (a forward hook on the same modules, in the same pass)."""
    from captum.attr import LayerGradientXActivation

    layers = attribution_layers(model, level)
    acts: list[Any] = [None] * len(layers)

    def keep(module, inputs, output, k):
        acts[k] = layer_output(output).detach()

    handles = [layer.register_forward_hook(lambda m, i, o, k=k: keep(m, i, o, k)) for k, layer in enumerate(layers)]
    try:
        method = LayerGradientXActivation(_ScoreModule(model, targets), layers, multiply_by_inputs=False)
        grads = method.attribute(ids, additional_forward_args=(mask, *_target_tensors(targets, ids.device)))
    finally:
        for h in handles:
            h.remove()
    grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
    return grads, acts


def _baseline_batch(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                    baseline: int | str | torch.Tensor, tokenizer: Any) -> torch.Tensor:
    if torch.is_tensor(baseline):
        if baseline.dim() == 1:
            baseline = baseline.unsqueeze(0)
        if baseline.shape != ids.shape:
            raise GradientAttributionError(
                f"baseline id tensor has shape {tuple(baseline.shape)}, expected {tuple(ids.shape)}.")
        return baseline.to(ids.device, dtype=torch.long)
    tid = _token_id(model, baseline, tokenizer, "baseline")
    keep = torch.as_tensor(np.stack([special_positions(ids[b], mask[b], tokenizer) for b in range(ids.shape[0])]),
                           device=ids.device)
    return torch.where(keep, ids, torch.full_like(ids, tid))


def _path_attributions(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, targets: Sequence[Target],
                       level: Level, which: str, base_ids: torch.Tensor, *, n_steps: int, ig_method: str,
                       internal_batch_size: int | None, rescale_activations: bool, with_delta: bool = True,
                       ) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """IG (``which="ig"``) or DeepLift (``"dl"``) attributions ``(B, n, d)`` and convergence deltas
    ``(B,)`` for each attributed layer.

    Input level: captum ``LayerIntegratedGradients`` / ``LayerDeepLift`` on the word embeddings of
    the whole model. Layer level: captum ``IntegratedGradients`` / ``DeepLift`` on the function
    :math:`f(h_\\ell)` of ``hidden_states[ℓ]`` alone, with input :math:`h_\\ell(x)` and baseline
    :math:`h_\\ell(x')` (the same quantities captum's ``Layer*`` classes integrate, without
    re-running layers ``0..ℓ-1`` at every step: for an MLM only the blocks ``ℓ..L-1`` and the head
    at the target run, for a classifier the whole model with ``hidden_states[ℓ]`` substituted).
    """
    from captum.attr import DeepLift, IntegratedGradients, LayerDeepLift, LayerIntegratedGradients

    tg = _target_tensors(targets, ids.device)
    B, n = ids.shape
    ibs = internal_batch_size or B * max(1, _TOKENS_PER_CHUNK // (B * n))
    kind = targets[0].resolved_score()

    def run(explainer, inputs, baselines, extra):
        # the convergence delta costs two more forward passes: only computed when asked for
        if which == "ig":
            res = explainer.attribute(inputs, baselines=baselines, additional_forward_args=extra, n_steps=n_steps,
                                      method=ig_method, internal_batch_size=ibs, return_convergence_delta=with_delta)
        else:
            with warnings.catch_warnings(), _deeplift_activations(rescale_activations):
                warnings.filterwarnings("ignore", message=".*(hooks|non-linear|dtype of|Gradients cannot|require gradients).*")
                res = explainer.attribute(inputs, baselines=baselines, additional_forward_args=extra,
                                          return_convergence_delta=with_delta)
        return res if with_delta else (res, None)

    if level == "input":
        cls = LayerIntegratedGradients if which == "ig" else LayerDeepLift
        explainer = cls(_ScoreModule(model, targets), model.get_input_embeddings(), multiply_by_inputs=True)
        attr, delta = run(explainer, ids, base_ids, (mask, *tg))
        return [attr], [None if delta is None else delta.reshape(B)]
    mlm = isinstance(targets[0], MLMTarget)
    h_in, calls = _hidden_states_and_calls(model, ids, mask)
    h_base, _ = _hidden_states_and_calls(model, base_ids, mask)
    extra = (*tg, *calls.tensors)
    if mlm:
        with torch.no_grad():
            _check_tail(model, ids, mask, targets, _Tail(model, 0, calls, kind)(h_in[0], *extra))
    if mlm and which == "dl":
        # One DeepLift pass from layer 0 gives every layer: the forward activations of the tail from
        # layer l (on h_l(x) and h_l(x')) are those of the tail from layer 0, so the multipliers that
        # reach hidden_states[l] in its backward pass are those captum's LayerDeepLift(l) computes.
        f = _Tail(model, 0, calls, kind, tap=True)
        attr0, delta0 = run(DeepLift(f, multiply_by_inputs=True), h_in[0], h_base[0], extra)
        attrs = [attr0] + [(h_in[k] - h_base[k]) * f.tapped[k][:B] for k in range(1, len(h_in))]
        if delta0 is None:
            return attrs, [None] * len(attrs)
        diff = attr0.sum(dim=(1, 2)) - delta0.reshape(B)          # f(x) - f(x') per row
        return attrs, [a.sum(dim=(1, 2)) - diff for a in attrs]
    attrs, deltas = [], []
    for start in range(len(h_in)):
        if mlm:
            f = _Tail(model, start, calls, kind)
        else:
            f, extra = _Substituted(model, start, kind), (*tg, ids, mask)
        explainer = (IntegratedGradients if which == "ig" else DeepLift)(f, multiply_by_inputs=True)
        attr, delta = run(explainer, h_in[start], h_base[start], extra)
        attrs.append(attr)
        deltas.append(None if delta is None else delta.reshape(B))
    return attrs, deltas


def batch_attribute(model: nn.Module, input_ids: torch.Tensor, targets: Sequence[Target],
                    methods: Sequence[str] | str = ("grad_l2",), level: Level = "input", *,
                    attention_mask: torch.Tensor | None = None, tokenizer: Any = None,
                    baseline: int | str | torch.Tensor = "mask", n_steps: int = 50,
                    ig_method: str = "gausslegendre", aggregate: str = "sum", rescale_activations: bool = True,
                    internal_batch_size: int | None = None, return_delta: bool = False) -> dict[str, np.ndarray]:
    r"""Gradient attributions of a batch, several methods at once.

    ``input_ids`` ``(B, n)`` (padded; ``attention_mask`` marks the real tokens) and one target per
    row (all :class:`MLMTarget` or all :class:`ClassTarget`, with one score kind). ``methods`` from
    :data:`GRADIENT_METHODS`; the equations are those of :func:`grad_l2`, :func:`grad_x_input_l2`,
    :func:`grad_x_input_abs`, :func:`integrated_gradients` and :func:`deeplift` (``aggregate``
    applies to the last two). The three plain-gradient methods share one forward and backward pass.

    Returns ``{method: (B, n)}`` for ``level="input"``, ``{method: (B, L, n)}`` for ``"layers"``,
    padded positions 0; with ``return_delta`` also ``{method + "_delta": (B,) / (B, L)}`` for IG and
    DeepLift (:math:`\sum_{j,d} A_{jd} - (f(x) - f(x'))`). Rows equal the one-sequence functions'
    results up to float rounding (tested), so batching changes speed only.
    """
    methods = [methods] if isinstance(methods, str) else list(methods)
    unknown = [m for m in methods if m not in GRADIENT_METHODS]
    if unknown:
        raise GradientAttributionError(f"Unknown gradient method(s) {unknown}; choose from {GRADIENT_METHODS}.")
    _check_level(level)
    if int(n_steps) < 2:
        raise GradientAttributionError(f"n_steps must be >= 2 (captum's requirement); got {n_steps}.")
    if aggregate not in ("sum", "abs", "l2"):
        raise GradientAttributionError(f"Unknown aggregate {aggregate!r}; choose 'sum', 'abs' or 'l2'.")
    ids, mask, targets = _prepare(model, input_ids, attention_mask, targets)
    out: dict[str, torch.Tensor] = {}
    with _frozen(model, enabled=isinstance(targets[0], MLMTarget)):
        plain = [m for m in methods if m in ("grad_l2", "grad_x_input_l2", "grad_x_input_abs")]
        if plain:
            grads, acts = _gradients_and_inputs(model, ids, mask, targets, level)
            for m in plain:
                rows = [_aggregate(g, "l2") if m == "grad_l2" else
                        _aggregate(g * x, "l2" if m == "grad_x_input_l2" else "abs") for g, x in zip(grads, acts)]
                out[m] = torch.stack(rows, dim=1)
        for m, which in (("integrated_gradients", "ig"), ("deeplift", "dl")):
            if m in methods:
                base_ids = _baseline_batch(model, ids, mask, baseline, tokenizer)
                attrs, deltas = _path_attributions(
                    model, ids, mask, targets, level, which, base_ids, n_steps=int(n_steps), ig_method=ig_method,
                    internal_batch_size=internal_batch_size, rescale_activations=rescale_activations,
                    with_delta=return_delta)
                out[m] = torch.stack([_aggregate(a, aggregate) for a in attrs], dim=1)
                if return_delta:
                    out[m + "_delta"] = torch.stack(deltas, dim=1)
    pad = (mask == 0)[:, None, :]
    result = {}
    for m, v in out.items():
        if not m.endswith("_delta"):
            v = torch.where(pad, torch.zeros_like(v), v)
        v = _np(v)
        result[m] = v[:, 0] if level == "input" else v
    return result


def _one(model, input_ids, target, method, level, attention_mask, return_delta=False, **options):
    """One sequence through :func:`batch_attribute`: ``(n,)``/``(L, n)`` (and the delta)."""
    res = batch_attribute(model, _single(input_ids), [target], [method], level, attention_mask=attention_mask,
                          return_delta=return_delta, **options)
    out = res[method][0]
    return (out, np.atleast_1d(res[method + "_delta"][0])) if return_delta else out


def grad_l2(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
            attention_mask: torch.Tensor | None = None, level: Level = "input",
            tokenizer: Any = None) -> np.ndarray:
    r"""Gradient norm :math:`s_j = \lVert \partial f / \partial x_j \rVert_2`.

    ``x_j``: word embedding of token j (``level="input"``) or ``hidden_states[ℓ][j]``
    (``level="layers"``). Returns ``(n,)`` or ``(L, n)``. Batches: :func:`batch_attribute`.
    """
    return _one(model, input_ids, target, "grad_l2", level, attention_mask)


def grad_x_input_l2(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                    attention_mask: torch.Tensor | None = None, level: Level = "input",
                    tokenizer: Any = None) -> np.ndarray:
    r"""Gradient × input, L2 over dims: :math:`s_j = \lVert (\partial f / \partial x_j) \odot x_j \rVert_2`.

    GlobEnc's saliency aggregation. Returns ``(n,)`` or ``(L, n)``.
    """
    return _one(model, input_ids, target, "grad_x_input_l2", level, attention_mask)


def grad_x_input_abs(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                     attention_mask: torch.Tensor | None = None, level: Level = "input",
                     tokenizer: Any = None) -> np.ndarray:
    r"""Gradient × input, summed then absolute: :math:`s_j = \lvert (\partial f/\partial x_j)\cdot x_j \rvert`.

    Returns ``(n,)`` or ``(L, n)``.
    """
    return _one(model, input_ids, target, "grad_x_input_abs", level, attention_mask)


# --------------------------------------------------------------------------------------------
# Integrated gradients and DeepLift
# --------------------------------------------------------------------------------------------
def integrated_gradients(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                         attention_mask: torch.Tensor | None = None, level: Level = "input",
                         baseline: int | str | torch.Tensor = "mask", tokenizer: Any = None,
                         n_steps: int = 50, method: str = "gausslegendre",
                         internal_batch_size: int | None = None, aggregate: str = "sum",
                         return_delta: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""Integrated gradients (captum):

    .. math:: A_j = \sum_d (x_{jd} - x'_{jd}) \int_0^1
              \frac{\partial f(x' + \alpha (x - x'))}{\partial x_{jd}}\, d\alpha,
              \qquad \sum_j A_j \approx f(x) - f(x').

    ``x'`` is the representation of the baseline ids (see module docstring; default every
    non-special token -> [MASK], needing ``tokenizer`` or an integer ``baseline``). For
    ``level="layers"`` each layer is integrated separately: the path is the straight line between
    the input's and the baseline's ``hidden_states[ℓ]``, and only the rest of the network is
    differentiated (see :func:`batch_attribute`). ``method`` is captum's quadrature
    (Gauss-Legendre by default). ``aggregate``: ``"sum"`` (signed, default), ``"abs"`` or ``"l2"``.

    Returns ``(n,)`` / ``(L, n)``; with ``return_delta`` also the convergence delta
    :math:`\sum_{j,d} A_{jd} - (f(x) - f(x'))` as a ``(1,)`` / ``(L,)`` array.
    """
    return _one(model, input_ids, target, "integrated_gradients", level, attention_mask, return_delta,
                baseline=baseline, tokenizer=tokenizer, n_steps=n_steps, ig_method=method,
                internal_batch_size=internal_batch_size, aggregate=aggregate)


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
    r"""DeepLift, rescale rule (captum ``LayerDeepLift`` / ``DeepLift``, see :func:`batch_attribute`): :math:`A_j = \sum_d (x_{jd}-x'_{jd})\,m_{jd}`.

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
    return _one(model, input_ids, target, "deeplift", level, attention_mask, return_delta,
                baseline=baseline, tokenizer=tokenizer, aggregate=aggregate, rescale_activations=rescale_activations)


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
    ids, mask, (target,) = _prepare(model, _single(input_ids), attention_mask, [target])
    n = ids.shape[1]
    rid = _token_id(model, replacement, tokenizer, "blank-out replacement")
    score = _ScoreModule(model, [target], score="prob")
    tg = _target_tensors([target], ids.device)
    batch = torch.cat([ids, ids.repeat(n, 1)])
    batch[1 + torch.arange(n), torch.arange(n)] = rid
    masks = mask.repeat(n + 1, 1)
    step = batch_size or n + 1
    probs = torch.cat([score(batch[i:i + step], masks[i:i + step], *(t.expand(len(batch[i:i + step])) for t in tg))
                       for i in range(0, n + 1, step)])
    scores = probs[0] - probs[1:]
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
    ids, _, _ = _prepare(model, _single(input_ids), attention_mask, [target])
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
