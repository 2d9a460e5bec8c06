"""Statistics of scores: rank and linear correlations, means with their spread or t interval.

Plain numpy / scipy on 1-D vectors or stacks of them (no model): the correlations the papers
report (ALTI Table 2, GlobEnc Tables 1-2 and Figure 4, VZ Tables 2-3) and the summaries over
examples the experiments print. Conventions (book/reference_code.md §3):

Spearman
    :func:`spearman` wraps :func:`scipy.stats.spearmanr` (average ranks for ties). If either vector is
    constant (or shorter than 2) the correlation is undefined and **NaN** is returned, without a
    warning. :func:`mean_std` then averages over the finite values only and reports how many were
    dropped. Standard deviations are population std (``ddof=0``), as ``numpy.std`` in the ALTI and
    GlobEnc scripts.

Checked input
    Paired vectors (``a`` and ``b``, ``xs`` and ``ys``, a reference and its scores) must have
    equal lengths, positions (``exclude``) be integers in ``-n..n-1``; else
    :class:`~cmixlib.InputError` naming the argument.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from cmixlib.validation import check_positions, check_same_length

__all__ = ["keep_mask", "spearman", "pearson_rows", "spearman_rows", "spearman_to",
           "per_example_spearman", "mean_std", "correlation_table", "mean_ci", "correlate",
           "map_agreement"]


def keep_mask(n: int, exclude: Iterable[int] | None) -> np.ndarray:
    """Boolean mask of length ``n``, False at the positions ``exclude`` (integers in
    ``-n..n-1``; None: every position kept)."""
    keep = np.ones(n, dtype=bool)
    if exclude is not None:
        keep[check_positions(list(exclude), n, "exclude", negative=True)] = False
    return keep


# --------------------------------------------------------------------------------------------
# Rank correlations (ALTI Table 2, GlobEnc Tables 1-2, VZ Tables 2-3)
# --------------------------------------------------------------------------------------------

def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho (scipy, average ranks). NaN if lengths < 2, a vector is constant, or has NaN."""
    x = np.asarray(a, dtype=float).ravel()
    y = np.asarray(b, dtype=float).ravel()
    check_same_length(x, y, ("a", "b"))
    if x.size < 2 or not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return float("nan")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    from scipy.stats import spearmanr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rho = spearmanr(x, y).statistic
    return float(rho)


def pearson_rows(x, y) -> np.ndarray:
    r"""Pearson's r of many pairs of vectors at once, along the last axis (broadcast).

    .. math:: r(x, y) = \frac{\langle x - \bar x,\; y - \bar y\rangle}
              {\lVert x - \bar x\rVert\,\lVert y - \bar y\rVert}.

    NaN where a vector has fewer than 2 entries, a non-finite entry, or is constant. ``x`` of
    shape (..., n) against ``y`` of shape (n,) correlates every row of ``x`` with ``y``."""
    x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    shape = x.shape[:-1]
    if x.shape[-1] < 2:
        return np.full(shape, np.nan)
    bad = ~(np.isfinite(x).all(-1) & np.isfinite(y).all(-1))
    bad |= (np.ptp(np.nan_to_num(x), axis=-1) == 0) | (np.ptp(np.nan_to_num(y), axis=-1) == 0)
    xc = np.nan_to_num(x)
    yc = np.nan_to_num(y)
    xc = xc - xc.mean(-1, keepdims=True)
    yc = yc - yc.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(-1) / np.sqrt((xc * xc).sum(-1) * (yc * yc).sum(-1))
    return np.where(bad, np.nan, np.clip(r, -1.0, 1.0))


def spearman_rows(x, y) -> np.ndarray:
    r"""Spearman's rho of many pairs of vectors at once, along the last axis (broadcast):
    :func:`pearson_rows` of the average ranks (ties share their mean rank;
    :func:`scipy.stats.rankdata`), the value :func:`spearman` returns one pair at a time. NaN
    where a vector has fewer than 2 entries, a non-finite entry, or is constant (as
    :func:`spearman`). ``x`` of shape (..., n) against ``y`` of shape (n,) correlates every row
    of ``x`` with ``y``."""
    from scipy.stats import rankdata

    x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    if x.shape[-1] < 2:
        return np.full(x.shape[:-1], np.nan)
    bad = ~(np.isfinite(x).all(-1) & np.isfinite(y).all(-1))
    rho = pearson_rows(rankdata(np.nan_to_num(x), axis=-1), rankdata(np.nan_to_num(y), axis=-1))
    return np.where(bad, np.nan, rho)


def spearman_to(reference: Sequence[float], scores: Mapping[str, Sequence[float]],
                exclude: Iterable[int] | None = None) -> dict[str, float]:
    """Spearman's rho of each named score vector with one ``reference`` vector (as
    :func:`spearman`, computed at once by :func:`spearman_rows`), after dropping the positions
    ``exclude`` (e.g. ``[0, -1]`` for ``[CLS]``/``[SEP]``) from every vector."""
    ref = np.asarray(reference, dtype=float).ravel()
    names = list(scores)
    if not names:
        return {}
    mat = np.stack([np.asarray(scores[m], dtype=float).ravel() for m in names])
    check_same_length(mat[0], ref, ("each scores vector", "reference"))
    if exclude is not None:
        keep = keep_mask(ref.size, exclude)
        mat, ref = mat[:, keep], ref[keep]
    return dict(zip(names, spearman_rows(mat, ref).tolist()))


def per_example_spearman(xs: Iterable[Sequence[float]], ys: Iterable[Sequence[float]],
                         exclude: Iterable[int] | None = None) -> np.ndarray:
    """Spearman per pair of vectors (e.g. method relevance vs blank-out per sentence).

    ``exclude`` drops positions (e.g. ``[0, -1]`` for ``[CLS]``/``[SEP]``) from both vectors first.
    """
    xs, ys, out = list(xs), list(ys), []
    check_same_length(xs, ys, ("xs", "ys"), per="example")
    for x, y in zip(xs, ys):
        x = np.asarray(x, dtype=float).ravel()
        y = np.asarray(y, dtype=float).ravel()
        if exclude is not None:
            keep = keep_mask(x.size, exclude)
            x, y = x[keep], y[keep]
        out.append(spearman(x, y))
    return np.asarray(out, dtype=float)


def mean_std(values: Iterable[float]) -> dict[str, float]:
    """Mean and population std over the finite values; also the number used and dropped (NaN)."""
    v = np.asarray(list(values), dtype=float)
    fin = v[np.isfinite(v)]
    return {
        "mean": float(fin.mean()) if fin.size else float("nan"),
        "std": float(fin.std()) if fin.size else float("nan"),
        "n": int(fin.size),
        "n_nan": int(v.size - fin.size),
    }


def correlation_table(per_method: Mapping[str, Iterable[float]], **columns: Any) -> pd.DataFrame:
    """Tidy table ``method, mean, std, n, n_nan`` (+ constant ``columns``) from per-example rhos."""
    rows = []
    for method, vals in per_method.items():
        rec = {"method": method, **columns}
        rec.update(mean_std(vals))
        rows.append(rec)
    return pd.DataFrame(rows)



# --------------------------------------------------------------------------------------------
# Means with t intervals, correlations of vectors and of maps (GlobEnc Figure 4, ALTI Figure 7)
# --------------------------------------------------------------------------------------------

def mean_ci(values, confidence: float) -> dict[str, float]:
    r"""Mean, population std (as :func:`mean_std`), ``n`` and a two-sided
    Student-t confidence interval of the mean over the finite values (:func:`scipy.stats.t.interval`):

    .. math:: \bar v \pm t_{(1+c)/2,\; n-1}\, s/\sqrt{n}, \qquad s = \text{sample std (ddof=1)}.

    The bounds are NaN when fewer than 2 values are finite."""
    from scipy import stats

    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    out = {"mean": float(v.mean()) if v.size else float("nan"),
           "std": float(v.std()) if v.size else float("nan"), "n": int(v.size),
           "ci_low": float("nan"), "ci_high": float("nan"), "confidence": float(confidence)}
    if v.size >= 2:
        sem = float(v.std(ddof=1)) / np.sqrt(v.size)
        if sem > 0:
            lo, hi = stats.t.interval(confidence, df=v.size - 1, loc=out["mean"], scale=sem)
        else:
            lo = hi = out["mean"]
        out["ci_low"], out["ci_high"] = float(lo), float(hi)
    return out


def correlate(a, b, kind: str) -> float:
    """Pearson's r (:func:`scipy.stats.pearsonr`) or Spearman's rho of two vectors over their
    finite entries; NaN when fewer than 2 remain or either is constant."""
    from scipy.stats import pearsonr

    a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    if kind == "pearson":
        return float(pearsonr(a, b).statistic)
    return spearman(a, b)


def map_agreement(method_map: np.ndarray, reference_map: np.ndarray, *, correlation: str = "pearson",
                  unit: str = "row", diagonal: bool = True) -> float:
    r"""Agreement of one layer's ``(n, n)`` attribution map with a reference map (e.g. HTA).

    ``unit="row"``: :math:`\frac{1}{n}\sum_i \mathrm{corr}(M_{i,:}, R_{i,:})`, the mean over output
    tokens i of the correlation of their rows (GlobEnc's code correlates the maps row by row, "per
    attender"; rows whose correlation is undefined are skipped). A row correlation is unchanged by
    scaling a row, so row normalisation of either map does not matter. ``unit="map"``: one
    correlation of the two flattened maps. ``correlation``: ``"pearson"`` (the caption of GlobEnc's
    Figure 4) or ``"spearman"``. ``diagonal=False`` leaves out the entries j = i (a token's own
    residual share, which dominates both maps), so that only how the rest is spread is compared.
    """
    if correlation not in ("pearson", "spearman"):
        raise ValueError(f"correlation must be 'pearson' or 'spearman', not {correlation!r}")
    if unit not in ("row", "map"):
        raise ValueError(f"unit must be 'row' or 'map', not {unit!r}")
    m, r = np.asarray(method_map, dtype=float), np.asarray(reference_map, dtype=float)
    if m.shape != r.shape or m.ndim != 2:
        raise ValueError(f"expected two (n, n) maps of the same shape, got {m.shape} and {r.shape}")
    keep = np.ones(m.shape, dtype=bool) if diagonal else ~np.eye(m.shape[0], dtype=bool)
    if unit == "map":
        return correlate(m[keep], r[keep], correlation)
    n = m.shape[0]
    mr, rr = m[keep].reshape(n, -1), r[keep].reshape(n, -1)      # the kept entries, row by row
    rows = _row_correlations(mr, rr, correlation)
    rows = rows[np.isfinite(rows)]
    return float(np.mean(rows)) if rows.size else float("nan")


def _row_correlations(a: np.ndarray, b: np.ndarray, kind: str) -> np.ndarray:
    """:func:`correlate` of every row pair ``a[i], b[i]`` at once: NaN where a row has a
    non-finite entry, fewer than 2 entries, or is constant (rows with non-finite entries go
    through :func:`correlate` one by one, which drops those entries)."""
    out = (spearman_rows if kind == "spearman" else pearson_rows)(a, b)
    odd = ~(np.isfinite(a).all(-1) & np.isfinite(b).all(-1))
    for i in np.flatnonzero(odd):
        out[i] = correlate(a[i], b[i], kind)
    return out
