r"""Exercise 15.3: the entropy of a row, a summary of how focused a map is.

For a row :math:`p = C_{i\cdot}` that sums to 1,

.. math::

   H(p) = -\sum_j p_j \ln p_j \quad (0 \ln 0 = 0), \qquad
   0 = H(\text{one-hot}) \le H(p) \le H(\text{uniform}) = \ln n ,

so :math:`H(p) / \ln n` lies in :math:`[0, 1]`: 0 for a row that takes everything from one
token, 1 for a row that takes equally from all :math:`n`. The checker compares the reader's
entropies (in nats, one per row) with the reference and names the usual slips.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .checking import CheckResult, _call, _check_shape, _close, _diagnose, _report_diff

#: float64 inputs with n <= 8: the sums err below 1e-14; an eps of up to 1e-12 inside the log
#: moves a row by less than n * 1e-12 * 28; each named mistake moves some row by more than
#: 1e-2 in the checker's cases (tested).
ATOL = 1e-8


def reference_row_entropy(C) -> np.ndarray:
    """The entropy in nats of every row of an (n, n) map whose rows sum to 1, zeros counted
    as 0 (:math:`0 \\ln 0 = 0`)."""
    C = np.asarray(C, dtype=float)
    logs = np.log(np.where(C > 0, C, 1.0))
    return -(C * logs).sum(-1)


def _cases(seed: int) -> list[tuple[str, np.ndarray]]:
    """A peaked map with exact zeros (some rows one-hot, one uniform) and an attention-like
    map with a sink column; sizes drawn per seed."""
    rng = np.random.default_rng(seed + 153)
    n = int(rng.integers(5, 9))
    raw = rng.random((n, n)) ** 4
    raw[raw < 0.05] = 0.0
    raw[0] = 0.0
    raw[0, int(rng.integers(n))] = 1.0                   # one-hot
    raw[-1] = 1.0                                          # uniform
    raw[np.arange(n), np.arange(n)] += 0.01                # no empty row
    peaked = raw / raw.sum(1, keepdims=True)
    m = int(rng.integers(5, 9))
    raw = rng.random((m, m)) + 0.05
    raw[:, -1] += 2.0 * rng.random()
    sink = raw / raw.sum(1, keepdims=True)
    return [("peaked map with zeros, one-hot and uniform rows", peaked),
            ("attention-like map with a sink column", sink)]


def check_row_entropy(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(C) -> (n,)``: the entropy in nats of every row of a row-stochastic map.
    Checks the bounds :math:`0 \\le H \\le \\ln n` on the reader's numbers and the values, and
    names the usual slips: log base 2, the sign, 0 ln 0 left as nan, the columns' entropy,
    the entropy divided by ln n, one number for the whole map."""
    res = CheckResult("check_row_entropy")
    for label, C in _cases(seed):
        res.begin(label)
        n = C.shape[0]
        want = reference_row_entropy(C)
        got = _call(res, student_fn, C.copy())
        if got is None:
            break
        if got.shape != want.shape:
            _check_shape(res, got, want.shape, f"[{label}] (one entropy per row)")
            if got.size == 1:
                res.info("likely cause: one number for the whole map: return the entropy of "
                         "EVERY row (sum over the last axis only).")
            break
        res.ok(f"shape {got.shape} [{label}] (one entropy per row)")
        if np.isnan(got).any():
            res.fail(f"{label}: {int(np.isnan(got).sum())} row(s) are nan.")
            res.info("likely cause: 0 ln 0 gave nan (0 * -inf): a zero weight adds nothing to "
                     "the entropy; mask the zeros (np.where(C > 0, ...)) or use "
                     "scipy.special.xlogy.")
            continue
        if (got >= -1e-9).all() and (got <= np.log(n) + 1e-9).all():
            res.ok(f"{label}: every entropy lies between 0 (one-hot) and ln n = {np.log(n):.4f} "
                   "(uniform)")
        else:
            res.fail(f"{label}: entropies from {got.min():.4g} to {got.max():.4g}, outside "
                     f"[0, ln n = {np.log(n):.4f}]: a row's entropy cannot leave that range.")
        if _close(got, want, atol=ATOL, rtol=1e-8):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, row {ix[0]}", ATOL)
        causes = {
            "the logarithm is base 2 (bits): the exercise asks for nats (np.log).":
                want / np.log(2),
            "the sign is missing: H = -sum_j p_j ln p_j (ln p_j <= 0).": -want,
            "the entropy of the COLUMNS: sum over j within row i (the last axis).":
                reference_row_entropy(C.T),
            "the entropy was divided by ln n: return it in nats; the normalised value comes "
            "afterwards.": want / np.log(n),
        }
        _diagnose(res, got, {c: w for c, w in causes.items() if not _close(w, want, ATOL)},
                  ATOL)
    return res.finish(verbose)
