r"""Exercise 15.2: a token map aggregated to words.

A word :math:`a` made of the pieces :math:`P_a` (a special token, word id ``None``, is a word
of its own; consecutive pieces with the same word id form one word) receives the mean of its
pieces' rows and gives the sum of its pieces' columns:

.. math::

   W_{ab} = \frac{1}{|P_a|} \sum_{i \in P_a} \sum_{j \in P_b} C_{ij}, \qquad
   \sum_b W_{ab} = \frac{1}{|P_a|} \sum_{i \in P_a} \sum_j C_{ij} = 1

when every row of :math:`C` sums to 1. This is :meth:`cmixlib.MixingResult.aggregate` with
``words=True`` (module :mod:`cmixlib.result`). The checker checks the row sums on the reader's
result and names the usual slips.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .checking import CheckResult, _call, _check_shape, _close, _diagnose, _report_diff

#: float64 inputs, n <= 14: the reference's sums err below 1e-14; each named mistake moves
#: some entry by more than 1e-2 in the checker's cases (tested).
ATOL = 1e-9


def word_groups(word_ids: Sequence[int | None], *, merge_specials: bool = False,
                by_value: bool = False) -> list[list[int]]:
    """Token positions grouped by word, in order (a run of equal word ids is one word; a
    token with word id ``None`` is a word of its own). ``merge_specials`` puts all special
    tokens into one word and ``by_value`` merges equal word ids wherever they are (likely
    mistakes)."""
    groups: list[list[int]] = []
    seen: dict = {}
    last = object()
    for i, w in enumerate(word_ids):
        key = ("special",) if w is None and merge_specials else w
        if (by_value or merge_specials) and key is not None and key in seen:
            groups[seen[key]].append(i)
        elif w is None or w != last:
            groups.append([i])
            if key is not None:
                seen[key] = len(groups) - 1
        else:
            groups[-1].append(i)
        last = w if w is not None else object()
    if by_value or merge_specials:
        groups.sort(key=min)
    return groups


def _pieces(word_ids, **how) -> np.ndarray:
    groups = word_groups(word_ids, **how)
    P = np.zeros((len(groups), len(word_ids)))
    for a, g in enumerate(groups):
        P[a, g] = 1.0
    return P


def reference_word_map(C, word_ids: Sequence[int | None], *, receive: str = "mean",
                       give: str = "sum", **how) -> np.ndarray:
    """The (m, m) word map of an (n, n) token map: rows averaged over a word's pieces (what it
    receives), columns summed (what it gives). ``receive`` / ``give`` ("mean" or "sum") and
    ``how`` (:func:`word_groups`) give the likely mistakes."""
    C = np.asarray(C, dtype=float)
    P = _pieces(word_ids, **how)
    mean = P / P.sum(1, keepdims=True)
    left = mean if receive == "mean" else P
    right = mean if give == "mean" else P
    return left @ C @ right.T


def _word_ids(rng: np.random.Generator, sentences: int) -> list[int | None]:
    """[CLS] words [SEP] (words [SEP]): 4-6 words per sentence of 1-3 pieces each, word ids
    restarting at 0 in the second sentence (as a fast tokenizer numbers them). With at least
    4 words a sentence, each grouping mistake gives its own number of words (tested)."""
    ids: list[int | None] = [None]
    for _ in range(sentences):
        for w in range(int(rng.integers(4, 7))):
            ids += [w] * int(rng.choice([1, 1, 2, 3]))
        ids.append(None)
    if all(ids.count(w) == 1 for w in set(ids) - {None}):   # at least one split word
        ids.insert(2, ids[1])
    return ids


def _cases(seed: int) -> list[tuple[str, np.ndarray, list]]:
    """An attention-like map with a sink on [SEP] (one sentence) and an ALTI-like map with a
    heavy diagonal (a sentence pair, whose word ids restart after the middle [SEP])."""
    rng = np.random.default_rng(seed + 151)
    out = []
    ids = _word_ids(rng, 1)
    n = len(ids)
    raw = rng.random((n, n)) ** 2
    raw[:, -1] += 1.5
    out.append(("attention-like map, one sentence", raw / raw.sum(1, keepdims=True), ids))
    ids = _word_ids(rng, 2)
    n = len(ids)
    raw = rng.random((n, n)) ** 3 + 2.0 * np.eye(n)
    out.append(("ALTI-like map, a sentence pair", raw / raw.sum(1, keepdims=True), ids))
    return out


def check_word_map(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(C, word_ids) -> (m, m)``: the word map of an (n, n) token map whose rows
    sum to 1 (``word_ids`` as a fast tokenizer gives them: ``None`` for a special token).
    Checks the shape, the row sums and the entries, and names the usual slips: received
    summed instead of averaged, given averaged instead of summed, the two roles swapped,
    special tokens dropped or merged, words merged by id across the two sentences."""
    res = CheckResult("check_word_map")
    for label, C, ids in _cases(seed):
        res.begin(label)
        want = reference_word_map(C, ids)
        got = _call(res, student_fn, C.copy(), list(ids))
        if got is None:
            break
        m = want.shape[0]
        if got.shape != want.shape:
            _check_shape(res, got, want.shape, f"[{label}] (one row and column per word)")
            shapes = {
                "the special tokens were dropped: each token with word id None ([CLS], [SEP]) "
                "is a word of its own (the explorer keeps them).":
                    sum(1 for g in word_groups(ids) if ids[g[0]] is not None),
                "every piece stayed a token of its own: the pieces of a word (a run of equal "
                "word ids) must be joined.": len(ids),
                "the special tokens were merged into one word: each token with word id None "
                "is a word of its own.": _pieces(ids, merge_specials=True).shape[0],
                "words were merged by their id across sentences: word ids restart at 0 after "
                "[SEP], so a word is a RUN of equal ids.": _pieces(ids, by_value=True).shape[0],
            }
            for cause, k in shapes.items():
                if got.ndim == 2 and got.shape == (k, k) and k != m and \
                        list(shapes.values()).count(k) == 1:
                    res.info(f"likely cause: {cause}")
                    break
            break
        res.ok(f"shape {got.shape} [{label}] (one row and column per word)")
        sums = got.sum(1)
        if np.allclose(sums, 1.0, atol=1e-8):
            res.ok(f"{label}: every row of the word map sums to 1")
        else:
            res.fail(f"{label}: the rows of the word map do not all sum to 1 (they range from "
                     f"{sums.min():.3g} to {sums.max():.3g}); averaging a word's rows and "
                     f"summing its columns keeps them at 1.")
        if _close(got, want, atol=ATOL, rtol=1e-8):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, W[{ix[0]}, {ix[1]}]", ATOL)
        causes = {
            "what a word receives was summed over its pieces instead of averaged (a word of k "
            "pieces then receives k).": reference_word_map(C, ids, receive="sum"),
            "what a word gives was averaged over its pieces instead of summed (the rows then "
            "lose the mass of split words).": reference_word_map(C, ids, give="mean"),
            "the roles are swapped: average the ROWS of a word's pieces (what it receives) "
            "and sum its COLUMNS (what it gives).":
                reference_word_map(C, ids, receive="sum", give="mean"),
            "what a word gives was averaged, and the rows normalised afterwards: sum the "
            "columns instead.": (lambda w: w / w.sum(1, keepdims=True))(
                reference_word_map(C, ids, give="mean")),
        }
        _diagnose(res, got, {c: w for c, w in causes.items() if not _close(w, want, ATOL)},
                  ATOL, want=want)
    return res.finish(verbose)
