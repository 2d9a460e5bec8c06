"""Floating-point tolerances derived from the computation, never from one CPU.

Two rules, each with its reasoning; every float32 comparison of the suite uses one of them and
says why beside it.

1. **A priori rounding bound** (:func:`rounding_atol`), for a short computation whose two sides
   differ only by the order of float operations on the same inputs. A sum or dot product of
   ``k`` terms computed in floating point satisfies ``|fl(s) - s| <= gamma_k * sum|terms|`` with
   ``gamma_k = k u / (1 - k u)`` and ``u`` the unit roundoff (Higham, *Accuracy and Stability of
   Numerical Algorithms*, 2nd ed., eq. 3.5 and Lemma 3.1). The bound holds for any summation
   order, blocking, vector width (AVX2, AVX-512) or fused multiply-add, so it holds on every
   IEEE-754 CPU; two such computations differ by at most twice it. ``terms`` is the length of the
   longest chain of roundings that reaches one output (e.g. ``d`` for a projection, plus ``n H``
   for the sum over sources and heads), ``scale`` the magnitude of the summed terms.

2. **No worse than an independent float32 baseline** (:func:`assert_no_worse_than_baseline`), for
   deep computations (a float32 model against the same weights in float64), whose error is
   amplified by LayerNorm and softmax in ways no useful a priori bound captures. The float64
   result is the truth; an independent float32 computation of the same quantity from the same
   float32 model (the reference loop, the model's own forward pass, the batched form) measures
   what float32 costs on *this* CPU and input; the method under test may be at most
   :data:`BASELINE_FACTOR` times worse, plus a floor of a few units of roundoff of the result
   for the case where the baseline is exact. Both sides run on the same machine with the same
   kernels, so the bound moves with the CPU; a real bug (a head dropped, a wrong variance)
   makes errors of 1e-3 and more relative to the result, thousands of times the baseline's.
"""
from __future__ import annotations

import numpy as np
import torch

#: Unit roundoff of float32 (2^-24 = half the machine epsilon) and float64 (2^-53).
U32 = 2.0 ** -24
U64 = 2.0 ** -53
#: How much worse than the independent float32 baseline a float32 result may be (rule 2). The
#: measured ratios of the suite's comparisons lie between 0.4 and 2.2 with the AVX-512, AVX2 and
#: non-vectorised kernels (two float32 computations from the same float32 inputs share most of
#: their error); the planted bugs of the suite give ratios of 10 to more than 1e3.
BASELINE_FACTOR = 4.0
#: Floor of rule 2 in units of roundoff of the result's magnitude (an exact baseline).
FLOOR_ULPS = 16


def unit_roundoff(dtype) -> float:
    """``u`` of a torch or numpy float dtype (float64 otherwise)."""
    if dtype in (torch.float32, np.float32):
        return U32
    if dtype in (torch.float16, np.float16):
        return 2.0 ** -11
    if dtype == torch.bfloat16:
        return 2.0 ** -8
    return U64


def gamma(k: int, dtype=torch.float32) -> float:
    """``gamma_k = k u / (1 - k u)``: the forward-error factor of a k-term sum (Higham 3.5)."""
    ku = k * unit_roundoff(dtype)
    assert ku < 0.5, "k u must stay well below 1 for the bound to hold"
    return ku / (1 - ku)


def rounding_atol(terms: int, scale: float, dtype=torch.float32, computations: int = 2) -> float:
    """Rule 1: absolute tolerance between ``computations`` float computations of the same value,
    each a chain of at most ``terms`` roundings over terms of magnitude at most ``scale``."""
    return computations * gamma(terms, dtype) * float(scale)


def _np(a) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().double().numpy()
    return np.asarray(a, dtype=np.float64)


def max_abs(a) -> float:
    a = _np(a)
    return float(np.nanmax(np.abs(a))) if a.size and not np.isnan(a).all() else 0.0


def assert_no_worse_than_baseline(got, exact, baseline, *, factor: float = BASELINE_FACTOR,
                                  floor_ulps: float = FLOOR_ULPS, dtype=torch.float32,
                                  err_msg: str = "") -> None:
    """Rule 2: ``max|got - exact| <= factor * max|baseline - exact| + floor_ulps u max|exact|``.

    ``exact``: the float64 result; ``baseline``: an independent ``dtype`` computation of the same
    quantity from the same ``dtype`` model; ``got``: the method under test in ``dtype``. NaNs must
    sit at the same places in ``got`` and ``exact``."""
    got, exact, baseline = _np(got), _np(exact), _np(baseline)
    assert got.shape == exact.shape == baseline.shape, (got.shape, exact.shape, baseline.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact), err_msg=f"NaN pattern {err_msg}")
    base_err = max_abs(baseline - exact)
    bound = factor * base_err + floor_ulps * unit_roundoff(dtype) * max_abs(exact)
    err = max_abs(got - exact)
    assert err <= bound, (f"{err_msg}: error {err:.3g} against float64 exceeds {factor:g} x the "
                          f"float32 baseline's {base_err:.3g} + floor (bound {bound:.3g})")
