r"""Gradient-based, erasure (blank-out) and random baselines for token attribution.

These are the *baselines* the three papers compare context-mixing scores against: Value Zeroing
(Mohebbi et al. 2023) uses Gradient×Input, Integrated Gradients and DeepLift **layer-wise** from
the MLM head (Figures 1-2) and blank-out with the probability over target and foil (§7); ALTI
(Ferrando et al. 2022) the gradient L2 norm on SST-2 and blank-out on SVA; GlobEnc (Modarressi
et al. 2022) gradient×input aggregated with an L2 norm. Gradients come from
`captum <https://captum.ai>`_, through its public API, on the model's own, unmodified modules.

Map of the package (each module's docstring gives its equations):

* :mod:`.targets`: what is explained, :math:`f`: :class:`MLMTarget` (:math:`z_t`,
  :math:`z_t - z_f` or :math:`\sigma(z_t - z_f)` at one position), :class:`ClassTarget`
  (:math:`z_c` or :math:`\mathrm{softmax}(z)_c`), :func:`target_score`,
  :func:`target_probability`, :func:`resolve_target`, :func:`special_positions`;
* :mod:`.scores`: the same :math:`f` as the forward function captum differentiates,
  :class:`ScoreModule` with :func:`target_tensors`;
* :mod:`.layers`: where, :math:`x_j`: the word embeddings (``level="input"``) or
  ``hidden_states[ℓ]`` entering layer :math:`\ell` (``level="layers"``, rows :math:`0..L-1`):
  :data:`LEVELS`, :func:`attribution_layers`, :func:`substitute_word_embeddings`;
* :mod:`.captum_methods`: :math:`\lVert g_j\rVert`, :math:`\lVert g_j \odot x_j\rVert`,
  :math:`|g_j\cdot x_j|`, integrated gradients and DeepLift (:math:`g_j = \partial f/\partial
  x_j`, baselines of [MASK] ids): :func:`batch_attribute` (a padded batch, several methods);
* :mod:`.one_sequence`: the one-sequence :func:`grad_l2`, :func:`grad_x_input_l2`,
  :func:`grad_x_input_abs`, :func:`integrated_gradients`, :func:`deeplift`;
* :mod:`.rescale`: DeepLift's rescale rule for GELU-type activation modules,
  :func:`deeplift_rescale`;
* ``cmixlib.gradients.target_rows``: the last block's FFN at the scored row only (exact; internal);
* :mod:`.erasure`: :func:`blank_out`, :math:`p(y|x) - p(y|x_{j\leftarrow r})`;
* :mod:`.random_baseline`: :func:`random_scores`, :math:`U(0,1)`;
* here: :func:`attribute`, one entry point for all of :data:`METHODS`.

Scores are **not** normalised; do that downstream. ``mlm_head`` is
:func:`cmixlib.models.arch.mlm_head`, re-exported.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
from torch import nn

from cmixlib.models.arch import mlm_head
from cmixlib.gradients.captum_methods import GRADIENT_METHODS, batch_attribute
from cmixlib.gradients.one_sequence import (deeplift, grad_l2, grad_x_input_abs, grad_x_input_l2,
                                            integrated_gradients)
from cmixlib.gradients.erasure import blank_out, blank_out_method
from cmixlib.gradients.layers import LEVELS, Level, attribution_layers, substitute_word_embeddings
from cmixlib.gradients.random_baseline import random_method, random_scores
from cmixlib.gradients.rescale import deeplift_rescale, rescaled_activation_types
from cmixlib.gradients.scores import ScoreModule, target_tensors
from cmixlib.gradients.targets import (ClassTarget, GradientAttributionError, MLMTarget, Target,
                                       resolve_target, special_positions, target_probability,
                                       target_score)

__all__ = [
    "MLMTarget", "ClassTarget", "Target", "GradientAttributionError", "METHODS", "LEVELS",
    "attribute", "batch_attribute", "GRADIENT_METHODS", "mlm_head", "grad_l2", "grad_x_input_l2",
    "grad_x_input_abs", "integrated_gradients", "deeplift", "blank_out", "random_scores",
    "resolve_target", "target_score", "target_probability", "substitute_word_embeddings",
    "attribution_layers", "special_positions", "ScoreModule", "target_tensors", "deeplift_rescale",
    "rescaled_activation_types",
]

#: Every baseline by name -> its function ``(model, input_ids, target, **options)`` (see :func:`attribute`).
METHODS: dict[str, Callable[..., Any]] = {
    "grad_l2": grad_l2,
    "grad_x_input_l2": grad_x_input_l2,
    "grad_x_input_abs": grad_x_input_abs,
    "integrated_gradients": integrated_gradients,
    "deeplift": deeplift,
    "blank_out": blank_out_method,
    "random": random_method,
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
