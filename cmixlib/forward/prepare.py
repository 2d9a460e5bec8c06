"""What every entry point does before its forward pass, in one place for encoders and decoders:
take a model or a :class:`~cmixlib.models.loading.ModelBundle` apart (:func:`unpack_model`),
refuse a model in training mode (:func:`require_eval`), find a supported encoder's layers
(:func:`eval_encoder_layers`) and spread ``rows`` over the sentences of a batch
(:func:`per_sentence_rows`).

:mod:`cmixlib.methods.dispatch` (the entry point), :mod:`cmixlib.forward.points`
(:func:`cmixlib.capture`) and the method modules (:mod:`cmixlib.methods.value_zeroing`,
:mod:`cmixlib.methods.hta`, :mod:`cmixlib.methods.decoder`) all start here, so the same mistake
gets the same error everywhere.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from cmixlib.forward.encoder import LayerParts, encoder_layers
from cmixlib.validation import InputError, check_model

__all__ = ["unpack_model", "require_eval", "eval_encoder_layers", "per_sentence_rows"]


def unpack_model(model: Any, tokenizer: Any) -> tuple[torch.nn.Module, Any]:
    """``(model, tokenizer)``, the model checked; a ModelBundle gives its own (its tokenizer unless
    one is given). The tokenizer is checked where raw text needs it
    (:func:`cmixlib.forward.encoding.encode`)."""
    if hasattr(model, "model") and hasattr(model, "tokenizer") and not isinstance(model, torch.nn.Module):
        model, tokenizer = model.model, tokenizer if tokenizer is not None else model.tokenizer
    return check_model(model), tokenizer


def require_eval(model: torch.nn.Module) -> None:
    """Refuse (:class:`~cmixlib.InputError`) a model in training mode, whose dropout would make
    every map random."""
    if model.training:
        raise InputError("model is in training mode (dropout is active, so the maps would be random): "
                         "call model.eval() first.")


def eval_encoder_layers(model: torch.nn.Module) -> list[LayerParts]:
    """The model's layers (:func:`cmixlib.forward.encoder.encoder_layers`: a supported family),
    refusing a model in training mode (:func:`require_eval`)."""
    mods = encoder_layers(model)
    require_eval(model)
    return mods


def per_sentence_rows(rows: Any, batch: int, name: str = "rows") -> list:
    """``rows`` for a batch (or one sentence, ``batch`` 1): the same rows for every sentence, or one
    entry per sentence when ``rows`` is a list of ``batch`` lists / arrays / None (``[[3], [5], None]``).
    A 0-d tensor or array is one position, like an int: ``[torch.tensor(0), torch.tensor(1)]``
    means ``[0, 1]``."""
    nested = isinstance(rows, (list, tuple)) and len(rows) > 0 and all(
        r is None or isinstance(r, (list, tuple))
        or (isinstance(r, (np.ndarray, torch.Tensor)) and r.ndim > 0) for r in rows)
    if not nested:
        return [rows] * batch
    if len(rows) != batch:
        raise InputError(f"{name} has {len(rows)} per-sentence entries for a batch of {batch} sentences: "
                         "give one entry (a list of positions or None) per sentence.")
    return list(rows)
