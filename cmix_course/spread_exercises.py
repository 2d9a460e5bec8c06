r"""Exercise 6.3: how alike the rows of a map are, and why rollout makes them alike.

For a map :math:`C` whose rows are distributions over the sending tokens, with
:math:`\mathrm{TV}(p, q) = \tfrac12 \sum_j |p_j - q_j|` the total-variation distance,

.. math::

   \operatorname{spread}(C) = \frac{1}{n^2} \sum_{i,k} \mathrm{TV}(C_{i\cdot}, C_{k\cdot}), \qquad
   \delta(C) = \max_{i,k} \mathrm{TV}(C_{i\cdot}, C_{k\cdot}), \qquad
   \mu(C) = \sum_j \min_i C_{ij} .

Since :math:`\mathrm{TV}(p, q) = 1 - \sum_j \min(p_j, q_j)`,
:math:`\operatorname{spread}(C) \le \delta(C) \le 1 - \mu(C)`: a common column that every row
puts weight on (a sink such as ``[SEP]``) bounds how different the rows can be, and because
:math:`\delta(AB) \le \delta(A)\,\delta(B)` (Dobrushin), the rows of a rollout become alike at
least as fast as :math:`\prod_\ell (1 - \mu(C^\ell))`. ``spread`` is
:func:`cmixlib.row_spread`'s definition (pairs :math:`i = k` included). The checker checks the
two inequalities on the reader's numbers and names the usual slips per number.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .checking import CheckResult, _call, _close, _report_diff, as_values

#: The three numbers, in the order the reader's function may return them as a tuple.
KEYS = ("spread", "delta", "floor")
#: float64 inputs with n <= 7: float32 arithmetic errs below 1e-6; each named mistake moves its
#: number by more than 1e-2 in at least one case of the checker (tested).
ATOL, RTOL = 1e-7, 1e-5


def _tv(C: np.ndarray, p: float = 1.0, half: bool = True) -> np.ndarray:
    """(n, n) distances between every pair of rows: half the L1 (TV) or other variants."""
    diff = np.abs(C[:, None, :] - C[None, :, :])
    dist = (diff ** p).sum(-1) ** (1.0 / p)
    return 0.5 * dist if half else dist


def reference_row_spread(C) -> dict[str, float]:
    r"""``spread`` (mean TV over all :math:`n^2` pairs of rows), ``delta`` (the largest TV)
    and ``floor`` :math:`\mu(C) = \sum_j \min_i C_{ij}` of a row-stochastic (n, n) map."""
    C = np.asarray(C, dtype=float)
    n = C.shape[0]
    pairs = [0.5 * sum(abs(C[i, j] - C[k, j]) for j in range(n))
             for i in range(n) for k in range(n)]
    return {"spread": float(np.mean(pairs)), "delta": float(max(pairs)),
            "floor": float(sum(min(C[i, j] for i in range(n)) for j in range(n)))}


def _row_stochastic(raw: np.ndarray) -> np.ndarray:
    return raw / raw.sum(-1, keepdims=True)


def _cases(seed: int) -> list[tuple[str, np.ndarray]]:
    """An attention-like map (a common sink column), an ALTI-like map (a heavy diagonal), the
    identity and a map whose rows are all equal."""
    rng = np.random.default_rng(seed + 63)
    n = 6
    sink = rng.random((n, n)) ** 3
    sink[:, rng.integers(n)] += 1.5 + rng.random(n)          # every row puts weight there
    diag = rng.random((n, n)) ** 2 + 3.0 * np.eye(n) * (0.5 + rng.random(n))[:, None]
    equal = np.tile(rng.random(n - 1) + 0.1, (n - 1, 1))
    return [("an attention-like map with a common sink column", _row_stochastic(sink)),
            ("an ALTI-like map with a heavy diagonal", _row_stochastic(diag)),
            ("the identity (every row on its own token)", np.eye(n + 1)),
            ("a map whose rows are all equal", _row_stochastic(equal))]


def mistakes(C: np.ndarray) -> dict[str, list[tuple[str, float]]]:
    """Per number, the values the usual mistakes give, as (cause, value) pairs, the more
    specific first (a cause is named only when it explains the reader's number in every case)."""
    C = np.asarray(C, dtype=float)
    n = C.shape[0]
    tv = _tv(C)
    half = "the 1/2 is missing: TV(p, q) = 1/2 sum_j |p_j - q_j| (between 0 and 1)."
    cols = ("the columns were compared, not the rows: row i is what token i receives, a "
            "distribution over the senders j; compare C[i] with C[k].")
    l2 = "the L2 distance was used; TV is half the L1 (Manhattan) distance of the two rows."
    off = n * (n - 1)
    return {
        "spread": [
            (half, float(2 * tv.mean())),
            ("the pairs i = k were left out of the mean: spread averages over all n^2 pairs "
             "(the n pairs i = k add 0), as cmixlib.row_spread and the chapter's table do.",
             float(tv.sum() / off) if off else float("nan")),
            (cols, float(_tv(C.T).mean())),
            (l2, float(_tv(C, p=2).mean())),
            (l2, float(_tv(C, p=2, half=False).mean())),
            ("this is the largest distance (delta); spread is the MEAN over the pairs.",
             float(tv.max())),
        ],
        "delta": [
            (half, float(2 * tv.max())),
            (cols, float(_tv(C.T).max())),
            (l2, float(_tv(C, p=2).max())),
            (l2, float(_tv(C, p=2, half=False).max())),
            ("this is the mean distance (spread); delta is the LARGEST over the pairs.",
             float(tv.mean())),
        ],
        "floor": [
            ("the minimum was taken over the wrong axis: for each sending token j (column) "
             "take the smallest entry over the receiving tokens i, then sum over j.",
             float(C.min(1).sum())),
            ("this is 1 - floor, the bound on delta; floor is the common mass "
             "sum_j min_i C_ij.", float(1.0 - C.min(0).sum())),
            ("the smallest entry of the whole map was used for every column; take each "
             "column's own minimum.", float(n * C.min())),
        ],
    }


def _consistent_cause(rows: list[tuple[np.ndarray, np.ndarray]], k: int) -> str | None:
    """The first cause of number ``KEYS[k]`` whose value equals the reader's in every case
    (``rows``: the map and the reader's three numbers)."""
    per_case = [mistakes(C)[KEYS[k]] for C, _ in rows]
    for c, (cause, _) in enumerate(per_case[0]):
        if all(np.isclose(got[k], found[c][1], atol=ATOL, rtol=RTOL)
               for (_, got), found in zip(rows, per_case)):
            return cause
    return None


def check_row_spread(student_fn: Callable, *, seed: int = 0,
                     verbose: bool = True) -> CheckResult:
    r"""``student_fn(C) -> {"spread", "delta", "floor"}`` (or a tuple in that order) for a
    row-stochastic (n, n) map ``C``: the mean and the largest total-variation distance between
    its rows and the common floor :math:`\sum_j \min_i C_{ij}`. Tested on an attention-like
    map, an ALTI-like map, the identity and a map of equal rows; checks
    :math:`\operatorname{spread} \le \delta \le 1 - \mu` on the reader's numbers and names the
    usual slips of each number."""
    res = CheckResult("check_row_spread")
    rows: list[tuple[np.ndarray, np.ndarray]] = []
    wrong: set[int] = set()
    for label, C in _cases(seed):
        res.begin(label)
        want_d = reference_row_spread(C)
        want = np.array([want_d[k] for k in KEYS])
        got = _call(res, lambda m: as_values(student_fn(m), KEYS), C.copy())
        if got is None:
            break
        got = got.reshape(-1)
        if got.size != len(KEYS):
            res.fail(f"{label}: expected three numbers {KEYS}, got {got.size}.")
            break
        rows.append((C, got))
        spread, delta, floor = got
        if spread <= delta + ATOL and delta <= 1.0 - floor + ATOL:
            res.ok(f"{label}: spread <= delta <= 1 - floor holds for your numbers")
        else:
            res.fail(f"{label}: your numbers break spread <= delta <= 1 - floor "
                     f"({spread:.4f}, {delta:.4f}, 1 - {floor:.4f}); a mean is at most the "
                     f"largest, and TV(p, q) = 1 - sum_j min(p_j, q_j) <= 1 - floor.")
        if _close(got, want, atol=ATOL, rtol=RTOL):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}: {KEYS[ix[0]]}", ATOL)
        wrong |= {k for k in range(len(KEYS))
                  if not np.isclose(got[k], want[k], atol=ATOL, rtol=RTOL)}
    for k in sorted(wrong):
        cause = _consistent_cause(rows, k)
        if cause:
            res.info(f"{KEYS[k]}, likely cause: {cause}")
    return res.finish(verbose)
