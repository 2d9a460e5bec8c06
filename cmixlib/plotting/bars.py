"""Bar charts of summary results: one bar per method, and the paper's values beside ours.

* :func:`mean_interval` -- the Student-t confidence interval of a mean from (mean, std, n), for
  error bars that say how well a mean is known (a ± std bar says how spread the examples are);
* :func:`plot_consistency_bars` -- one bar per method with its confidence interval (ALTI
  Figure 7);
* :func:`plot_paper_vs_ours` -- the paper's value beside ours, per method: the paper's bars white
  and hatched, ours in the method's colour with a black outline, so that no bar of ours looks
  like a grey baseline (Random's registry colour is a light grey).

Colours and labels come from :mod:`cmixlib.methods.registry`. Long titles and axis labels are wrapped to
the figure's size, so that they are not cut off at its edge.
"""
from __future__ import annotations

import textwrap
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

from cmixlib.methods.registry import method_color, method_label


def mean_interval(mean, std, n, confidence: float = 0.95, ddof: int = 0):
    r"""Student-t confidence interval of a mean from its summary: ``(low, high)`` arrays.

    With :math:`s` the standard deviation over :math:`n` examples computed with ``ddof`` (the
    book's evaluations report the population std, ``ddof=0``), the standard error is
    :math:`\mathrm{se} = s \sqrt{(n - \mathrm{ddof}) / (n - 1)} / \sqrt{n}` and the interval
    :math:`\bar x \pm t_{(1+c)/2,\,n-1}\,\mathrm{se}`, the same as ``scipy.stats.t.interval``
    on the raw values. NaN where :math:`n < 2`.
    """
    mean, std = np.asarray(mean, dtype=float), np.asarray(std, dtype=float)
    n = np.asarray(n, dtype=float)
    ok = n >= 2
    safe = np.where(ok, n, 2.0)
    se = std * np.sqrt((safe - ddof) / (safe - 1)) / np.sqrt(safe)
    half = np.where(ok, stats.t.ppf(0.5 + confidence / 2, safe - 1) * se, np.nan)
    return mean - half, mean + half


def _ci_or_std(df, confidence: float = 0.95):
    """(lower, upper) error-bar lengths and what they are: ``ci_low``/``ci_high`` if present,
    else the t interval from ``std`` and ``n`` (:func:`mean_interval`), else ± ``std``."""
    mean = df["mean"].to_numpy(dtype=float)
    if {"ci_low", "ci_high"} <= set(df.columns):
        low, high = df["ci_low"].to_numpy(dtype=float), df["ci_high"].to_numpy(dtype=float)
        return np.vstack([mean - low, high - mean]), "interval"
    if {"std", "n"} <= set(df.columns):
        low, high = mean_interval(mean, df["std"], df["n"], confidence)
        return np.vstack([mean - low, high - mean]), f"{confidence:.0%} t interval"
    if "std" in df.columns:
        s = df["std"].to_numpy(dtype=float)
        return np.vstack([s, s]), "± std"
    return None, ""


def _wrap(text: str, inches: float, fontsize: float) -> str:
    """``text`` wrapped to lines that fit ``inches`` at ``fontsize`` points (a character is
    about 0.55 em wide), so that titles and axis labels are not cut off at the figure's edge."""
    width = max(12, int(inches * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(text, width)) if len(text) > width else text


def plot_paper_vs_ours(ax, methods: Sequence[str], paper, ours, *, ours_err=None,
                       paper_label: str = "paper (BERT-base)", ours_label: str = "ours",
                       rotation: int = 60):
    """Paired bars per method: the paper's value (white, hatched, grey outline) beside ours (the
    method's colour, black outline), so that "ours" never looks like a baseline's grey bar.

    ``ours_err`` is a ``(2, len(methods))`` array of error-bar lengths (e.g. from
    :func:`mean_interval`) or None; say in ``ours_label`` what the bars are."""
    x = np.arange(len(methods))
    ax.bar(x - 0.2, np.asarray(paper, dtype=float), 0.4, color="white", edgecolor="#737373",
           hatch="///", lw=0.8, label=paper_label)
    ax.bar(x + 0.2, np.asarray(ours, dtype=float), 0.4,
           color=[method_color(str(m)) for m in methods], edgecolor="black", lw=0.6,
           yerr=None if ours_err is None else np.nan_to_num(np.asarray(ours_err, dtype=float)),
           capsize=2, label=ours_label)
    ax.set_xticks(x)
    ax.set_xticklabels([method_label(str(m)) for m in methods], rotation=rotation, ha="right")
    ax.axhline(0, color="black", lw=0.8)
    return ax


def plot_consistency_bars(df, ax=None, *, title: str | None = None,
                          ylabel: str = "mean Spearman ρ between the two models"):
    """One bar per method (``df`` rows with ``method`` and ``mean``) in the method's colour, with
    the confidence interval (``ci_low``/``ci_high``) or ± ``std`` as error bars (ALTI Figure 7)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(max(1.1 * len(df) + 2.0, 5.5), 3.6))
    x = np.arange(len(df))
    err, _ = _ci_or_std(df)
    ax.bar(x, df["mean"].to_numpy(dtype=float), color=[method_color(str(m)) for m in df["method"]],
           edgecolor="black", lw=0.6,
           yerr=np.nan_to_num(err) if err is not None else None, capsize=3)
    ax.set_xticks(x)
    ax.set_xticklabels([method_label(str(m)) for m in df["method"]], rotation=30, ha="right")
    ax.axhline(0, color="black", lw=0.8)
    width, height = ax.figure.get_size_inches()
    ax.set_ylabel(_wrap(ylabel, 0.8 * height, 10))
    if title:
        ax.set_title(_wrap(title, 0.9 * width, 11), fontsize=11)
    ax.figure.tight_layout()
    return ax
