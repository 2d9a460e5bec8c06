"""Value Zeroing's scores, one definition for encoders and decoders (Mohebbi et al. 2023): the
distances between a perturbed and the original representation, their per-dimension
standardisation (Appendix A.1), and the checks of the options that choose them, so that an
encoder (:mod:`cmixlib.methods.value_zeroing`) and a decoder
(:mod:`cmixlib.methods.value_zeroing_decoder`) score with the same functions and refuse the same
mistakes with the same error (:class:`~cmixlib.InputError`).

What differs by family is only how the perturbed outputs are recomputed (a post-LN layer re-runs
LN1, the FFN and LN2; a pre-LN layer the MLP block on the residual) and which outputs the
standardisation's ``True`` takes its statistics from (an encoder's captured layer outputs o_i, a
decoder's block outputs x'_i recomputed through the same path as the perturbed ones).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import torch

from cmixlib.validation import InputError, check_maps, describe

__all__ = ["DISTANCES", "VZ_METHODS", "VZ_CONVENTIONS", "DISTANCE_FUNCTIONS", "check_standardize",
           "cosine_distance", "euclidean_distance", "spearman_distance", "distance_function",
           "check_vz_method", "standardizer", "standardized"]

#: The distances Value Zeroing offers (``ValueZeroing(distance=)``).
DISTANCES = ("cosine", "euclidean", "spearman")
#: How Value Zeroing is computed (``ValueZeroing(implementation=)``): the same numbers either way.
VZ_METHODS = ("auto", "factored", "batched")
#: Value Zeroing conventions (``ValueZeroing(convention=)``): ours, or inseq 0.7.1's decoder one.
VZ_CONVENTIONS = ("default", "inseq")


def check_standardize(value: Any, d: int) -> Any:
    """``standardize``: None, a bool, or a (mean, std) pair of finite (d,) arrays, std > 0."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return value
    what = f"None, True/False or a (mean, std) pair of arrays of shape ({d},)"
    try:
        if isinstance(value, (str, bytes, Mapping)):
            raise TypeError
        mean, std = value
    except (TypeError, ValueError):
        raise TypeError(f"standardize must be {what}; got {describe(value)}.") from None
    for label, arr in (("mean", mean), ("std", std)):
        arr = check_maps(arr, f"standardize's {label}", ndim=None, square=False)
        if arr.shape != (d,):
            raise InputError(f"standardize's {label} has shape {arr.shape}, but the model's hidden size "
                             f"is {d}: it must be ({d},).")
        if label == "std" and (arr <= 0).any():
            raise InputError("standardize's std must be > 0 in every dimension (it divides).")
    return value


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 - cos(a, b) over the last axis, computed as ``||a/|a| - b/|b|||^2 / 2``.

    The two are equal in exact arithmetic; the second keeps full relative precision when a and
    b are nearly parallel, where 1 - cos loses everything below the float epsilon (~1e-7 in float32).
    """
    an = a / torch.linalg.vector_norm(a, dim=-1, keepdim=True)
    bn = b / torch.linalg.vector_norm(b, dim=-1, keepdim=True)
    return 0.5 * torch.linalg.vector_norm(an - bn, dim=-1) ** 2


def euclidean_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """||a - b||_2 over the last axis."""
    return torch.linalg.vector_norm(a - b, dim=-1)


def _ranks(x: torch.Tensor) -> torch.Tensor:
    return torch.argsort(torch.argsort(x, dim=-1), dim=-1).to(x.dtype)


def spearman_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 - Spearman's rho between the coordinates of a and b (ranks over the hidden dimension;
    ties, which need exactly equal floats, are broken by position)."""
    ra, rb = _ranks(a), _ranks(b.expand_as(a))
    ra = ra - ra.mean(dim=-1, keepdim=True)
    rb = rb - rb.mean(dim=-1, keepdim=True)
    rho = (ra * rb).sum(-1) / (torch.linalg.vector_norm(ra, dim=-1) * torch.linalg.vector_norm(rb, dim=-1))
    return 1.0 - rho


#: Each distance of :data:`DISTANCES` by name -> its function ``(a, b) -> distance``.
DISTANCE_FUNCTIONS = {"cosine": cosine_distance, "euclidean": euclidean_distance, "spearman": spearman_distance}


def distance_function(distance: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The function of distance ``distance`` (:data:`DISTANCE_FUNCTIONS`); an unknown name is an
    :class:`~cmixlib.InputError` listing the valid ones."""
    try:
        return DISTANCE_FUNCTIONS[distance]
    except (KeyError, TypeError):
        raise InputError(f"Unknown Value Zeroing distance {distance!r}; choose one of "
                         f"{DISTANCES}.") from None


def check_vz_method(method: str) -> str:
    """``method`` if it is one of :data:`VZ_METHODS`, else an :class:`~cmixlib.InputError`."""
    if method not in VZ_METHODS:
        raise InputError(f"Unknown Value Zeroing method {method!r}; choose one of {VZ_METHODS}.")
    return method


def standardizer(reference: torch.Tensor, standardize: Any
                 ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Per-dimension standardisation (Timkey & van Schijndel 2021), VZ paper Appendix A.1: the
    ``(mean, std)`` to apply, or None (``standardize`` None or False).

    ``True``: mean and std of each hidden dimension over ``reference`` (n, d), this sentence's
    original outputs (std floored at the dtype's epsilon); a ``(mean, std)`` pair of (d,)
    arrays: statistics from a corpus (better for short inputs), in ``reference``'s dtype and
    device.
    """
    if standardize is None or standardize is False:
        return None
    if standardize is True:
        o = reference
        return o.mean(dim=0), o.std(dim=0, unbiased=False).clamp_min(torch.finfo(o.dtype).eps)
    mean, std = standardize
    return torch.as_tensor(mean, dtype=reference.dtype, device=reference.device), \
        torch.as_tensor(std, dtype=reference.dtype, device=reference.device)


def standardized(t: torch.Tensor, z: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """(t - mean) / std with ``z`` = (mean, std) of :func:`standardizer`; ``t`` itself for None."""
    return t if z is None else (t - z[0]) / z[1]
