"""From what a user gives to what the model runs on: :func:`encode_inputs` turns a text, a list
of texts or a mapping of ids (a tokenizer's output) into checked, padded ids, mask and the other
per-token inputs (:data:`EXTRA_INPUTS`: a sentence pair's ``token_type_ids``, ``position_ids``),
which every forward pass of cmixlib then receives as given (:func:`check_extra_inputs`);
:func:`tokens` gives the token strings and :func:`describe_model` the line naming a model."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import torch

from cmixlib.forward.encoder import max_positions
from cmixlib.validation import (InputError, check_ids_and_mask, check_text, check_tokenizer,
                                describe, numeric_tensor)

__all__ = ["TextInput", "EXTRA_INPUTS", "MODEL_INPUTS", "Encoded", "encode_inputs", "encode",
           "check_extra_inputs", "tokens", "describe_model"]

#: What :func:`context_mixing` and :func:`cmixlib.capture` take as ``text``: a string, a list of
#: strings, or a mapping with ``input_ids`` (and optionally ``attention_mask``,
#: ``token_type_ids``, ``position_ids``), e.g. a tokenizer's output.
TextInput = Union[str, Sequence[str], Mapping[str, Any]]

#: The per-token inputs besides ``input_ids`` and ``attention_mask`` that cmixlib passes to an
#: encoder exactly as given (segment ids of a sentence pair, explicit positions).
EXTRA_INPUTS = ("token_type_ids", "position_ids")
#: Every key a mapping input may hold (``tokenizer(premise, hypothesis, return_tensors="pt")``
#: gives the first three).
MODEL_INPUTS = ("input_ids", "attention_mask") + EXTRA_INPUTS


def check_extra_inputs(inputs: Mapping, input_ids: torch.Tensor, model: Any = None
                       ) -> dict[str, torch.Tensor]:
    """The extra per-token inputs of a mapping input (:data:`EXTRA_INPUTS`) as long tensors of
    ``input_ids``' shape (B, n), checked against ``model`` (a Hugging Face model or None):

    * a key that is not one of :data:`MODEL_INPUTS` is an :class:`InputError` (it would be
      dropped silently, or fail inside the model);
    * ``token_type_ids``: integers in ``0..type_vocab_size-1``; a model whose forward takes none
      (DistilBERT, MPNet) refuses them;
    * ``position_ids``: integers in ``0..max_position_embeddings-1``, shape (B, n) or (1, n)
      (broadcast over the batch).

    A value None is left out. Returns ``{name: tensor}`` for the inputs given.

    Examples
    --------
    >>> import torch
    >>> from cmixlib.forward.encoding import check_extra_inputs
    >>> ids = torch.tensor([[1, 5, 2, 6, 2]])
    >>> check_extra_inputs({"input_ids": ids, "token_type_ids": [[0, 0, 0, 1, 1]]}, ids)
    {'token_type_ids': tensor([[0, 0, 0, 1, 1]])}
    """
    unknown = sorted(str(k) for k in inputs if k not in MODEL_INPUTS)
    if unknown:
        raise InputError(f"The input mapping holds {unknown}, which cmixlib does not pass to the "
                         f"model: it accepts {', '.join(MODEL_INPUTS)}. Drop the other keys.")
    cfg = getattr(model, "config", None)
    accepted = _forward_parameters(model)
    out: dict[str, torch.Tensor] = {}
    for name in EXTRA_INPUTS:
        value = inputs.get(name)
        if value is None:
            continue
        t = numeric_tensor(value, name, f"integer ids shaped like input_ids {tuple(input_ids.shape)}")
        if t.dtype.is_floating_point or t.dtype == torch.bool:
            raise InputError(f"{name} must hold integers; got {describe(value)}.")
        if t.ndim == 1:
            t = t[None]
        shape_ok = tuple(t.shape) == tuple(input_ids.shape) or (
            name == "position_ids" and t.ndim == 2 and t.shape[0] == 1
            and t.shape[1] == input_ids.shape[1])
        if not shape_ok:
            raise InputError(f"{name} has shape {tuple(t.shape)} but input_ids has shape "
                             f"{tuple(input_ids.shape)}: they must match.")
        if accepted is not None and name not in accepted:
            raise InputError(f"{type(model).__name__} takes no {name} (its forward has no such "
                             f"argument): drop {name!r} from the input.")
        limit = {"token_type_ids": getattr(cfg, "type_vocab_size", None),
                 "position_ids": getattr(cfg, "max_position_embeddings", None)}[name]
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or (isinstance(limit, int) and hi >= limit):
            allowed = f"0..{limit - 1}" if isinstance(limit, int) else ">= 0"
            raise InputError(f"{name} holds {lo if lo < 0 else hi}, outside the model's range "
                             f"({allowed}).")
        out[name] = t.long().expand(input_ids.shape[0], -1) if name == "position_ids" else t.long()
    return out


def _forward_parameters(model: Any) -> set[str] | None:
    """The argument names of the encoder's forward (``model.base_model``), or None if unknown."""
    import inspect

    base = getattr(model, "base_model", model)
    fwd = getattr(base, "forward", None)
    if fwd is None:
        return None
    try:
        params = inspect.signature(fwd).parameters
    except (TypeError, ValueError):
        return None
    named = {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return named if "input_ids" in named else None     # a bare (*args, **kwargs) wrapper: unknown


def _vocab_size(model) -> int | None:
    """Rows of the model's word embedding (None where it cannot be read)."""
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    return getattr(emb, "num_embeddings", None) or getattr(getattr(model, "config", None), "vocab_size", None)


@dataclass(frozen=True)
class Encoded:
    """A checked model input: padded ``input_ids`` and ``attention_mask`` (B, n), whether the
    caller gave a batch, and ``extras``, the other per-token inputs given
    (:data:`cmixlib.validation.EXTRA_INPUTS`: ``token_type_ids``, ``position_ids``; (B, n) long
    tensors) that every forward pass must receive: ``model(input_ids, attention_mask, **extras)``."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    is_batch: bool
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    #: per row, per position the index of its word (None: special or padding); None when the
    #: input was ids, or the tokenizer is not a fast one
    word_ids: list[list[int | None]] | None = None


def encode_inputs(model: torch.nn.Module, tokenizer: Any, text: TextInput) -> Encoded:
    """Turn ``text`` (str, list of str, or a mapping with ``input_ids``) into a checked
    :class:`Encoded`: ids inside the model's vocabulary, a 0/1 mask of the same shape
    (:func:`cmixlib.validation.check_text`, :func:`cmixlib.validation.check_ids_and_mask`), and
    the segment ids / positions the mapping (or the tokenizer) gives, kept for the model
    (:func:`cmixlib.validation.check_extra_inputs`). A mapping such as
    ``tokenizer(premise, hypothesis, return_tensors="pt")`` thus runs exactly as
    ``model(**enc)``."""
    limit = max_positions(model)
    word_ids = None
    if isinstance(text, Mapping):
        if "input_ids" not in text:
            raise InputError("A mapping input must hold 'input_ids' (shape (n,), (1, n) or (B, n)); it "
                             f"has {sorted(map(str, text))[:8]}.")
        ids, mask = check_ids_and_mask(text["input_ids"], text.get("attention_mask"),
                                       vocab_size=_vocab_size(model))
        extras = check_extra_inputs(text, ids, model)
        is_batch = ids.shape[0] > 1
    else:
        texts, is_batch = check_text(text)
        if check_tokenizer(tokenizer) is None:
            raise InputError("Pass the tokenizer (or a ModelBundle) to analyse raw text.")
        enc = tokenizer(texts, return_tensors="pt", padding=True, truncation=False)
        ids, mask = check_ids_and_mask(enc["input_ids"], enc["attention_mask"], vocab_size=_vocab_size(model))
        # one text per row: the tokenizer's segment ids are all 0, the model's default
        given = {k: enc[k] for k in EXTRA_INPUTS if k in enc and bool(torch.as_tensor(enc[k]).any())}
        extras = check_extra_inputs(given, ids, model)
        if getattr(enc, "is_fast", False):
            word_ids = [enc.word_ids(b) for b in range(ids.shape[0])]
    lengths = mask.sum(dim=1)
    if int(lengths.max()) > limit:
        raise InputError(f"Input has {int(lengths.max())} tokens but the model accepts at most {limit}: "
                         "shorten the text or split it into sentences.")
    return Encoded(ids, mask, is_batch, extras, word_ids)


def encode(model: torch.nn.Module, tokenizer: Any, text: TextInput
           ) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """``(input_ids, attention_mask, is_batch)`` of :func:`encode_inputs`, for callers that pass
    only ids and mask to the model: an input whose ``token_type_ids`` are not all 0 (a sentence
    pair) or that gives ``position_ids`` is refused (:class:`InputError`), since dropping them
    would change the model's output. Use :func:`encode_inputs` to keep them."""
    enc = encode_inputs(model, tokenizer, text)
    tt = enc.extras.get("token_type_ids")
    if "position_ids" in enc.extras or (tt is not None and bool(tt.any())):
        raise InputError("This function runs the model on input_ids and attention_mask only, but "
                         "the input gives " + " and ".join(sorted(enc.extras)) + " (e.g. a "
                         "sentence pair's segment ids): use cmixlib.context_mixing or "
                         "cmixlib.capture, which pass them to the model.")
    return enc.input_ids, enc.attention_mask, enc.is_batch


def tokens(tokenizer: Any, input_ids: Sequence[int] | torch.Tensor | Any) -> list[str]:
    r"""Token strings of one sequence of ids (for plot labels): :math:`w_1, \dots, w_n`.

    Parameters
    ----------
    tokenizer:
        A Hugging Face tokenizer (anything with ``convert_ids_to_tokens``).
    input_ids:
        One sequence of integer ids inside the tokenizer's vocabulary: a list, array or tensor of
        shape (n,) or (1, n).

    Raises
    ------
    TypeError
        ``tokenizer`` has no ``convert_ids_to_tokens``, or the ids are not numbers.
    InputError
        Several sequences, float or negative ids, ids outside the vocabulary.

    Examples
    --------
    >>> import cmixlib
    >>> bundle = cmixlib.load_model()                    # doctest: +SKIP
    >>> ids = bundle.tokenizer("The keys are here.")["input_ids"]   # doctest: +SKIP
    >>> cmixlib.tokens(bundle.tokenizer, ids)            # doctest: +SKIP
    ['[CLS]', 'the', 'keys', 'are', 'here', '.', '[SEP]']
    """
    if not hasattr(tokenizer, "convert_ids_to_tokens"):
        raise TypeError("tokenizer must be a Hugging Face tokenizer (with convert_ids_to_tokens); got "
                        f"{describe(tokenizer)}.")
    vocab = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    ids, _ = check_ids_and_mask(input_ids, vocab_size=vocab)
    if ids.shape[0] != 1:
        raise InputError("input_ids must be one sequence, shape (n,) or (1, n); got shape "
                         f"{tuple(ids.shape)}: call tokens() once per row.")
    return tokenizer.convert_ids_to_tokens(ids[0].tolist())


def describe_model(model: Any) -> str:
    """The line that names a model next to its results: a bundle's :meth:`describe`, else the
    class with its family, layers and hidden size."""
    if hasattr(model, "describe") and not isinstance(model, torch.nn.Module):
        return str(model.describe())
    cfg = getattr(model, "config", None)
    layers = getattr(cfg, "num_hidden_layers", getattr(cfg, "n_layers", "?"))
    hidden = getattr(cfg, "hidden_size", getattr(cfg, "dim", "?"))
    return (f"{type(model).__name__} ({getattr(cfg, 'model_type', '?')}, {layers} layers, "
            f"hidden {hidden})")
