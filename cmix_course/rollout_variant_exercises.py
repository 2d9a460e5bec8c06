r"""Exercises 11.3 and 13.3: two variants of rollout and what they do to one row.

* 11.3, rollout with the identity (attention rollout's convention):
  :math:`R^{\ell} = (\tfrac12 \tilde C^{\ell} + \tfrac12 I)\, R^{\ell-1}`, :math:`R^0 = I`; the
  diagonal entry :math:`R^{\ell}_{ii}` is at least :math:`2^{-\ell}` (the path that stays at
  :math:`i` in every layer), whatever the maps.
* 13.3, GlobEnc's raw rollout: with :math:`C^{\ell} = D^{\ell} \tilde C^{\ell}` (:math:`D^{\ell}` the
  diagonal matrix of layer :math:`\ell`'s row sums, :math:`\tilde C^{\ell}` row-normalised), the
  ``[CLS]`` row of :math:`C^{\ell} \cdots C^{1}` is
  :math:`d^{\ell}_0\, e_0^{\top} \tilde C^{\ell} D^{\ell-1} \tilde C^{\ell-1} \cdots D^{1} \tilde C^{1}`:
  the top layer's row sums only scale it, the lower layers' weight the paths through each token.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .checking import CheckResult, _call, _check_shape, _close, _diagnose, _report_diff

ATOL = 1e-9


def _stochastic(rng: np.random.Generator, L: int, n: int, *, peak: float = 2.0,
                zero_diagonal: bool = False) -> np.ndarray:
    logits = peak * rng.standard_normal((L, n, n))
    if zero_diagonal:
        logits[:, np.arange(n), np.arange(n)] = -np.inf
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


# --- 11.3: the row of rollout with the identity --------------------------------------------

def reference_identity_rollout_row(maps, i: int, *, identity: bool = True, half: bool = True,
                                   first_left: bool = False, once: bool = False) -> np.ndarray:
    """Row ``i`` of :math:`R^{\\ell} = (\\tfrac12 \\tilde C^{\\ell} + \\tfrac12 I) R^{\\ell-1}` for
    every layer, shape (L, n). The keywords give the usual mistakes: no identity, ``C + I``
    without the halves, the first layer on the left, the identity added once to the product."""
    C = np.asarray(maps, dtype=float)
    L, n, _ = C.shape
    eye = np.eye(n)
    R, rows = eye, []
    for layer in range(L):
        if once or not identity:
            A = C[layer]
        else:
            A = 0.5 * C[layer] + 0.5 * eye if half else C[layer] + eye
        R = R @ A if first_left else A @ R
        rows.append((0.5 * R + 0.5 * eye)[i] if once else R[i])
    return np.stack(rows)


def _identity_cases(seed: int):
    rng = np.random.default_rng(seed + 1103)
    n1, n2 = 6 + seed % 3, 5 + seed % 2
    return [("a walk that has to move (zero diagonal), 4 layers",
             _stochastic(rng, 4, n1, zero_diagonal=True), int(rng.integers(1, n1 - 1))),
            ("random peaked maps, 3 layers", _stochastic(rng, 3, n2, peak=3.0),
             int(rng.integers(0, n2)))]


def check_identity_rollout(student_fn: Callable, *, seed: int = 0,
                           verbose: bool = True) -> CheckResult:
    """``student_fn(maps, i) -> (L, n)``: row ``i`` of the rollout of
    :math:`\\tfrac12 \\tilde C^{\\ell} + \\tfrac12 I` up to each layer. Checks that every row sums
    to 1 and that the self weight is at least :math:`2^{-\\ell}` (the bound derived by hand),
    and names the usual slips (no identity, ``C + I`` without the halves, the first layer on the
    left, the identity added once to the product, column ``i``, an off-by-one layer)."""
    res = CheckResult("check_identity_rollout")
    for label, maps, i in _identity_cases(seed):
        res.begin(label)
        want = reference_identity_rollout_row(maps, i)
        got = _call(res, student_fn, maps.copy(), i)
        if got is None:
            break
        if not _check_shape(res, got, want.shape, f"[{label}] (layers, tokens)"):
            break
        sums = got.sum(-1)
        if np.allclose(sums, 1.0, atol=1e-8):
            res.ok(f"{label}: every row sums to 1")
        else:
            res.fail(f"{label}: the rows sum to {np.round(sums, 3).tolist()}, not 1; each "
                     f"factor ½C + ½I has rows that sum to 1, and so has their product.")
        bound = 0.5 ** np.arange(1, len(got) + 1)
        if (got[:, i] >= bound - 1e-9).all():
            res.ok(f"{label}: the self weight R_ii is at least 2^-l in every layer")
        else:
            res.fail(f"{label}: the self weight R_ii falls below 2^-l (the path that stays at "
                     f"token {i} in every layer has weight 2^-l, and no path is negative).")
        if _close(got, want, atol=ATOL, rtol=1e-8):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, layer {ix[0] + 1}, token j={ix[1]}",
                     ATOL)
        eye = np.eye(maps.shape[-1])
        R = [eye]
        for layer in range(len(maps)):
            R.append((0.5 * maps[layer] + 0.5 * eye) @ R[-1])
        column = np.stack([r[:, i] for r in R[1:]])
        causes = {
            "the identity was not added: this is rollout of the maps themselves (Table 3's "
            "recipe), not ½C + ½I.": reference_identity_rollout_row(maps, i, identity=False),
            "C + I without the halves: each factor's rows sum to 2, so row l sums to 2^l; "
            "use ½C + ½I.": reference_identity_rollout_row(maps, i, half=False),
            "the layers are multiplied in the wrong order: the current layer goes on the "
            "LEFT, R^l = (½C^l + ½I) R^(l-1).": reference_identity_rollout_row(
                maps, i, first_left=True),
            "the identity was added once, to the product (½ R + ½ I), instead of to every "
            "layer's map.": reference_identity_rollout_row(maps, i, once=True),
            f"column {i} was returned instead of row {i}: row i holds what token i receives.":
                column,
        }
        _diagnose(res, got, causes, ATOL, want=want, layers=True)
    return res.finish(verbose)


# --- 13.3: the raw rollout's [CLS] row from the normalised maps and the row sums -------------

def reference_raw_cls_row(norm_maps, row_sums, *, scale: str = "rows",
                          first_left: bool = False, column: bool = False) -> np.ndarray:
    """Row 0 of :math:`C^{\\ell} \\cdots C^{1}` with :math:`C^{\\ell} = D^{\\ell} \\tilde C^{\\ell}`, for
    every layer, shape (L, n). ``scale`` "rows" (right), "none", "columns" or "divide" and the
    other keywords give the usual mistakes."""
    Ct = np.asarray(norm_maps, dtype=float)
    d = np.asarray(row_sums, dtype=float)
    L, n, _ = Ct.shape
    if scale == "rows":
        C = d[:, :, None] * Ct
    elif scale == "columns":
        C = Ct * d[:, None, :]
    elif scale == "divide":
        C = Ct / d[:, :, None]
    else:
        C = Ct
    P, rows = np.eye(n), []
    for layer in range(L):
        P = P @ C[layer] if first_left else C[layer] @ P
        rows.append(P[:, 0] if column else P[0])
    return np.stack(rows)


def _raw_cases(seed: int):
    rng = np.random.default_rng(seed + 1303)
    n1, n2 = 6 + seed % 3, 5 + seed % 2
    return [("random maps, row sums between 0.5 and 3, 3 layers", _stochastic(rng, 3, n1),
             rng.uniform(0.5, 3.0, (3, n1))),
            ("row sums that grow with depth, 4 layers", _stochastic(rng, 4, n2, peak=1.0),
             np.exp(rng.normal(0.3 * np.arange(4)[:, None], 0.5, (4, n2))))]


def check_raw_cls_row(student_fn: Callable, *, seed: int = 0,
                      verbose: bool = True) -> CheckResult:
    """``student_fn(norm_maps, row_sums) -> (L, n)``: the ``[CLS]`` row (row 0) of GlobEnc's raw
    rollout :math:`C^{\\ell} \\cdots C^{1}` up to each layer, rebuilt from the row-normalised maps
    and the row sums. Checks that layer 1's row is :math:`d^1_0` times :math:`\\tilde C^1`'s row 0
    (the top layer's sums only scale the row) and names the usual slips (the sums ignored,
    scaling columns, dividing, the first layer on the left, the ``[CLS]`` column, the result
    normalised)."""
    res = CheckResult("check_raw_cls_row")
    for label, Ct, d in _raw_cases(seed):
        res.begin(label)
        want = reference_raw_cls_row(Ct, d)
        got = _call(res, student_fn, Ct.copy(), d.copy())
        if got is None:
            break
        if not _check_shape(res, got, want.shape, f"[{label}] (layers, tokens)"):
            break
        if _close(got[0], d[0, 0] * Ct[0, 0], atol=ATOL, rtol=1e-8):
            res.ok(f"{label}: layer 1's row is d_0 times the normalised map's row 0")
        else:
            res.fail(f"{label}: layer 1's row should be d^1_0 C~^1_(0,:) (row 0 of C^1 = "
                     f"D^1 C~^1).")
        if _close(got, want, atol=ATOL, rtol=1e-8):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, layer {ix[0] + 1}, token j={ix[1]}",
                     ATOL)
        causes = {
            "the row sums were not used: this is the row-normalised rollout; multiply each "
            "row i of C~^l by d^l_i first.": reference_raw_cls_row(Ct, d, scale="none"),
            "the sums scaled the columns (C~ D): row i of C^l is d^l_i times row i of C~^l, "
            "so D goes on the LEFT, C^l = D^l C~^l.": reference_raw_cls_row(Ct, d,
                                                                             scale="columns"),
            "the rows were divided by their sums: the normalised map is C~ = C / d, so "
            "C = d C~.": reference_raw_cls_row(Ct, d, scale="divide"),
            "the layers are multiplied in the wrong order: the current layer goes on the "
            "LEFT.": reference_raw_cls_row(Ct, d, first_left=True),
            "column 0 was returned instead of row 0: the [CLS] row holds what [CLS] "
            "receives.": reference_raw_cls_row(Ct, d, column=True),
        }
        _diagnose(res, got, causes, ATOL, want=want, layers=True)
    return res.finish(verbose)
