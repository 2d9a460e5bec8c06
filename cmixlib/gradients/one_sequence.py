r"""The one-sequence gradient baselines: :func:`grad_l2`, :func:`grad_x_input_l2`,
:func:`grad_x_input_abs`, :func:`integrated_gradients` and :func:`deeplift`, each one sequence
``(1, n)`` or ``(n,)`` through :func:`cmixlib.gradients.captum_methods.batch_attribute` (whose
docstring gives the equations, the baselines and how captum is used). Each returns ``(n,)``
(``level="input"``) or ``(L, n)`` (``level="layers"``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from cmixlib.gradients.captum_methods import batch_attribute
from cmixlib.gradients.layers import Level
from cmixlib.gradients.targets import Target, single_sequence

__all__ = ["grad_l2", "grad_x_input_l2", "grad_x_input_abs", "integrated_gradients", "deeplift"]


def _one(model, input_ids, target, method, level, attention_mask, return_delta=False, **options):
    """One sequence through :func:`batch_attribute`: ``(n,)``/``(L, n)`` (and the delta).
    ``options`` may hold ``token_type_ids`` / ``position_ids`` (None: not given)."""
    res = batch_attribute(model, single_sequence(input_ids), [target], [method], level,
                          attention_mask=attention_mask, return_delta=return_delta, **options)
    out = res[method][0]
    return (out, np.atleast_1d(res[method + "_delta"][0])) if return_delta else out


def grad_l2(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
            attention_mask: torch.Tensor | None = None, level: Level = "input",
            tokenizer: Any = None, token_type_ids: torch.Tensor | None = None,
            position_ids: torch.Tensor | None = None) -> np.ndarray:
    r"""Gradient norm :math:`s_j = \lVert \partial f / \partial x_j \rVert_2`.

    ``x_j``: word embedding of token j (``level="input"``) or ``hidden_states[ℓ][j]``
    (``level="layers"``). Returns ``(n,)`` or ``(L, n)``. Batches: :func:`batch_attribute`.
    """
    return _one(model, input_ids, target, "grad_l2", level, attention_mask,
                token_type_ids=token_type_ids, position_ids=position_ids)


def grad_x_input_l2(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                    attention_mask: torch.Tensor | None = None, level: Level = "input",
                    tokenizer: Any = None, token_type_ids: torch.Tensor | None = None,
            position_ids: torch.Tensor | None = None) -> np.ndarray:
    r"""Gradient × input, L2 over dims: :math:`s_j = \lVert (\partial f/\partial x_j) \odot x_j \rVert_2`.

    GlobEnc's saliency aggregation. Returns ``(n,)`` or ``(L, n)``.
    """
    return _one(model, input_ids, target, "grad_x_input_l2", level, attention_mask,
                token_type_ids=token_type_ids, position_ids=position_ids)


def grad_x_input_abs(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                     attention_mask: torch.Tensor | None = None, level: Level = "input",
                     tokenizer: Any = None, token_type_ids: torch.Tensor | None = None,
            position_ids: torch.Tensor | None = None) -> np.ndarray:
    r"""Gradient × input, summed then absolute: :math:`s_j = \lvert (\partial f/\partial x_j)\cdot x_j \rvert`.

    Returns ``(n,)`` or ``(L, n)``.
    """
    return _one(model, input_ids, target, "grad_x_input_abs", level, attention_mask,
                token_type_ids=token_type_ids, position_ids=position_ids)


def integrated_gradients(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                         attention_mask: torch.Tensor | None = None, level: Level = "input",
                         baseline: int | str | torch.Tensor = "mask", tokenizer: Any = None,
                         n_steps: int = 50, method: str = "gausslegendre",
                         internal_batch_size: int | None = None, aggregate: str = "sum",
                         return_delta: bool = False, token_type_ids: torch.Tensor | None = None,
                         position_ids: torch.Tensor | None = None,
                         ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""Integrated gradients (captum):

    .. math:: A_j = \sum_d (x_{jd} - x'_{jd}) \int_0^1
              \frac{\partial f(x' + \alpha (x - x'))}{\partial x_{jd}}\, d\alpha,
              \qquad \sum_j A_j \approx f(x) - f(x').

    ``x'`` is the representation of the baseline ids (module docstring; default every non-special
    token -> [MASK], needing ``tokenizer`` or an integer ``baseline``). For ``level="layers"`` each
    layer is integrated separately: the path is the straight line between the input's and the
    baseline's ``hidden_states[ℓ]``, and only the rest of the network is differentiated.
    ``method`` is captum's quadrature (Gauss-Legendre by default). ``aggregate``: ``"sum"``
    (signed, default), ``"abs"`` or ``"l2"``.

    Returns ``(n,)`` / ``(L, n)``; with ``return_delta`` also the convergence delta
    :math:`\sum_{j,d} A_{jd} - (f(x) - f(x'))` as a ``(1,)`` / ``(L,)`` array.
    """
    return _one(model, input_ids, target, "integrated_gradients", level, attention_mask, return_delta,
                baseline=baseline, tokenizer=tokenizer, n_steps=n_steps, ig_method=method,
                internal_batch_size=internal_batch_size, aggregate=aggregate,
                token_type_ids=token_type_ids, position_ids=position_ids)


def deeplift(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
             attention_mask: torch.Tensor | None = None, level: Level = "input",
             baseline: int | str | torch.Tensor = "mask", tokenizer: Any = None,
             aggregate: str = "sum", rescale_activations: bool = True,
             return_delta: bool = False, token_type_ids: torch.Tensor | None = None,
             position_ids: torch.Tensor | None = None,
             ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""DeepLift, rescale rule (captum): :math:`A_j = \sum_d (x_{jd}-x'_{jd})\,m_{jd}`.

    The multipliers :math:`m` are gradients in which the backward pass of every non-linearity
    that captum recognises as an ``nn.Module`` **of a known type** (``nn.ReLU``, ``nn.Tanh``,
    ``nn.Sigmoid``, ``nn.Softmax``, ...) is replaced by the rescale multiplier
    :math:`\Delta y / \Delta x` between input and baseline. Out of the box, most non-linearities
    of a Hugging Face encoder are *not* such modules: the FFN's GELU is
    ``transformers.activations.GELUActivation``, the attention softmax and RoBERTa's LM-head GELU
    are functional calls, and LayerNorm is not treated as a non-linearity at all. Captum back-
    propagates those with their ordinary gradient, so plain captum DeepLift on BERT is nearly
    gradient × (x − x') (exactly so for the MLM models here).

    ``rescale_activations=True`` (default) gives, for this call only, the element-wise activation
    modules (GELU variants, SiLU, Mish; :func:`.rescale.rescaled_activation_types`) the same
    rescale rule (:func:`.rescale.deeplift_rescale`), so the FFN GELUs are handled as DeepLift
    prescribes; ``False`` gives captum's out-of-the-box behaviour. Either way the attention
    softmax, the attention product and LayerNorm use plain gradients, so summation-to-delta
    (:math:`\sum A = f(x) - f(x')`) holds only approximately: check ``return_delta``. The
    ``nn.Tanh`` of the BERT/ELECTRA pooler and the ``nn.ReLU`` of DistilBERT's classifier always get
    the rescale rule. Captum's warnings about hooks on non-linear modules are silenced.

    Baseline and ``aggregate`` as in :func:`integrated_gradients`. Returns ``(n,)``/``(L, n)``,
    with ``return_delta`` also :math:`\sum A - (f(x)-f(x'))` per row.
    """
    return _one(model, input_ids, target, "deeplift", level, attention_mask, return_delta,
                baseline=baseline, tokenizer=tokenizer, aggregate=aggregate,
                rescale_activations=rescale_activations, token_type_ids=token_type_ids,
                position_ids=position_ids)
