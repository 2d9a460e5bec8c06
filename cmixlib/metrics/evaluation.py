"""Evaluation metrics for context-mixing scores: cue alignment, special-token ranks, MLM accuracy.

Everything here is plain numpy / scipy / scikit-learn and works on 1-D score vectors (one row of a
context-mixing map, e.g. the ``[MASK]`` row at one layer) or on stacks of them. No model is needed.
The correlations and means over examples the experiments report (Spearman, Pearson, t intervals)
live in :mod:`cmixlib.metrics.statistics`.

Conventions pinned here (the papers leave them open; see book/reference_code.md §3):

Normalisation
    :func:`normalize_scores` clips negative values to 0 and divides by the sum, so a row is a
    distribution over tokens ("all positive values that sum to one", Value Zeroing §4.3). A row whose
    clipped sum is 0 becomes uniform. Every method in :mod:`cmixlib.methods.dispatch` already returns
    non-negative rows, so clipping only matters for signed gradient aggregations.

Excluded positions
    :func:`cue_alignment` can drop positions (special tokens, the target itself) before scoring; the
    remaining scores are re-normalised to sum to one (as in the authors' ContextMixingASR code with
    ``SKIP_SPECIAL_TOKENS``). **Default: nothing is excluded**, matching the Value Zeroing paper,
    which normalises "the scores for all tokens in a sentence" and keeps the diagonal.

Ties
    * dot product is unaffected by ties;
    * average precision uses :func:`sklearn.metrics.average_precision_score`, which groups tied
      scores into one threshold (tied tokens enter precision/recall together);
    * probes-needed counts the tokens with a score **strictly higher** than the best-scored cue
      (optimistic: a non-cue token tied with the best cue is not counted). ``ties="pessimistic"``
      counts non-cue tokens with score ``>=`` the best cue score instead. This differs from the
      logit-explanations code, which uses ``n - rank`` with dense ranks and is off under ties.

Checked input
    Paired vectors (scores and cue or tokens) must have equal lengths, positions
    (``cue_indices``, ``exclude``, ``row``) be integers in ``-n..n-1``, ``ties`` and ``scheme``
    known names; else :class:`~cmixlib.InputError` naming the argument.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from cmixlib.data.paper_numbers import VZ_MLM_ACCURACY
from cmixlib.metrics.statistics import keep_mask
from cmixlib.validation import check_choice, check_int, check_positions, check_same_length

__all__ = [
    "normalize_scores", "cue_vector", "dot_product", "average_precision", "probes_needed",
    "cue_alignment", "alignment_rows", "aggregate_alignment", "normalized_ranks",
    "special_token_mask", "special_token_rank", "DEFAULT_SPECIAL_TOKENS", "ALIGNMENT_METRICS",
    "MLM_TARGETS", "mlm_accuracy_table", "describe_mlm_accuracy",
]

ALIGNMENT_METRICS = ("dot", "ap", "probes_needed")

# ALTI Figure 6: [CLS], [SEP], "," and "." (RoBERTa: <s>, </s>, "Ġ,", "Ġ.").
DEFAULT_SPECIAL_TOKENS = ("[CLS]", "[SEP]", ",", ".", "<s>", "</s>", "\u0120,", "\u0120.")


# --------------------------------------------------------------------------------------------
# Normalisation and cue vectors
# --------------------------------------------------------------------------------------------

def normalize_scores(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Clip negatives to 0 and divide by the sum along ``axis``; all-zero rows become uniform."""
    s = np.clip(np.asarray(scores, dtype=float), 0.0, None)
    total = s.sum(axis=axis, keepdims=True)
    n = s.shape[axis]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(total > 0, s / np.where(total > 0, total, 1.0), 1.0 / n)
    return out


def cue_vector(n: int, cue_indices: Iterable[int]) -> np.ndarray:
    """Binary vector xi of length ``n`` with ones at ``cue_indices`` (VZ Eq. 11)."""
    n = check_int(n, "n", minimum=0)
    xi = np.zeros(n, dtype=float)
    idx = list(cue_indices)
    if idx:
        xi[check_positions(idx, n, "cue_indices", negative=True)] = 1.0
    return xi


# --------------------------------------------------------------------------------------------
# Cue alignment metrics (Value Zeroing §5, Appendix A.2)
# --------------------------------------------------------------------------------------------

def dot_product(scores: np.ndarray, cue: np.ndarray, normalize: bool = True) -> float:
    """Score mass on the cue tokens: ``normalize(S) . xi``."""
    s = normalize_scores(scores) if normalize else np.asarray(scores, dtype=float)
    cue = np.asarray(cue, dtype=float)
    check_same_length(s, cue, ("scores", "cue"))
    return float(np.dot(s, cue))


def average_precision(scores: np.ndarray, cue: np.ndarray) -> float:
    r"""Average precision of ranking the cue tokens first: :math:`\sum_k (R_k - R_{k-1}) P_k` over the
    distinct score thresholds in decreasing order (tied scores form one threshold), the definition
    of ``sklearn.metrics.average_precision_score``, computed directly (it is called for every
    example, method and layer; equality with scikit-learn is tested). NaN if no cue or all cues."""
    y = np.asarray(cue, dtype=int).ravel()
    s = np.asarray(scores, dtype=float).ravel()
    check_same_length(s, y, ("scores", "cue"))
    if y.sum() == 0 or y.sum() == y.size:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), y.size - 1]      # last position of each threshold
    tp = np.cumsum(y)[last]
    precision = tp / (last + 1)
    recall = tp / tp[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def probes_needed(scores: np.ndarray, cue: np.ndarray, ties: str = "optimistic") -> float:
    """Number of non-cue tokens ranked above the best-ranked cue (0 = a cue is ranked first).

    ``ties="optimistic"`` (default) counts tokens with a score strictly higher than the best cue
    score; ``ties="pessimistic"`` counts non-cue tokens with a score ``>=`` it. NaN if no cue.
    """
    check_choice(ties, ("optimistic", "pessimistic"), "ties")
    s = np.asarray(scores, dtype=float).ravel()
    cue = np.asarray(cue).astype(bool).ravel()
    check_same_length(s, cue, ("scores", "cue"))
    if not cue.any():
        return float("nan")
    best = s[cue].max()
    if ties == "optimistic":
        return float(np.sum(s > best))
    if ties == "pessimistic":
        return float(np.sum((s >= best) & ~cue))
    raise ValueError("ties must be 'optimistic' or 'pessimistic'")


def cue_alignment(scores: np.ndarray, cue_indices: Iterable[int], *,
                  exclude: Iterable[int] | None = None, ties: str = "optimistic") -> dict[str, float]:
    """Dot product, average precision and probes-needed of one score vector against a cue set.

    Parameters
    ----------
    scores:
        1-D scores over the n tokens (a row of a context-mixing map). Normalised here with
        :func:`normalize_scores`, after the excluded positions have been removed.
    cue_indices:
        Positions of the cue tokens, integers in ``-n..n-1``.
    exclude:
        Positions to drop before scoring (e.g. ``[0, n-1]`` for ``[CLS]``/``[SEP]``, or the target
        position), integers in ``-n..n-1``. The rest is re-normalised. Cues inside ``exclude`` are
        dropped too. Default: none.
    ties:
        ``"optimistic"`` or ``"pessimistic"`` (:func:`probes_needed`).

    Raises
    ------
    InputError
        A position out of range or not an integer, an unknown ``ties``.
    """
    s = np.asarray(scores, dtype=float).ravel()
    n = s.size
    cue = cue_vector(n, cue_indices)
    keep = keep_mask(n, exclude)
    s, cue = normalize_scores(s[keep]), cue[keep]
    return {
        "dot": dot_product(s, cue, normalize=False),
        "ap": average_precision(s, cue),
        "probes_needed": probes_needed(s, cue, ties=ties),
    }


def alignment_rows(maps: Mapping[str, np.ndarray], cue_indices: Sequence[int], *,
                   example_id: Any = None, exclude: Iterable[int] | None = None,
                   ties: str = "optimistic", row: int | None = None) -> list[dict]:
    """Tidy rows (example, method, layer, dot, ap, probes_needed) for one example.

    ``maps[method]`` is either a stack of target rows with shape ``(L, n)`` or full maps with shape
    ``(L, n, n)``; in the latter case ``row`` (the target position) selects the row. A 1-D array is
    treated as a single layer 0.
    """
    out = []
    exclude = None if exclude is None else list(exclude)
    for method, arr in maps.items():
        a = np.asarray(arr, dtype=float)
        if a.ndim == 3:
            if row is None:
                raise ValueError("full (L, n, n) maps need `row` (the target position)")
            a = a[:, check_int(row, "row", minimum=-a.shape[1], maximum=a.shape[1] - 1), :]
        elif a.ndim == 1:
            a = a[None, :]
        for layer in range(a.shape[0]):
            rec = {"example": example_id, "method": method, "layer": layer}
            rec.update(cue_alignment(a[layer], cue_indices, exclude=exclude, ties=ties))
            out.append(rec)
    return out


def aggregate_alignment(rows: Iterable[Mapping] | pd.DataFrame,
                        metrics: Sequence[str] = ALIGNMENT_METRICS,
                        by: Sequence[str] = ("method", "layer")) -> pd.DataFrame:
    """Mean, std (ddof=0) and count of each metric per (method, layer): one tidy row per group and metric.

    NaN values (e.g. AP of an example whose cues were all excluded) are skipped; ``n`` counts the
    finite values used.
    """
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    long = df.melt(id_vars=[c for c in df.columns if c not in metrics],
                   value_vars=[m for m in metrics if m in df.columns],
                   var_name="metric", value_name="value")
    g = long.groupby(list(by) + ["metric"], sort=False)["value"]
    return g.agg(mean="mean", std=_pop_std, n="count").reset_index()


def _pop_std(v: pd.Series) -> float:
    x = v.to_numpy(dtype=float)
    x = x[np.isfinite(x)]
    return float(x.std()) if x.size else float("nan")


# --------------------------------------------------------------------------------------------
# Normalised ranks of special tokens (ALTI Figure 6)
# --------------------------------------------------------------------------------------------

def normalized_ranks(scores: Sequence[float], scheme: str = "dense") -> np.ndarray:
    """Normalised relevance rank of each token: close to 1 = most relevant, small = least.

    ``scheme="dense"`` (default, as the ALTI code): dense rank (1 = lowest score) divided by the
    number of tokens n; the top token gets ``n_distinct / n`` (1 when scores are distinct).
    ``scheme="minmax"``: average rank mapped linearly to [0, 1], ``(r - 1) / (n - 1)``, the range the
    ALTI paper's footnote describes.
    """
    from scipy.stats import rankdata

    check_choice(scheme, ("dense", "minmax"), "scheme")
    s = np.asarray(scores, dtype=float).ravel()
    n = s.size
    if n == 0:
        return s
    if scheme == "dense":
        return rankdata(s, method="dense") / n
    if scheme == "minmax":
        if n == 1:
            return np.ones(1)
        return (rankdata(s, method="average") - 1.0) / (n - 1.0)
    raise ValueError("scheme must be 'dense' or 'minmax'")


def special_token_mask(tokens: Sequence[str], special: Iterable[str] = DEFAULT_SPECIAL_TOKENS) -> np.ndarray:
    """Boolean mask of the positions whose token string is in ``special``."""
    sp = set(special)
    return np.array([t in sp for t in tokens], dtype=bool)


def special_token_rank(scores: Sequence[float], tokens: Sequence[str],
                       special: Iterable[str] = DEFAULT_SPECIAL_TOKENS, scheme: str = "dense") -> float:
    """Mean normalised rank of the special / punctuation positions of one sentence (NaN if none).

    Average over sentences with :func:`cmixlib.metrics.statistics.mean_std` to get the ALTI
    Figure 6 quantity (our choice: first mean over a sentence's special positions, then mean over
    sentences).
    """
    mask = special_token_mask(tokens, special)
    check_same_length(np.asarray(scores).ravel(), mask, ("scores", "tokens"))
    if not mask.any():
        return float("nan")
    return float(normalized_ranks(scores, scheme=scheme)[mask].mean())


# --------------------------------------------------------------------------------------------
# How well an MLM does the agreement task (chapters 8-12 print this beside their results)
# --------------------------------------------------------------------------------------------
#: Targets for the offline MLM (issue "an offline pre-trained MLM that models English").
MLM_TARGETS = {"agreement": 0.80, "agreement_per_subset": 0.65, "masked_word": 0.30}


def mlm_accuracy_table(metrics: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One column per condition (``{condition: cmixlib.training.mlm_metrics(...)}``): BLiMP
    agreement accuracy overall and per subset, masked-word accuracy on each held-out text, and
    the paper's BERT accuracy (:data:`cmixlib.data.paper_numbers.VZ_MLM_ACCURACY`)."""
    cols = {}
    for cond, m in metrics.items():
        key = "finetuned" if "fine" in cond else "pretrained"
        cols[cond] = {"agreement (all subsets)": m["agreement_accuracy_test"],
                      **{f"agreement: {k}": v for k, v in m["agreement_by_subset"].items()},
                      "masked-word (ELTeC held-out)": m["masked_word_accuracy_eltec"],
                      "masked-word (WikiText-2 held-out)": m["masked_word_accuracy_wikitext2"],
                      "paper's BERT: agreement": VZ_MLM_ACCURACY[key]}
    return pd.DataFrame(cols)


def describe_mlm_accuracy(condition: str, m: Mapping[str, Any]) -> str:
    """A sentence stating the accuracies in ``m`` and whether they meet :data:`MLM_TARGETS`.

    Rule: "meets the targets" iff agreement >= 0.80, every subset >= 0.65 and masked-word
    (ELTeC held-out) >= 0.30; otherwise the failed parts are named.
    """
    t = MLM_TARGETS
    subs = m["agreement_by_subset"]
    low = [k for k, v in subs.items() if v < t["agreement_per_subset"]]
    fails = ([f"agreement below {t['agreement']:.2f}"] if m["agreement_accuracy_test"]
             < t["agreement"] else []) + ([f"subsets below {t['agreement_per_subset']:.2f}: "
                                            + ", ".join(low)] if low else []) + \
        ([f"masked-word below {t['masked_word']:.2f}"]
         if m["masked_word_accuracy_eltec"] < t["masked_word"] else [])
    worst = min(subs, key=subs.get)
    return (f"{condition}: prefers the right word over the foil in "
            f"{m['agreement_accuracy_test']:.1%} of {m['n_agreement_test']:,} test pairs "
            f"(lowest subset {worst}: {subs[worst]:.1%}); masked-word top-1 "
            f"{m['masked_word_accuracy_eltec']:.1%} on held-out text; "
            + ("meets the targets." if not fails else "misses the targets (" + "; ".join(fails)
               + ")."))

