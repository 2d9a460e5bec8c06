r"""Gradient, gradient × input, integrated gradients and DeepLift through captum, batched.

Owns :func:`batch_attribute` (a padded batch, several methods at once) and
:data:`GRADIENT_METHODS`; the one-sequence functions :func:`~.one_sequence.grad_l2`,
:func:`~.one_sequence.grad_x_input_l2`, :func:`~.one_sequence.grad_x_input_abs`,
:func:`~.one_sequence.integrated_gradients` and :func:`~.one_sequence.deeplift` run one row
through it (:mod:`cmixlib.gradients.one_sequence`). With
:math:`g_j = \partial f/\partial x_j` (:math:`f`: :mod:`.targets`; :math:`x_j`: :mod:`.layers`),
each returns one value per token:

=========================  =========================================================
``grad_l2``                :math:`\lVert g_j \rVert_2`
``grad_x_input_l2``        :math:`\lVert g_j \odot x_j \rVert_2`
``grad_x_input_abs``       :math:`\lvert g_j \cdot x_j \rvert = |\sum_d g_{jd} x_{jd}|`
``integrated_gradients``   :math:`A_j = \sum_d (x_{jd}-x'_{jd}) \int_0^1 g_{jd}(x'+\alpha(x-x'))d\alpha`
``deeplift``               :math:`A_j = \sum_d (x_{jd}-x'_{jd})\, m_{jd}` (DeepLift multipliers)
=========================  =========================================================

IG and DeepLift default to the signed sum over dimensions (``aggregate="sum"``; completeness
:math:`\sum_j A_j \approx f(x)-f(x')` holds for IG); ``"l2"`` (ALTI's ``ig_l2``) and ``"abs"``
are options. Scores are **not** normalised.

**Baselines (IG, DeepLift)** are *input-id* sequences: every token replaced by ``baseline``
([MASK] by default, as in the ALTI code; also ``"pad"``, ``"unk"``, an id, or a full ``(1, n)`` id
tensor) with the special tokens kept; at layer :math:`\ell` the baseline is the layer-:math:`\ell`
representation of that sequence. (RoBERTa derives position ids from the pad id, so a ``"pad"``
baseline also moves its positions; prefer ``"mask"`` there.)

How captum is used (on the model's own, unmodified modules):

* grad-L2 and the G×I variants share one forward and backward pass (``LayerGradientXActivation``)
  that gives the gradient at every hooked layer;
* input-level IG: ``IntegratedGradients`` of the score as a function of the looked-up word
  embeddings (``layers.WordEmbeddingScore``), which gives ``LayerIntegratedGradients``' numbers
  on the word-embedding module (tested) without the two forwards that class runs only to read
  the embeddings; input-level DeepLift: ``LayerDeepLift`` on the word embeddings;
* **layer-wise IG** integrates, for each layer :math:`\ell`, :math:`f(h_\ell)` alone
  (``IntegratedGradients``; for an MLM only blocks :math:`\ell..L-1` and the head at the target
  run at each step), which gives ``LayerIntegratedGradients``' numbers (tested);
* **layer-wise DeepLift** of an MLM is a single ``DeepLift`` pass from layer 0: the multipliers
  reaching ``hidden_states[ℓ]`` in it are exactly ``LayerDeepLift``'s at layer :math:`\ell`
  (tested), because the forward activations the rescale rule compares are the same;
* element-wise activations get the rescale rule through :func:`.rescale.deeplift_rescale`.

Work that cannot change the numbers is skipped: no autograd graph for the parameters (except on
a classifier's layer-wise path, see :func:`_frozen`); the last block's FFN runs at the scored row
only (the MLM target, a classifier's first token; ``cmixlib.gradients.target_rows``); IG and DeepLift share the
layer-wise hidden states of one call; no convergence delta unless asked for.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from cmixlib.forward.encoder import layer_output
from cmixlib.gradients.layers import (LayerCalls, Level, MLMTail, SubstitutedForward,
                                      WordEmbeddingScore, attribution_layers, check_level,
                                      check_tail, hidden_states_and_calls)
from cmixlib.gradients.rescale import deeplift_rescale
from cmixlib.gradients.target_rows import first_row_head
from cmixlib.gradients.scores import ScoreModule, target_tensors
from cmixlib.gradients.targets import (GradientAttributionError, MLMTarget, Target, extra_inputs,
                                       prepare_batch, special_positions, token_id)

__all__ = ["GRADIENT_METHODS", "batch_attribute", "grad_l2", "grad_x_input_l2", "grad_x_input_abs",
           "integrated_gradients", "deeplift"]

#: The gradient methods of this module by name (the gradient entries of :data:`cmixlib.gradients.METHODS`).
GRADIENT_METHODS: tuple[str, ...] = ("grad_l2", "grad_x_input_l2", "grad_x_input_abs",
                                     "integrated_gradients", "deeplift")
_TOKENS_PER_CHUNK = 16384   # IG: expanded (steps x batch) sequences run in chunks of ~this many tokens


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


@contextlib.contextmanager
def _frozen(model: nn.Module, enabled: bool = True) -> Iterator[None]:
    """No parameter gradients while attributing (only gradients w.r.t. activations are needed):
    autograd records nothing for the weights. (Captum's ``torch.autograd.grad`` calls compute no
    weight gradients either way, so this saves bookkeeping, not the backward's matrix products.)

    Not used for a classifier's layer-wise IG/DeepLift: that path re-runs the blocks before the
    attributed layer, where captum's DeepLift hooks need tensors that require gradients."""
    flags = [(p, p.requires_grad) for p in model.parameters()] if enabled else []
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        with torch.enable_grad():
            yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def _gradients_and_inputs(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                          targets: Sequence[Target], level: Level, rows_only: bool = False,
                          extras: dict[str, torch.Tensor] | None = None,
                          ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per hooked module, ``(B, n, d)`` gradients :math:`\\partial f/\\partial x` (captum
    ``LayerGradientXActivation`` without the multiplication) and the activations ``x`` themselves
    (a forward hook on the same modules, in the same pass)."""
    from captum.attr import LayerGradientXActivation

    layers = attribution_layers(model, level)
    acts: list[Any] = [None] * len(layers)

    def keep(module, inputs, output, k):
        acts[k] = layer_output(output).detach()

    handles = [layer.register_forward_hook(lambda m, i, o, k=k: keep(m, i, o, k))
               for k, layer in enumerate(layers)]
    try:
        extras = extras or {}
        method = LayerGradientXActivation(
            ScoreModule(model, targets, target_rows_only=rows_only, extra_names=tuple(extras)),
            layers, multiply_by_inputs=False)
        grads = method.attribute(ids, additional_forward_args=(
            mask, *target_tensors(targets, ids.device), *extras.values()))
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
    tid = token_id(model, baseline, tokenizer, "baseline")
    keep = torch.as_tensor(np.stack([special_positions(ids[b], mask[b], tokenizer)
                                     for b in range(ids.shape[0])]), device=ids.device)
    return torch.where(keep, ids, torch.full_like(ids, tid))


def _layer_states(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                  targets: Sequence[Target], base_ids: torch.Tensor,
                  extras: dict[str, torch.Tensor] | None = None,
                  ) -> tuple[list[torch.Tensor], list[torch.Tensor], LayerCalls]:
    """``hidden_states[0..L-1]`` of the input and of the baseline ids and the blocks' other
    arguments (one forward each, shared by IG and DeepLift); for an MLM the fast tail from layer
    0 is checked against the model's own logits on the first row (:func:`.check_tail`)."""
    h_in, calls = hidden_states_and_calls(model, ids, mask, extras)
    h_base, _ = hidden_states_and_calls(model, base_ids, mask, extras)
    if isinstance(targets[0], MLMTarget):
        B = ids.shape[0]
        first = [t[:1] if t.dim() and t.shape[0] == B else t for t in calls.tensors]
        tg = target_tensors(targets[:1], ids.device)
        with torch.no_grad():
            got = MLMTail(model, 0, calls, targets[0].resolved_score())(h_in[0][:1], *tg, *first)
        check_tail(model, ids, mask, targets, got, extras)
    return h_in, h_base, calls


def _path_attributions(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                       targets: Sequence[Target], level: Level, which: str, base_ids: torch.Tensor, *,
                       n_steps: int, ig_method: str, internal_batch_size: int | None,
                       rescale_activations: bool, with_delta: bool = True,
                       states: tuple[list[torch.Tensor], list[torch.Tensor], LayerCalls] | None = None,
                       rows_only: bool = False, extras: dict[str, torch.Tensor] | None = None,
                       ) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """IG (``which="ig"``) or DeepLift (``"dl"``) attributions ``(B, n, d)`` and convergence deltas
    ``(B,)`` for each attributed layer (see the module docstring for which captum class runs).
    ``states``: :func:`_layer_states` of the batch (``level="layers"``), computed here if None;
    ``rows_only``: :func:`first_row_head`'s answer (input level); ``extras``: the extra inputs
    (``token_type_ids``...), passed with the mask to every forward."""
    from captum.attr import DeepLift, IntegratedGradients, LayerDeepLift

    tg = target_tensors(targets, ids.device)
    extras = extras or {}
    names, ex = tuple(extras), tuple(extras.values())
    B, n = ids.shape
    ibs = internal_batch_size or B * max(1, _TOKENS_PER_CHUNK // (B * n))
    kind = targets[0].resolved_score()

    def run(explainer, inputs, baselines, extra):
        # the convergence delta costs two more forward passes: only computed when asked for
        if which == "ig":
            res = explainer.attribute(inputs, baselines=baselines, additional_forward_args=extra,
                                      n_steps=n_steps, method=ig_method, internal_batch_size=ibs,
                                      return_convergence_delta=with_delta)
        else:
            with warnings.catch_warnings(), deeplift_rescale(model, rescale_activations):
                warnings.filterwarnings(
                    "ignore", message=".*(hooks|non-linear|dtype of|Gradients cannot|require gradients).*")
                res = explainer.attribute(inputs, baselines=baselines, additional_forward_args=extra,
                                          return_convergence_delta=with_delta)
        return res if with_delta else (res, None)

    if level == "input":
        score = ScoreModule(model, targets, target_rows_only=rows_only, extra_names=names)
        emb = model.get_input_embeddings()
        if which == "ig":       # the embeddings looked up, not read from two extra forwards
            with torch.no_grad():
                x, x_base = emb(ids), emb(base_ids)
            explainer = IntegratedGradients(WordEmbeddingScore(model, score), multiply_by_inputs=True)
            attr, delta = run(explainer, x, x_base, (ids, mask, *tg, *ex))
        else:
            attr, delta = run(LayerDeepLift(score, emb, multiply_by_inputs=True), ids, base_ids,
                              (mask, *tg, *ex))
        return [attr], [None if delta is None else delta.reshape(B)]
    mlm = isinstance(targets[0], MLMTarget)
    h_in, h_base, calls = states or _layer_states(model, ids, mask, targets, base_ids, extras)
    extra = (*tg, *calls.tensors)
    if mlm and which == "dl":
        # One DeepLift pass from layer 0 gives every layer: the forward activations of the tail from
        # layer l (on h_l(x) and h_l(x')) are those of the tail from layer 0, so the multipliers that
        # reach hidden_states[l] in its backward pass are those captum's LayerDeepLift(l) computes.
        f = MLMTail(model, 0, calls, kind, tap=True)
        attr0, delta0 = run(DeepLift(f, multiply_by_inputs=True), h_in[0], h_base[0], extra)
        attrs = [attr0] + [(h_in[k] - h_base[k]) * f.tapped[k][:B] for k in range(1, len(h_in))]
        if delta0 is None:
            return attrs, [None] * len(attrs)
        diff = attr0.sum(dim=(1, 2)) - delta0.reshape(B)          # f(x) - f(x') per row
        return attrs, [a.sum(dim=(1, 2)) - diff for a in attrs]
    attrs, deltas = [], []
    for start in range(len(h_in)):
        if mlm:
            f = MLMTail(model, start, calls, kind)
        else:
            f, extra = SubstitutedForward(model, start, kind, names), (*tg, ids, mask, *ex)
        explainer = (IntegratedGradients if which == "ig" else DeepLift)(f, multiply_by_inputs=True)
        attr, delta = run(explainer, h_in[start], h_base[start], extra)
        attrs.append(attr)
        deltas.append(None if delta is None else delta.reshape(B))
    return attrs, deltas


def batch_attribute(model: nn.Module, input_ids: torch.Tensor, targets: Sequence[Target],
                    methods: Sequence[str] | str = ("grad_l2",), level: Level = "input", *,
                    attention_mask: torch.Tensor | None = None, tokenizer: Any = None,
                    baseline: int | str | torch.Tensor = "mask", n_steps: int = 50,
                    ig_method: str = "gausslegendre", aggregate: str = "sum",
                    rescale_activations: bool = True, internal_batch_size: int | None = None,
                    return_delta: bool = False, token_type_ids: torch.Tensor | None = None,
                    position_ids: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    r"""Gradient attributions of a batch, several methods at once.

    ``input_ids`` ``(B, n)`` (padded; ``attention_mask`` marks the real tokens) and one target per
    row (all :class:`MLMTarget` or all :class:`ClassTarget`, with one score kind);
    ``token_type_ids`` / ``position_ids`` (``(B, n)``, optional: a sentence pair's segment ids)
    go to every forward pass with the mask, so :math:`f` is the model's own. ``methods`` from
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
        raise GradientAttributionError(
            f"Unknown gradient method(s) {unknown}; choose from {GRADIENT_METHODS}.")
    check_level(level)
    if int(n_steps) < 2:
        raise GradientAttributionError(f"n_steps must be >= 2 (captum's requirement); got {n_steps}.")
    if aggregate not in ("sum", "abs", "l2"):
        raise GradientAttributionError(f"Unknown aggregate {aggregate!r}; choose 'sum', 'abs' or 'l2'.")
    ids, mask, targets, extras = prepare_batch(model, input_ids, attention_mask, targets,
                                          extra_inputs(token_type_ids, position_ids))
    out: dict[str, torch.Tensor] = {}
    mlm = isinstance(targets[0], MLMTarget)
    plain = [m for m in methods if m in ("grad_l2", "grad_x_input_l2", "grad_x_input_abs")]
    path = [(m, w) for m, w in (("integrated_gradients", "ig"), ("deeplift", "dl")) if m in methods]
    rows_only = (bool(plain) or level == "input") and first_row_head(model, ids, mask, targets,
                                                                      extras)
    if plain:
        with _frozen(model):      # gradients w.r.t. activations only: no parameter gradients
            grads, acts = _gradients_and_inputs(model, ids, mask, targets, level, rows_only, extras)
        for m in plain:
            rows = [_aggregate(g, "l2") if m == "grad_l2" else
                    _aggregate(g * x, "l2" if m == "grad_x_input_l2" else "abs")
                    for g, x in zip(grads, acts)]
            out[m] = torch.stack(rows, dim=1)
    # a classifier's layer-wise path re-runs the blocks below the layer (see _frozen)
    with _frozen(model, enabled=mlm or level == "input"):
        base_ids = _baseline_batch(model, ids, mask, baseline, tokenizer) if path else None
        states = (_layer_states(model, ids, mask, targets, base_ids, extras)
                  if path and level == "layers" else None)
        for m, which in path:
            attrs, deltas = _path_attributions(
                model, ids, mask, targets, level, which, base_ids, n_steps=int(n_steps),
                ig_method=ig_method, internal_batch_size=internal_batch_size,
                rescale_activations=rescale_activations, with_delta=return_delta, states=states,
                rows_only=rows_only, extras=extras)
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
