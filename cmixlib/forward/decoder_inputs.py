"""What a decoder LM is given: the one BOS rule and the logit targets, validated.

**The BOS rule** (one rule whatever the input form). When the BOS id is known (from the
tokenizer, or a :class:`~cmixlib.ModelBundle`'s tokenizer: ``<|endoftext|>`` if the vocabulary
has it, else the tokenizer's ``bos_token_id``; :func:`cmixlib.models.smollm2.decoder_bos_id`),
every sequence the model sees starts with it exactly once:

- a string or a list of strings is encoded as :func:`cmixlib.models.smollm2.encode_for_decoder`
  encodes it: ``[bos] + tokenizer(text, add_special_tokens=False)`` (so ``text`` and
  ``encode_for_decoder(text)`` give the same maps);
- pre-tokenised ids (``{"input_ids": ...}``) must start with it, or are refused with what to do.

Without a known BOS id (no tokenizer, e.g. a raw model and ``{"input_ids": ...}``, or a
tokenizer with neither ``<|endoftext|>`` nor ``bos_token_id``) ids are used as given and text is
tokenised with the tokenizer's own special tokens.

**Logit targets** (``AltiLogit(target=, foil=)``): a token id or a string
that the tokenizer encodes as exactly one token (e.g. ``" are"``); for one sentence, also one
id or string per position; for a batch (a list of texts, or ids of shape (B, n)), a list of
B entries, entry b for prompt b (a scalar for every row of that prompt, or one per position).
Ids outside ``0..V-1`` (V the LM head's rows), strings of several tokens, booleans and floats
are refused naming the argument.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np
import torch

from cmixlib.models.smollm2 import decoder_bos_id
from cmixlib.validation import (InputError, check_ids_and_mask, check_text,
                                check_tokenizer)

__all__ = ["TokenIds", "decoder_bos", "decoder_text_ids", "decoder_sentences",
           "per_row_ids", "resolve_targets"]

#: A token id or a one-token string, one per position, one per prompt, or None.
TokenIds = Union[int, str, Sequence[Any], torch.Tensor, None]


def decoder_bos(tokenizer: Any) -> int | None:
    """The BOS id of the rule (module docstring), None when unknown (no tokenizer)."""
    if tokenizer is None:
        return None
    bos = decoder_bos_id(tokenizer)
    return None if bos is None else int(bos)


def decoder_text_ids(tokenizer: Any, text: str) -> list[int]:
    """The ids a decoder sees for ``text`` under the BOS rule: ``[bos] +
    tokenizer(text, add_special_tokens=False)`` when the BOS id is known, else
    ``tokenizer(text)`` (the tokenizer's own special tokens)."""
    bos = decoder_bos(tokenizer)
    if bos is None:
        return [int(i) for i in tokenizer(text)["input_ids"]]
    return [bos] + [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def decoder_sentences(model: torch.nn.Module, tokenizer: Any, text: Any
                      ) -> tuple[list[torch.Tensor], bool]:
    """Unpadded id sequences of ``text`` under the BOS rule (each sentence alone: exact whatever
    the padding side) and whether it is a batch."""
    emb = model.get_input_embeddings()
    vocab = getattr(emb, "num_embeddings", None)
    bos = decoder_bos(check_tokenizer(tokenizer))
    if isinstance(text, Mapping):
        if "input_ids" not in text:
            raise InputError("A mapping input must hold 'input_ids' (shape (n,), (1, n) or "
                             "(B, n)).")
        extra = sorted(set(text) - {"input_ids", "attention_mask"})
        if extra:
            raise InputError(
                f"A decoder's mapping input takes 'input_ids' and 'attention_mask' only; got "
                f"{extra}. cmixlib runs each sentence unpadded from position 0, so "
                "position_ids (or segment ids) would be dropped: remove them, or pass the "
                "sentences unpadded.")
        ids, mask = check_ids_and_mask(text["input_ids"], text.get("attention_mask"),
                                       vocab_size=vocab)
        seqs, is_batch = [row[m.bool()] for row, m in zip(ids, mask)], ids.shape[0] > 1
        bad = [b for b, s in enumerate(seqs) if bos is not None and int(s[0]) != bos]
        if bad:
            raise InputError(
                f"input_ids of sentence {bad[0]} start with id {int(seqs[bad[0]][0])}, not the "
                f"BOS id {bos} that a decoder's input starts with (cmixlib.forward.decoder_inputs): "
                f"prefix it, or pass the text itself (or bundle.encode_for_decoder(text)); to "
                "use ids exactly as given, pass the model without a tokenizer.")
    else:
        texts, is_batch = check_text(text)
        if tokenizer is None:
            raise InputError("Pass the tokenizer (or a ModelBundle) to analyse raw text.")
        seqs = [check_ids_and_mask([decoder_text_ids(tokenizer, t)], vocab_size=vocab)[0][0]
                for t in texts]
    limit = int(getattr(model.config, "max_position_embeddings", 0) or 0)
    if limit and max(len(s) for s in seqs) > limit:
        raise InputError(f"Input has {max(len(s) for s in seqs)} tokens but the model accepts at "
                         f"most {limit}.")
    return seqs, is_batch


def _one_id(value: Any, name: str, tokenizer: Any, vocab: int) -> int:
    """A token id from an int (or integer tensor/array element) or a one-token string."""
    if isinstance(value, str):
        if tokenizer is None:
            raise InputError(f"{name}={value!r} is a string: pass the tokenizer (or a "
                             "ModelBundle) to turn it into a token id, or pass the id.")
        ids = list(tokenizer(value, add_special_tokens=False)["input_ids"])
        if len(ids) != 1:
            raise InputError(f"{name}={value!r} is {len(ids)} tokens ({ids}) for this "
                             "tokenizer, not one: ALTI-Logit explains one token's logit; pass "
                             "a string that is one token (often with its leading space) or "
                             "the id.")
        value = ids[0]
    if isinstance(value, (bool, np.bool_)) or (torch.is_tensor(value) and
                                                value.dtype == torch.bool):
        raise InputError(f"{name} must be token ids or strings, not booleans.")
    if torch.is_tensor(value) or isinstance(value, np.generic):
        if torch.is_tensor(value) and value.is_floating_point() or \
                isinstance(value, np.floating):
            raise InputError(f"{name} must be integer token ids; got a float ({value}).")
        value = value.item()
    if not isinstance(value, (int, np.integer)):
        raise InputError(f"{name} must be a token id (int) or a one-token string; got "
                         f"{type(value).__name__} ({value!r}).")
    if not 0 <= int(value) < vocab:
        raise InputError(f"{name}={int(value)} is outside the LM head's vocabulary "
                         f"(0..{vocab - 1}).")
    return int(value)


def _is_sequence(value: Any) -> bool:
    if torch.is_tensor(value) or isinstance(value, np.ndarray):
        return value.ndim > 0
    return isinstance(value, Sequence) and not isinstance(value, str)


def per_row_ids(value: Any, n: int, name: str, tokenizer: Any, vocab: int) -> torch.Tensor:
    """(n,) ids from a scalar (every row) or one entry per position."""
    if not _is_sequence(value):
        return torch.full((n,), _one_id(value, name, tokenizer, vocab), dtype=torch.long)
    items = list(value)
    if len(items) != n:
        raise InputError(f"{name} must be one token (id or string) for every position, or one "
                         f"per position ({n}); got {len(items)}.")
    return torch.tensor([_one_id(v, f"{name}[{i}]", tokenizer, vocab)
                         for i, v in enumerate(items)], dtype=torch.long)


def resolve_targets(value: TokenIds, name: str, tokenizer: Any, lengths: Sequence[int],
                    is_batch: bool, vocab: int) -> list[torch.Tensor | None]:
    """One (n_b,) id tensor (or None) per sentence from ALTI-Logit's ``target`` / ``foil``
    (module docstring): for a batch, a sequence of B entries is per prompt, entry b a scalar or
    one per position of prompt b; for one sentence, a scalar or one per position."""
    if value is None:
        return [None] * len(lengths)
    if not is_batch:
        return [per_row_ids(value, lengths[0], name, tokenizer, vocab)]
    if not _is_sequence(value):
        return [per_row_ids(value, n, name, tokenizer, vocab) for n in lengths]
    items = list(value)
    if len(items) != len(lengths):
        raise InputError(f"{name} for a batch of {len(lengths)} prompts must be one token or a "
                         f"list of {len(lengths)} entries (one per prompt, each a token or one "
                         f"per position of that prompt); got {len(items)} entries.")
    return [per_row_ids(v, n, f"{name}[{b}]", tokenizer, vocab)
            for b, (v, n) in enumerate(zip(items, lengths))]
