r"""The random baseline: seeded uniform scores, :math:`s_j \sim U(0, 1)`.

Owns :func:`random_scores` (and its entry in :data:`cmixlib.gradients.METHODS`). Every method
should beat it; it gives the chance level of a correlation or ranking metric.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from cmixlib.models import arch
from cmixlib.validation import check_int, check_positive_int
from cmixlib.gradients.layers import Level, check_level
from cmixlib.gradients.targets import (Target, attribution_errors, extra_inputs, prepare_batch,
                                       single_sequence)

__all__ = ["random_scores"]


def random_scores(n: int, *, num_layers: int | None = None, seed: int = 0) -> np.ndarray:
    """Uniform(0, 1) scores from ``numpy.random.default_rng(seed)``: ``(n,)`` or ``(num_layers, n)``.

    ``n`` and ``num_layers`` (or None) integers >= 1, ``seed`` an integer >= 0 (None: unseeded);
    else :class:`~cmixlib.gradients.GradientAttributionError` (TypeError for a non-integer)."""
    with attribution_errors():
        n = check_positive_int(n, "n")
        num_layers = check_positive_int(num_layers, "num_layers", allow_none=True)
        seed = check_int(seed, "seed", minimum=0, allow_none=True)
    rng = np.random.default_rng(seed)
    return rng.uniform(size=n if num_layers is None else (num_layers, n))


def random_method(model: nn.Module, input_ids: torch.Tensor, target: Target, *,
                   attention_mask: torch.Tensor | None = None, level: Level = "input",
                   seed: int = 0, tokenizer: Any = None, token_type_ids: torch.Tensor | None = None,
                   position_ids: torch.Tensor | None = None) -> np.ndarray:
    """:func:`random_scores` shaped like the other methods' output for this input and ``level``
    (the extra inputs are checked like the other methods', and do not change the scores)."""
    check_level(level)
    ids, _, _, _ = prepare_batch(model, single_sequence(input_ids), attention_mask, [target],
                            extra_inputs(token_type_ids, position_ids))
    layers = None if level == "input" else arch.num_layers(model)
    return random_scores(ids.shape[1], num_layers=layers, seed=seed)
