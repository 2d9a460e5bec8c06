"""What the architecture modules share: the refusal error and reading modules by dotted path.

:func:`get_path` / :func:`has_path` read ``obj.a.b.c`` for ``"a.b.c"`` (the tables of
:mod:`cmixlib.models.arch` name parts this way); :func:`linear_weights` and :func:`norm_params` read
weights as stored.
"""
from __future__ import annotations

import operator
from typing import Any

import torch

__all__ = ["UnsupportedModelError", "get_path", "has_path", "linear_weights", "norm_params"]


class UnsupportedModelError(TypeError):
    """The model is not a post-LN BERT-family encoder that cmixlib can read.

    Examples
    --------
    >>> import torch, cmixlib
    >>> cmixlib.context_mixing(torch.nn.Linear(2, 2), None, {"input_ids": torch.tensor([[1, 2]])})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cmixlib.models.arch.UnsupportedModelError: cmixlib cannot read Linear (model_type='?'). Supported: ...
    """



UnsupportedModelError.__module__ = "cmixlib.models.arch"   # its public home (messages, pickling)


def get_path(obj: Any, path: str) -> Any:
    """``obj.a.b.c`` for ``path="a.b.c"``; AttributeError if any step is missing."""
    return operator.attrgetter(path)(obj)


def has_path(obj: Any, path: str) -> bool:
    """Whether :func:`get_path` finds ``path`` on ``obj``."""
    try:
        get_path(obj, path)
    except AttributeError:
        return False
    return True


def norm_params(module: torch.nn.Module) -> tuple[torch.Tensor, Any, float]:
    """(gamma, beta or None, eps) of a LayerNorm or an RMSNorm (``variance_epsilon`` or ``eps``),
    read as stored (the decoder path uses :func:`decoder_norm_params`)."""
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    return module.weight, getattr(module, "bias", None), float(eps)



def linear_weights(module: torch.nn.Module) -> tuple[torch.Tensor, Any]:
    """(W (out, in), b or None) of an ``nn.Linear`` or of GPT-2's ``Conv1D`` (W transposed)."""
    if type(module).__name__ == "Conv1D":
        return module.weight.t(), module.bias
    return module.weight, module.bias

