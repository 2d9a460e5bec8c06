r"""Exercises on the evaluations of chapters 11 and 12: the faithfulness correlation of one
example with blank-out (11.1), the special-token rank of ALTI's Figure 6 (12.1) and the
anisotropy of transformed vectors, ALTI's Figure 3 (12.2). (Blank-out itself is exercised in
chapter 14, :func:`cmix_course.check_blank_out`.)

The references are written out the obvious way (loops over tokens and pairs, average ranks
counted by hand) and tested against the library functions the experiments call:
:func:`cmixlib.metrics.statistics.per_example_spearman`,
:func:`cmixlib.metrics.evaluation.special_token_rank` and :func:`cmixlib.metrics.anisotropy.mean_pairwise_cosine`.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch

from .checking import (CheckResult, _call, _check_shape, _close, _diagnose, _one_number,
                       _report_diff, _to_numpy)

#: The tokens of ALTI's Figure 6 in BERT's vocabulary (the exercise uses BERT tokens only).
FIG6_TOKENS = ("[CLS]", "[SEP]", ",", ".")


# ------------------------------------------------------------------------------------------
# 11.1 the faithfulness correlation of one example
# ------------------------------------------------------------------------------------------

def _ranks(x: np.ndarray, kind: str = "average") -> np.ndarray:
    """Ranks (1 = smallest), counted one value at a time; ``kind`` names the tie rule."""
    less = np.array([np.sum(x < v) for v in x], dtype=float)
    equal = np.array([np.sum(x == v) for v in x], dtype=float)
    if kind == "average":                 # ties share the mean of the positions they occupy
        return 1 + less + (equal - 1) / 2
    if kind == "min":
        return 1 + less
    if kind == "dense":
        return np.array([len(set(x[x < v])) + 1 for v in x], dtype=float)
    if kind == "ordinal":                 # ties broken by position (argsort of argsort)
        return np.argsort(np.argsort(x, kind="stable"), kind="stable") + 1.0
    raise ValueError(kind)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / math.sqrt((a * a).sum() * (b * b).sum()))


def _rho(x: np.ndarray, y: np.ndarray, ranks: str = "average", shortcut: bool = False) -> float:
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    if ranks == "raw":
        return _pearson(x, y)
    rx, ry = _ranks(x, ranks), _ranks(y, ranks)
    if shortcut:
        m = x.size
        return float(1 - 6 * np.sum((rx - ry) ** 2) / (m * (m * m - 1)))
    return _pearson(rx, ry)


def reference_faithfulness(s_method, s_bo, t: int, *, drop: Sequence[str] = ("cls", "sep", "t"),
                           ranks: str = "average", shortcut: bool = False) -> float:
    r"""Spearman's :math:`\rho` of one example over :math:`J_w`, the positions other than
    ``[CLS]`` (0), ``[SEP]`` (n-1) and the ``[MASK]`` ``t``: Pearson's r of the average ranks
    (tied scores share the mean of their ranks). NaN when a vector is constant over
    :math:`J_w`, has fewer than 2 entries or a non-finite value (as
    :func:`cmixlib.metrics.statistics.spearman`). ``drop``, ``ranks`` (``"raw"``: no ranks) and
    ``shortcut`` (:math:`1 - 6\sum d^2/(m(m^2-1))`) give the usual mistakes.
    """
    x, y = _to_numpy(s_method).ravel(), _to_numpy(s_bo).ravel()
    n = x.size
    out = {"cls": 0, "sep": n - 1, "t": int(t) % n}
    skip = {out[k] for k in drop}
    J = [j for j in range(n) if j not in skip]
    x, y = x[J], y[J]
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return float("nan")
    return _rho(x, y, ranks, shortcut)


def _faithfulness_cases(seed: int):
    rng = np.random.default_rng(seed + 13)
    # distinct scores; [CLS]/[SEP] take much of the rollout's mass, the [MASK]'s own blank-out
    # score is the largest
    n, t = 9, 5
    s_m = rng.uniform(0.02, 0.1, n)
    s_m[[0, n - 1]] = [0.35, 0.3]
    s_bo = rng.normal(0.0, 0.05, n)
    s_bo[[0, n - 1]] = [-0.08, -0.1]
    s_bo[t] = 0.4
    cases = [("example 1 (distinct scores)", s_m, s_bo, t)]
    # ties on both sides: a map with repeated values, blank-out exactly 0 for several tokens
    s_m = np.array([0.3, 0.05, 0.1, 0.02, 0.05, 0.1, 0.05, 0.2, 0.1, 0.02, 0.25])
    s_bo = np.array([0.02, 0.0, 0.0, 0.3, 0.07, 0.03, 0.0, 0.07, 0.1, -0.01, 0.05])
    cases.append(("example 2 (tied scores)", s_m, s_bo, 3))
    # the map is constant over J: no ranking, NaN
    s_m = np.array([0.3, 0.08, 0.08, 0.08, 0.08, 0.08, 0.08, 0.22])
    s_bo = rng.normal(0.0, 0.05, 8)
    cases.append(("example 3 (the map is constant over J)", s_m, s_bo, 2))
    return cases


def check_faithfulness(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(s_method, s_bo, t) -> float``: Spearman's :math:`\rho` of one example.

    ``s_method`` (n,) is a method's global scores for the ``[MASK]`` at position ``t``,
    ``s_bo`` (n,) the blank-out scores of every position. Correlate over :math:`J_w`, all
    positions except ``[CLS]`` (0), ``[SEP]`` (n-1) and ``t``, with average ranks for ties;
    return NaN when either vector is constant over :math:`J_w` (as the library).
    """
    res = CheckResult("check_faithfulness")
    for label, s_m, s_bo, t in _faithfulness_cases(seed):
        res.begin(label)
        want = reference_faithfulness(s_m, s_bo, t)
        got = _call(res, student_fn, s_m.copy(), s_bo.copy(), t)
        if got is None:
            break
        g = _one_number(res, got, label, "the correlation of this example")
        if g is None:
            break
        if math.isnan(want):
            if math.isnan(g):
                res.cases[label] = True
                res.ok(f"{label}: NaN, as the library (a constant vector has no ranking)")
                continue
            res.fail(f"{label}: yours {g:.5f}, expected NaN.")
            if g == 0:
                res.info("likely cause: 0 was returned for a constant vector; return "
                         "float('nan') as the library does, so that the mean over examples "
                         "skips it instead of being pulled towards 0.")
            else:
                _diagnose(res, np.array(g), {
                    "no position was dropped: leave out [CLS] (0), [SEP] (n-1) and the "
                    "[MASK] (t).": np.array(reference_faithfulness(s_m, s_bo, t, drop=())),
                    "[CLS] and [SEP] were kept; only the [MASK] was dropped (the chapter's "
                    "variant exclude='target', not the default).":
                        np.array(reference_faithfulness(s_m, s_bo, t, drop=("t",))),
                }, atol=1e-9)
            continue
        if math.isnan(g):
            res.fail(f"{label}: you returned NaN, expected {want:+.5f}: both vectors vary over "
                     f"J, so the correlation is defined.")
            continue
        if abs(g - want) <= 1e-9:
            res.matched(label, f" ({want:+.5f})")
            continue
        res.fail(f"{label}: yours {g:+.5f}, expected {want:+.5f}.")
        ref = lambda **kw: np.array(reference_faithfulness(s_m, s_bo, t, **kw))  # noqa: E731
        _diagnose(res, np.array(g), {
            "Pearson's r of the raw scores; Spearman's rho is Pearson's r of their RANKS.":
                ref(ranks="raw"),
            "no position was dropped: leave out [CLS] (0), [SEP] (n-1) and the [MASK] (t).":
                ref(drop=()),
            "[CLS] and [SEP] were kept; only the [MASK] was dropped (the chapter's variant "
            "exclude='target', not the default).": ref(drop=("t",)),
            "the [MASK] position t was kept: it is the position being predicted, not "
            "context; drop it too.": ref(drop=("cls", "sep")),
            "ties were broken by position (ordinal ranks, argsort of argsort); tied scores "
            "share their AVERAGE rank (scipy.stats.rankdata's default, what spearmanr uses).":
                ref(ranks="ordinal"),
            "tied scores all got the lowest rank of their group (method='min'); they share "
            "their AVERAGE rank.": ref(ranks="min"),
            "dense ranks were used; Spearman uses average ranks for ties.": ref(ranks="dense"),
            "the shortcut 1 - 6 sum(d^2) / (m (m^2 - 1)) is exact only without ties; with ties "
            "take Pearson's r of the average ranks.": ref(shortcut=True),
        }, atol=1e-9)
        # the next example still runs: a rubric gives points per case
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 12.1 the special-token rank of ALTI's Figure 6, one row
# ------------------------------------------------------------------------------------------

def reference_special_rank(scores, tokens: Sequence[str], *, ranks: str = "dense",
                           divide: str = "n", descending: bool = False,
                           special: Sequence[str] = FIG6_TOKENS) -> float:
    r"""Mean over the positions of ``[CLS]``, ``[SEP]``, ``,`` and ``.`` of
    :math:`\mathrm{rank}_j / n`, with :math:`\mathrm{rank}_j` the dense rank of token j's score
    (1 = the lowest score; tied scores share a rank, the next distinct score gets the next
    integer), as :func:`cmixlib.metrics.evaluation.special_token_rank` (ALTI's code). NaN without such
    a token. ``ranks``, ``divide`` (``"n"``, ``"distinct"``, ``"none"``, ``"minmax"``:
    :math:`(r - 1)/(n - 1)`), ``descending`` and ``special`` give the usual mistakes.
    """
    s = _to_numpy(scores).ravel()
    n = s.size
    r = _ranks(-s if descending else s, ranks)
    denom = {"n": n, "distinct": len(set(s.tolist())), "none": 1}
    norm = (r - 1) / (n - 1) if divide == "minmax" else r / denom[divide]
    vals = [norm[j] for j in range(n) if tokens[j] in special]
    return float(np.mean(vals)) if vals else float("nan")


def check_special_rank(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(scores, tokens) -> float``: ALTI's Figure 6 quantity for one row.

    ``scores`` (n,) is a method's final-layer ``[CLS]`` row, ``tokens`` the n token strings.
    Dense ranks (1 = lowest score, tied scores share a rank) divided by n, averaged over the
    positions whose token is ``[CLS]``, ``[SEP]``, ``,`` or ``.``.
    """
    res = CheckResult("check_special_rank")
    rng = np.random.default_rng(seed + 17)
    tok1 = ["[CLS]", "the", "film", ",", "however", ",", "is", "dull", ".", "[SEP]"]
    sc1 = np.array([0.30, 0.05, 0.12, 0.05, 0.08, 0.05, 0.02, 0.20, 0.12, 0.30])
    tok2 = ["[CLS]", "what", "a", "waste", "!", "it", "'", "s", "dull", ".", "[SEP]"]
    sc2 = rng.permutation(np.linspace(0.01, 0.2, len(tok2)))
    rows = [("row 1 (tied scores)", sc1, tok1), ("row 2 (distinct scores)", sc2, tok2)]
    for label, sc, tok in rows:
        res.begin(label)
        want = reference_special_rank(sc, tok)
        got = _call(res, student_fn, sc.copy(), list(tok))
        if got is None:
            break
        g = _one_number(res, got, label, "the mean normalised rank of the counted tokens")
        if g is None:
            break
        if abs(g - want) <= 1e-9:
            res.matched(label, f" ({want:.5f})")
            continue
        res.fail(f"{label}: yours {g:.5f}, expected {want:.5f}.")
        ref = lambda **kw: np.array(reference_special_rank(sc, tok, **kw))  # noqa: E731
        _diagnose(res, np.array(g), {
            "rank 1 went to the HIGHEST score; rank 1 is the lowest score, so the most relevant "
            "token gets the largest normalised rank.": ref(descending=True),
            "average ranks were used (scipy.stats.rankdata's default); ALTI's code uses dense "
            "ranks: tied scores share a rank and the next distinct score gets the next integer.":
                ref(ranks="average"),
            "tied scores got different ranks (ordinal); with dense ranks they share one.":
                ref(ranks="ordinal"),
            "tied scores got the lowest rank of their group (method='min'); dense ranks count "
            "distinct scores only.": ref(ranks="min"),
            "(rank - 1) / (n - 1) is the paper footnote's [0, 1] scale ('minmax'); the code, and "
            "the chapter, divide the dense rank by n.": ref(ranks="average", divide="minmax"),
            "the ranks were divided by the number of DISTINCT scores; divide by n, the number "
            "of tokens.": ref(divide="distinct"),
            "the ranks were not divided by n.": ref(divide="none"),
            "only [CLS] and [SEP] were counted; ',' and '.' count too.":
                ref(special=("[CLS]", "[SEP]")),
            "the mean was taken over every token; average only over [CLS], [SEP], ',' and '.'.":
                ref(special=tuple(tok)),
        }, atol=1e-9)
        # the next row still runs: a rubric gives points per case
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 12.2 anisotropy of each query's transformed vectors (ALTI's Figure 3, dashed line)
# ------------------------------------------------------------------------------------------

def reference_anisotropy(T) -> np.ndarray:
    r"""For each query i, the mean cosine over the :math:`n(n-1)` ordered pairs of distinct
    vectors :math:`T_i(x_j), T_i(x_k)`, :math:`j \ne k`, by a loop over the pairs:
    ``T`` (r, n, d) -> (r,). Equals :func:`cmixlib.metrics.anisotropy.mean_pairwise_cosine`."""
    T = _to_numpy(T)
    out = []
    for V in T:
        n = len(V)
        cos = [V[j] @ V[k] / (np.linalg.norm(V[j]) * np.linalg.norm(V[k]))
               for j in range(n) for k in range(n) if j != k]
        out.append(float(np.mean(cos)))
    return np.array(out)


def _anisotropy_input(seed: int) -> torch.Tensor:
    """(6, 6, 16): query i's vectors share a direction with strength growing with i, and their
    lengths differ a lot (so dot products and cosines rank differently)."""
    g = torch.Generator().manual_seed(seed + 19)
    r, n, d = 6, 6, 16
    common = torch.randn(r, 1, d, generator=g, dtype=torch.float64)
    strength = torch.linspace(0.0, 1.5, r, dtype=torch.float64)[:, None, None]
    scale = torch.linspace(0.3, 3.0, n, dtype=torch.float64)[None, :, None]
    noise = torch.randn(r, n, d, generator=g, dtype=torch.float64)
    return (noise + strength * common) * scale


def check_anisotropy(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(T) -> (r,)``: for each query i, :math:`\bar c_i`, the mean cosine of the
    ordered pairs of distinct vectors among :math:`T_i(x_1), \dots, T_i(x_n)`.

    ``T`` (r, n, d): row i holds query i's transformed vectors (as
    ``LayerState.ln1_vectors``). :math:`\bar c_i = (\lVert \sum_j u_{ij} \rVert^2 - n) /
    (n(n-1))` with :math:`u_{ij} = T_i(x_j) / \lVert T_i(x_j) \rVert`.
    """
    res = CheckResult("check_anisotropy")
    T = _anisotropy_input(seed)
    want = reference_anisotropy(T)
    got = _call(res, student_fn, T.clone())
    if got is not None and got.size == 1:
        res.fail(f"you returned one number; return one value per query i, shape {want.shape} "
                 f"(the dashed line's point for the layer is their mean).")
        if abs(float(got.ravel()[0]) - want.mean()) <= 1e-9:
            res.info("it equals the mean over the queries: only the last step is extra.")
        got = None
    if got is not None:
        got = got.reshape(-1) if got.size == want.size else got
    if got is not None and _check_shape(res, got, want.shape, "(one value per query i)"):
        if (np.abs(got) > 1 + 1e-9).any():
            res.fail("some values are outside [-1, 1]: a mean of cosines cannot be.")
        if _close(got, want, atol=1e-9, rtol=1e-7):
            res.ok("matches the reference (a loop over all ordered pairs)")
        else:
            _report_diff(res, got, want, lambda ix: f"query i={ix[0]}", 1e-9)
            t = T.numpy()
            n = t.shape[1]
            u = t / np.linalg.norm(t, axis=-1, keepdims=True)
            su = (u.sum(1) ** 2).sum(-1)
            s = t.sum(1)
            dots = ((s ** 2).sum(-1) - (t ** 2).sum((-1, -2))) / (n * (n - 1))
            cos_sum = np.mean([[u[i, j] @ (s[i] / np.linalg.norm(s[i])) for j in range(n)]
                               for i in range(len(t))], axis=1)
            _diagnose(res, got, {
                "the n self-pairs (cosine 1) were included: average over j != k only, "
                "(||sum u||^2 - n) / (n (n - 1)).": su / n ** 2,
                "the n self-pairs were not subtracted: ||sum u||^2 includes them; subtract n "
                "before dividing by n (n - 1).": su / (n * (n - 1)),
                "each unordered pair was counted twice but divided by n (n - 1) / 2: the sum "
                "over j != k has n (n - 1) terms.": 2 * want,
                "dot products were averaged, not cosines: divide each vector by its norm first.":
                    dots,
                "the cosines were taken across the queries i for a fixed source j (the wrong "
                "axis); ALTI compares the vectors T_i(x_j), j = 1..n, of ONE query i.":
                    reference_anisotropy(T.transpose(0, 1)),
                "this is the mean cosine of each vector with their sum; take the mean over the "
                "pairs of vectors.": cos_sum,
            }, atol=1e-9, want=want)
    return res.finish(verbose)
