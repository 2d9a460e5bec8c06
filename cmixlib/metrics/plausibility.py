r"""Plausibility: how well an attribution over words agrees with human rationales.

The metrics of ERASER (DeYoung et al. 2020) as ferret (Attanasio et al. 2023) computes them, one
post at a time (the experiment averages over posts). For a post of :math:`W` words with
attribution scores :math:`s_1..s_W` and a binary ground-truth rationale :math:`r_1..r_W`
(at least one :math:`r_w = 1`):

* :func:`word_scores`: scores of word pieces pooled to words, :math:`s_w = \sum_{k \in P(w)} a_k`
  (:math:`P(w)` the sub-token positions of word w; special tokens belong to no word);
* :func:`auprc`: the area under the precision-recall curve of the soft scores against
  :math:`r`, as average precision (:func:`sklearn.metrics.average_precision_score`),
  :math:`\mathrm{AP} = \sum_n (R_n - R_{n-1})\,P_n` over the thresholds :math:`s_{(n)}`;
* :func:`top_k`, :func:`token_f1`: keep the :math:`k = \sum_w r_w` best words (ties: the earlier
  word first), then :math:`F_1 = 2PR/(P+R)` of that set against the rationale. With this k,
  precision = recall = F1 = the share of the rationale among the top k;
* :func:`iou_f1`: ERASER's span-level F1: the kept words and the rationale cut into maximal runs
  of consecutive words; a kept span counts as found when its best IOU with a rationale span is at
  least 0.5; :math:`P = \text{found}/\#\text{kept spans}`, :math:`R = \text{found}/\#\text{rationale
  spans}`, :math:`F_1 = 2PR/(P+R)` (0 when nothing is found).

Every metric lies in [0, 1]; a perfect attribution (the rationale's words scored above all the
others) scores 1 on all three.
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

__all__ = ["word_scores", "auprc", "top_k", "token_f1", "iou_f1", "spans", "plausibility_scores",
           "WORD_POOLING"]

#: How :func:`word_scores` pools a word's pieces: their sum (default), mean or max.
WORD_POOLING = ("sum", "mean", "max")


def _scores_and_rationale(scores, rationale) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=float)
    r = np.asarray(rationale)
    if s.ndim != 1 or r.ndim != 1 or s.shape != r.shape:
        raise ValueError(f"scores and rationale must be two 1-D arrays of the same length (one "
                         f"entry per word); got shapes {s.shape} and {r.shape}")
    if s.size == 0:
        raise ValueError("scores and rationale are empty: a post needs at least one word")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contain NaN or infinite values")
    if not np.all((r == 0) | (r == 1)):
        raise ValueError("rationale must hold only 0 and 1 (one per word)")
    r = r.astype(int)
    if r.sum() == 0:
        raise ValueError("the rationale marks no word: plausibility is undefined for this post")
    return s, r


def word_scores(token_scores, word_to_tokens: Sequence[Sequence[int]],
                pooling: str = "sum") -> np.ndarray:
    r"""Scores of words from scores of sub-tokens: :math:`s_w = \sum_{k \in P(w)} a_k` (``"sum"``),
    or the mean / max over :math:`P(w)`; a word without sub-tokens scores 0. ``token_scores``:
    shape (n,) over the input's positions (special tokens included, left out by the mapping);
    ``word_to_tokens[w]``: the positions of word w. All words at once: each piece's score is
    added to (or maxed into) its word's entry in position order (:func:`numpy.bincount`,
    :func:`numpy.maximum.at`)."""
    if pooling not in WORD_POOLING:
        raise ValueError(f"pooling must be one of {WORD_POOLING}, not {pooling!r}")
    a = np.asarray(token_scores, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"token_scores must be 1-D (one score per position), got shape {a.shape}")
    sizes = np.fromiter((len(p) for p in word_to_tokens), dtype=int, count=len(word_to_tokens))
    pos = np.fromiter(chain.from_iterable(word_to_tokens), dtype=int, count=int(sizes.sum()))
    word = np.repeat(np.arange(sizes.size), sizes)                 # the word of each piece
    bad = (pos < 0) | (pos >= a.size)
    if bad.any():
        w = int(word[np.argmax(bad)])
        raise ValueError(f"word {w} maps to positions {list(map(int, word_to_tokens[w]))} "
                         f"outside 0..{a.size - 1}")
    if pooling == "max":
        out = np.full(sizes.size, -np.inf)
        np.maximum.at(out, word, a[pos])
        return np.where(sizes > 0, out, 0.0)
    out = np.bincount(word, weights=a[pos], minlength=sizes.size)
    return out / np.maximum(sizes, 1) if pooling == "mean" else out


def auprc(scores, rationale) -> float:
    r"""Average precision of the soft ``scores`` against the binary ``rationale`` (one entry per
    word): :math:`\sum_n (R_n - R_{n-1}) P_n`, :math:`P_n, R_n` precision and recall of the words
    scoring at least the n-th threshold (tied scores enter together), :math:`R_0 = 0`: the
    definition of :func:`sklearn.metrics.average_precision_score` (the tests check this function
    against it), computed here in a few numpy passes."""
    return _auprc(*_scores_and_rationale(scores, rationale))


def _auprc(s: np.ndarray, r: np.ndarray) -> float:
    """:func:`auprc` of checked arrays: words sorted by descending score; each tie group ends a
    threshold n with TP_n rationale words among the first k_n words, P_n = TP_n / k_n,
    R_n = TP_n / TP_N."""
    order = np.argsort(-s, kind="stable")
    ranked = s[order]
    ends = np.append(np.flatnonzero(ranked[1:] != ranked[:-1]), s.size - 1)   # last of each tie
    tp = np.cumsum(r[order])[ends]
    precision = tp / (ends + 1)
    recall = tp / tp[-1]
    return float(max(0.0, np.sum(np.diff(recall, prepend=0.0) * precision)))


def top_k(scores, k: int) -> np.ndarray:
    """0/1 mask of the ``k`` highest ``scores`` (ties: the earlier word first)."""
    s = np.asarray(scores, dtype=float)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= s.size:
        raise ValueError(f"k must be an integer in 0..{s.size}, got {k!r}")
    order = np.argsort(-s, kind="stable")
    mask = np.zeros(s.size, dtype=int)
    mask[order[:k]] = 1
    return mask


def token_f1(scores, rationale) -> float:
    r"""Token F1 of the top :math:`k = \sum_w r_w` words against the rationale:
    :math:`F_1 = 2PR/(P+R)` with :math:`P = |T \cap G| / |T|`, :math:`R = |T \cap G| / |G|`
    (T the top-k words, G the rationale); here :math:`|T| = |G|`, so :math:`F_1 = |T\cap G|/|G|`."""
    s, r = _scores_and_rationale(scores, rationale)
    hit = int((top_k(s, int(r.sum())) & r).sum())
    return hit / int(r.sum())


def spans(mask) -> list[tuple[int, int]]:
    """Maximal runs of 1 in a 0/1 ``mask`` as ``(start, end)`` half-open word ranges."""
    m = np.asarray(mask).astype(int)
    edges = np.diff(np.concatenate([[0], m, [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def iou_f1(scores, rationale, threshold: float = 0.5) -> float:
    r"""ERASER's IOU F1 of the top :math:`k = \sum_w r_w` words: a kept span matches when
    :math:`\max_g |p \cap g| / |p \cup g| \ge` ``threshold`` over the rationale's spans g;
    :math:`P = \#\text{matched} / \#\text{kept spans}`, :math:`R = \#\text{matched} /
    \#\text{rationale spans}`, :math:`F_1 = 2PR/(P+R)` (0 when nothing matches)."""
    if not 0 < float(threshold) <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    s, r = _scores_and_rationale(scores, rationale)
    pred, gold = spans(top_k(s, int(r.sum()))), spans(r)

    def iou(a, b):
        inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
        return inter / (max(a[1], b[1]) - min(a[0], b[0]) if inter else 1)

    found = sum(max(iou(p, g) for g in gold) >= threshold for p in pred)
    if found == 0:
        return 0.0
    precision, recall = found / len(pred), found / len(gold)
    return 2 * precision * recall / (precision + recall)


def plausibility_scores(scores, rationale) -> dict[str, float]:
    """``{"auprc", "token_f1", "iou_f1"}`` of one post (see the module docstring)."""
    s, r = _scores_and_rationale(scores, rationale)
    return {"auprc": _auprc(s, r), "token_f1": token_f1(s, r), "iou_f1": iou_f1(s, r)}
