"""Argument checks shared by cmixlib's public entry points.

Every check raises :class:`InputError` (a ``ValueError``) for a value of the right kind that is
not allowed (a negative row, an id outside the vocabulary, an unknown name) or ``TypeError``
for a value of the wrong kind (``None`` as text, a list as tokenizer); each message names the
argument, shows what it got and says what is allowed. The checks are cheap (no forward pass; at
most a vectorised min/max over the ids or maps) and return the value in the form the caller uses.
"""
from __future__ import annotations

import numbers
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["InputError", "describe", "check_bool", "check_int", "check_positive_int", "check_float_dtype",
           "check_choice", "check_names", "check_text", "check_tokenizer", "check_model",
           "check_ids_and_mask", "numeric_tensor", "check_positions", "check_rows", "check_maps",
           "check_same_length"]


class InputError(ValueError):
    """A bad argument value (text, ids, mask, rows, maps, a name or an option); the message names
    the argument, shows what it got and says what is allowed. A ``ValueError``; arguments of the
    wrong type raise ``TypeError`` instead.

    Examples
    --------
    >>> import cmixlib
    >>> cmixlib.context_mixing(cmixlib.random_model(), None, "")
    Traceback (most recent call last):
    ...
    cmixlib.validation.InputError: Empty text '': context mixing needs at least one word.
    """


_repr = reprlib.Repr()
_repr.maxstring, _repr.maxother, _repr.maxlist, _repr.maxtuple = 40, 40, 6, 6


def describe(value: Any) -> str:
    """``value`` for an error message: its type and a short repr (``"int 3"``, ``"list [1, 'a']"``).

    Examples
    --------
    >>> from cmixlib.validation import describe
    >>> describe(3), describe(None)
    ('int 3', 'None')
    """
    if value is None:
        return "None"
    if torch.is_tensor(value) or isinstance(value, np.ndarray):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"{type(value).__name__} {_repr.repr(value)}"


def _is_int(value: Any) -> bool:
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a bool: True or False (numpy's too); anything else (``"yes"``, 1) is a TypeError."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {describe(value)}.")
    return bool(value)


def check_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None,
              allow_none: bool = False) -> int | None:
    """``value`` as an int in ``[minimum, maximum]`` (None too with ``allow_none``).

    A bool, float or string is a TypeError; an int out of range an :class:`InputError`.

    Examples
    --------
    >>> from cmixlib.validation import check_int
    >>> check_int(3, "limit", minimum=1)
    3
    >>> check_int(0, "limit", minimum=1)
    Traceback (most recent call last):
    ...
    cmixlib.validation.InputError: limit must be >= 1; got 0.
    """
    if value is None and allow_none:
        return None
    if not _is_int(value):
        none = " or None" if allow_none else ""
        raise TypeError(f"{name} must be an integer{none}; got {describe(value)}.")
    if minimum is not None and value < minimum:
        raise InputError(f"{name} must be >= {minimum}; got {value}.")
    if maximum is not None and value > maximum:
        raise InputError(f"{name} must be <= {maximum}; got {value}.")
    return int(value)


def check_positive_int(value: Any, name: str, *, allow_none: bool = False) -> int | None:
    """``value`` as an int >= 1 (see :func:`check_int`)."""
    return check_int(value, name, minimum=1, allow_none=allow_none)


def check_float_dtype(dtype: Any, name: str = "dtype") -> torch.dtype:
    """``dtype`` if it is a floating ``torch.dtype`` (float32, float64, bfloat16...); else a TypeError."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype (e.g. torch.float32); got {describe(dtype)}.")
    return dtype


def check_choice(value: Any, choices: Iterable[str], name: str, *, what: str | None = None) -> str:
    """``value`` if it is one of the strings ``choices``; else a TypeError (not a string) or an
    :class:`InputError` that lists them (``what`` names the thing chosen, default ``name``).

    Examples
    --------
    >>> from cmixlib.validation import check_choice
    >>> check_choice("mlm", ("base", "mlm"), "task")
    'mlm'
    >>> check_choice("x", ("base", "mlm"), "task")
    Traceback (most recent call last):
    ...
    cmixlib.validation.InputError: Unknown task 'x': task must be one of 'base', 'mlm'.
    """
    choices = list(choices)
    listed = ", ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {listed}; got {describe(value)}.")
    if value not in choices:
        raise InputError(f"Unknown {what or name} {value!r}: {name} must be one of {listed}.")
    return value


def check_names(values: Any, choices: Iterable[str], name: str, *, what: str) -> list[str]:
    """A name or a list of names, each one of ``choices``, as a list (duplicates kept).

    Not a string or a list of strings: TypeError; empty, or an unknown name: :class:`InputError`
    with the valid names.
    """
    choices = list(choices)
    valid = ", ".join(choices)
    if isinstance(values, str):
        values = [values]
    elif isinstance(values, Mapping) or not isinstance(values, Iterable) or torch.is_tensor(values):
        raise TypeError(f"{name} must be a {what} name, a list of {what} names or None; got "
                        f"{describe(values)}. Valid names: {valid}.")
    values = list(values)
    for k, v in enumerate(values):
        if not isinstance(v, str):
            raise TypeError(f"{name}[{k}] is {describe(v)}: {what} names are strings. Valid names: {valid}.")
    if not values:
        raise InputError(f"{name} is empty: pass None for all of them or at least one name. "
                         f"Valid names: {valid}.")
    unknown = [v for v in values if v not in choices]
    if unknown:
        raise InputError(f"Unknown {what}(s) {unknown} in {name}. Valid names: {valid}.")
    return values


def check_text(text: Any, name: str = "text") -> tuple[list[str], bool]:
    """Raw text as ``(texts, is_batch)``: a string (one text) or a non-empty list of non-empty
    strings (a batch). Bytes, numbers, None and tensors are a TypeError (token ids go in a
    mapping ``{"input_ids": ...}``); empty text an :class:`InputError`."""
    ids_hint = "; to pass token ids use {'input_ids': ids}"
    if isinstance(text, str):
        texts, is_batch = [text], False
    elif isinstance(text, (bytes, bytearray)):
        raise TypeError(f"{name} is {type(text).__name__}: decode it first ({name}.decode('utf-8')).")
    elif torch.is_tensor(text) or isinstance(text, np.ndarray) and text.dtype.kind in "biuf":
        raise TypeError(f"{name} is {describe(text)}: pass a string, a list of strings{ids_hint}.")
    elif isinstance(text, Iterable):
        texts, is_batch = list(text), True
        if not texts:
            raise InputError("No text given: pass a non-empty string or a list of strings.")
    else:
        raise TypeError(f"{name} must be a string, a list of strings or a mapping with 'input_ids'; "
                        f"got {describe(text)}.")
    for k, t in enumerate(texts):
        if not isinstance(t, str):
            hint = ids_hint if _is_int(t) else ""
            raise TypeError(f"{name}[{k}] is {describe(t)}: a batch is a list of strings{hint}.")
        if not t.strip():
            where = f" ({name}[{k}])" if is_batch else ""
            raise InputError(f"Empty text {t!r}{where}: context mixing needs at least one word.")
    return texts, is_batch


def check_tokenizer(tokenizer: Any, name: str = "tokenizer") -> Any:
    """``tokenizer`` if it is None or callable (a Hugging Face tokenizer); else a TypeError."""
    if tokenizer is not None and not callable(tokenizer):
        raise TypeError(f"{name} must be a Hugging Face tokenizer (callable) or None; got "
                        f"{describe(tokenizer)}. With a ModelBundle pass None: the bundle has its own.")
    return tokenizer


def check_model(model: Any, name: str = "model") -> torch.nn.Module:
    """``model`` if it is a ``torch.nn.Module``; else :class:`cmixlib.UnsupportedModelError` (a
    TypeError) saying what to pass. Whether the module is a supported encoder is
    :func:`cmixlib.models.arch.family_of`'s question."""
    from cmixlib.models.arch import SUPPORTED_FAMILIES, UnsupportedModelError

    if not isinstance(model, torch.nn.Module):
        hint = f" cmixlib.load_model({model!r}) loads it." if isinstance(model, str) else ""
        raise UnsupportedModelError(
            f"{name} must be a Hugging Face encoder (a torch.nn.Module; {SUPPORTED_FAMILIES}) or a "
            f"cmixlib.ModelBundle; got {describe(model)}.{hint}")
    return model


def numeric_tensor(value: Any, name: str, what: str) -> torch.Tensor:
    """``value`` (tensor, array or nested list of numbers) as a tensor; TypeError (``name`` must
    be ``what``) if not numbers, :class:`InputError` if ragged."""
    if value is None or isinstance(value, (str, bytes, Mapping)):
        raise TypeError(f"{name} must be {what}; got {describe(value)}.")
    if torch.is_tensor(value):
        t = value
    else:
        try:
            arr = np.asarray(value)
        except ValueError as exc:
            raise InputError(f"{name} must be {what}, a rectangular array (pad ragged sequences and "
                             f"pass an attention_mask); got {describe(value)} ({exc}).") from None
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{name} must be {what}; got {describe(value)}.")
        t = torch.as_tensor(arr)
    if t.dtype.is_complex:
        raise TypeError(f"{name} must be {what}; got {describe(value)}.")
    return t


_numeric_tensor = numeric_tensor


def check_ids_and_mask(input_ids: Any, attention_mask: Any = None, *, vocab_size: int | None = None,
                       name: str = "input_ids") -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and their mask as long tensors of shape (B, n) (a 1-D sequence becomes (1, n)).

    ``input_ids``: integers in ``0..vocab_size-1``, shape (n,) or (B, n), not empty.
    ``attention_mask`` (None: all ones): the same shape, only 0 (padding) and 1 (real token), at
    least one 1 per row. Raises :class:`InputError` (TypeError for non-numbers) naming the
    argument. Costs one min/max over the ids and the mask.

    Examples
    --------
    >>> from cmixlib.validation import check_ids_and_mask
    >>> ids, mask = check_ids_and_mask([1, 5, 2], vocab_size=10)
    >>> tuple(ids.shape), mask.tolist()
    ((1, 3), [[1, 1, 1]])
    >>> check_ids_and_mask([[1, 50]], vocab_size=10)
    Traceback (most recent call last):
    ...
    cmixlib.validation.InputError: input_ids holds id 50, but the vocabulary has 10 entries (ids 0..9): ...
    """
    ids = numeric_tensor(input_ids, name, "integer token ids of shape (n,) or (batch, n)")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise InputError(f"{name} must hold integer token ids; got {describe(input_ids)}.")
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2:
        raise InputError(f"{name} must have shape (n,) or (batch, n); got shape {tuple(ids.shape)}.")
    if ids.numel() == 0:
        raise InputError(f"Empty {name}: nothing to analyse.")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0:
        raise InputError(f"{name} holds id {lo}: token ids are >= 0.")
    if vocab_size is not None and hi >= vocab_size:
        raise InputError(f"{name} holds id {hi}, but the vocabulary has {vocab_size} entries (ids "
                         f"0..{vocab_size - 1}): were the ids made by another model's tokenizer?")
    if attention_mask is None:
        return ids.long(), torch.ones_like(ids, dtype=torch.long)
    mask = numeric_tensor(attention_mask, "attention_mask", "a 0/1 array shaped like input_ids")
    if mask.ndim == 1:
        mask = mask[None]
    if tuple(mask.shape) != tuple(ids.shape):
        raise InputError(f"attention_mask has shape {tuple(mask.shape)} but {name} has shape "
                         f"{tuple(ids.shape)}: they must match (1 = real token, 0 = padding).")
    bad = (mask != 0) & (mask != 1)
    if bool(bad.any()):
        raise InputError(f"attention_mask must hold only 0 (padding) and 1 (real token); got "
                         f"{sorted(set(mask[bad].flatten().tolist()))[:5]}.")
    empty = torch.nonzero(mask.sum(dim=1) == 0).flatten().tolist()
    if empty:
        raise InputError(f"attention_mask rows {empty} are all 0: every sequence needs at least one "
                         "real token (1).")
    return ids.long(), mask.long()


def _as_array(value: Any, name: str, what: str, shape_what: str) -> np.ndarray:
    """``value`` (tensor, array or nested list) as a numpy array: None, a string or a mapping is a
    TypeError (``name`` must be ``what``); a ragged list an :class:`InputError` (``shape_what``)."""
    if value is None or isinstance(value, (str, bytes, Mapping)):
        raise TypeError(f"{name} must be {what}; got {describe(value)}.")
    try:
        return value.detach().cpu().numpy() if torch.is_tensor(value) else np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be {shape_what}; got {describe(value)} ({exc}).") from None


def check_positions(positions: Any, n: int, name: str, *, negative: bool = False) -> np.ndarray:
    """Integer positions into a sequence of ``n`` tokens as a 1-D int64 array (order kept).

    ``negative``: also accept ``-n..-1`` (counted from the end), returned as given. A float, bool
    or string entry, a nested list or an out-of-range position is an :class:`InputError` (a
    string or a mapping a TypeError)."""
    arr = np.atleast_1d(_as_array(positions, name, "an integer position or a list of them",
                                  "a flat list of integer positions"))
    if arr.dtype.kind in "US" or arr.dtype == object and any(isinstance(v, str) for v in arr.flat):
        raise TypeError(f"{name} must hold integer positions; got {describe(positions)}.")
    if arr.dtype.kind not in "iu" and arr.size:
        kind = {"b": "booleans", "f": "fractional or float values"}.get(arr.dtype.kind, "non-integers")
        raise InputError(f"{name} must hold integer positions (0..{n - 1}); got {kind}: "
                         f"{_repr.repr(arr.tolist())}.")
    if arr.ndim != 1:
        raise InputError(f"{name} must be a flat list of positions; got shape {arr.shape}.")
    low = -n if negative else 0
    out = arr[(arr < low) | (arr >= n)]
    if out.size:
        allowed = f"-{n}..{n - 1}" if negative else f"0..{n - 1}"
        hint = ("" if negative or out.min() >= 0 else
                "; negative positions are not accepted, use n - 1 for the last")
        raise InputError(f"{name}={_repr.repr(arr.tolist())} out of range for a sequence of {n} tokens "
                         f"({allowed}){hint}.")
    return arr.astype(np.int64)


def check_rows(rows: Any, n: int, name: str = "rows", *, negative: bool = False) -> np.ndarray | None:
    """Query rows of a sequence of ``n`` tokens as sorted unique int64 positions, or None (all).

    ``rows``: an int, a list / numpy array / torch tensor of ints in ``0..n-1``, or None. Negative,
    fractional or boolean rows and an empty list are an :class:`InputError` naming ``rows``
    (``negative=True``: ``-n..-1`` count from the end, as :func:`cmixlib.methods.hta.hta` takes them).

    Examples
    --------
    >>> import numpy as np
    >>> from cmixlib.validation import check_rows
    >>> check_rows(np.array([3, 1, 3]), 5)
    array([1, 3])
    >>> check_rows([-1], 5)
    Traceback (most recent call last):
    ...
    cmixlib.validation.InputError: rows=[-1] out of range for a sequence of 5 tokens (0..4); negative ...
    """
    if rows is None:
        return None
    if isinstance(rows, (bool, np.bool_)):
        raise InputError(f"{name} must hold integer positions (0..{n - 1}); got the boolean {rows}.")
    arr = check_positions(rows, n, name, negative=negative)
    if arr.size == 0:
        raise InputError(f"{name} is empty: pass None for every row or at least one position (0..{n - 1}).")
    return np.unique(arr % n)


def check_maps(maps: Any, name: str = "maps", *, ndim: int | None = 3, square: bool = True,
               allow_nan: bool = False, nonnegative: str | None = None) -> np.ndarray:
    """Maps (array, tensor or nested list of numbers) as a numpy array, checked.

    ``ndim``: the required number of dimensions (None: at least 1); ``square``: the last two
    dimensions must be equal (rows and columns are the same n tokens); ``allow_nan``: NaN entries
    are allowed (±inf never are); ``nonnegative``: if given (what needs it, for the message),
    entries below ``-1e-5 * max(1, max |entry|)`` (rounding) are an error.
    """
    arr = _as_array(maps, name, "an array of numbers", "a rectangular array of numbers")
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers; got {describe(maps)}.")
    if ndim is not None and arr.ndim != ndim:
        want = "(num_layers, n, n)" if ndim == 3 and square else f"{ndim} dimensions"
        raise InputError(f"{name} must have shape {want}; got shape {arr.shape}.")
    if arr.ndim < 1:
        raise InputError(f"{name} must have at least one dimension; got a scalar ({arr.item()!r}).")
    if arr.size == 0:
        raise InputError(f"{name} is empty (shape {arr.shape}).")
    if square and (arr.ndim < 2 or arr.shape[-1] != arr.shape[-2]):
        raise InputError(f"{name} must be square in its last two dimensions (row i and column j range "
                         f"over the same n tokens); got shape {arr.shape}.")
    vals = arr                                   # the finite entries, for the sign check
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        if np.isinf(arr).any():
            raise InputError(f"{name} contains inf: the maps must be finite.")
        if not allow_nan:
            raise InputError(f"{name} contains NaN: every row of every layer is needed (were the maps "
                             "computed with rows=...?).")
        vals = arr[~np.isnan(arr)]
    if nonnegative and arr.dtype.kind != "b" and vals.size:
        low, high = float(vals.min()), float(vals.max())
        if low < -1e-5 * max(1.0, high, -low):
            raise InputError(f"{name} has negative entries (min {low:.3g}): {nonnegative} needs "
                             "non-negative contributions.")
    return arr


def check_same_length(a: Sequence, b: Sequence, names: tuple[str, str], *, per: str = "token") -> None:
    """An :class:`InputError` (naming both arguments and their lengths) unless ``len(a) == len(b)``
    (``per``: what one entry stands for, for the message)."""
    if len(a) != len(b):
        raise InputError(f"length mismatch: {names[0]} has {len(a)} entries but {names[1]} has {len(b)}; "
                         f"they must be the same length (one per {per}).")
