r"""Exercises on what chance scores: the cue alignment of a uniformly random row (9.3) and the
online code of a "probe" that learns only the label frequencies (10.3).

**9.3.** A row of :math:`n` i.i.d. uniform scores (the method *Random* of chapter 9) with
:math:`c` cue tokens, :math:`1 \le c < n`, every token kept (``exclude="none"``). No ties occur
(probability 0), so the order of the tokens is a uniform random permutation, and

.. math::

   \mathbb{E}[s\cdot\xi] = \frac{c}{n}, \qquad
   \mathbb{E}[\mathrm{AP}] = \frac{c-1}{n-1} + \frac{(n-c)\,H_n}{n\,(n-1)}, \qquad
   \mathbb{E}[\text{probes needed}] = \frac{n-c}{c+1},

with :math:`H_n = \sum_{r=1}^{n} 1/r`. For :math:`c = 1`: :math:`1/n`, :math:`H_n/n` and
:math:`(n-1)/2`. (AP: :math:`\mathrm{AP} = \frac1c \sum_{\text{cue } j} \mathrm{Prec}@r_j`;
a cue token sits at rank :math:`r` with probability :math:`1/n`, and each of the other
:math:`c-1` cue tokens is among the :math:`r-1` tokens above it with probability
:math:`(r-1)/(n-1)`.)

**10.3.** The online code of chapter 10 with, in place of a probe, the add-one (Laplace) rule:
the labels of block :math:`b` (examples :math:`N_b+1, \dots, N_{b+1}`) are sent with
:math:`P(\nu = k) = (n_k + 1)/(N_b + K)`, :math:`n_k` the count of class :math:`k` among the
first :math:`N_b` labels. With no counts the rule is the uniform code, so the first block costs
:math:`N_1 \log_2 K` bits, as in the book's convention
(:mod:`cmixlib.metrics.probing`); compression :math:`= N \log_2 K / \mathrm{MDL}`.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .checking import CheckResult, _report_diff
from .evaluation_exercises import ALIGNMENT_KEYS, CODE_KEYS, _values_call

#: Exact formulas: the reader's numbers must match them to rounding.
ATOL = 1e-9
#: Random rows of the Monte-Carlo line the checker prints next to the formula.
MC_ROWS = 20_000


# ------------------------------------------------------------------------------------------
# 9.3 the chance levels of the three cue-alignment scores
# ------------------------------------------------------------------------------------------

def harmonic(n: int) -> float:
    """:math:`H_n = 1 + 1/2 + \\dots + 1/n`."""
    return float(sum(1.0 / r for r in range(1, n + 1)))


def reference_random_baselines(n: int, c: int = 1) -> dict[str, float]:
    """Expected dot product, average precision and probes needed of a uniformly random row of
    ``n`` tokens with ``c`` cue tokens (``1 <= c < n``), every token kept."""
    n, c = int(n), int(c)
    if not 1 <= c < n:
        raise ValueError(f"need 1 <= c < n, got n={n}, c={c}")
    return {"dot": c / n,
            "ap": (c - 1) / (n - 1) + (n - c) * harmonic(n) / (n * (n - 1)),
            "probes_needed": (n - c) / (c + 1)}


def monte_carlo_baselines(n: int, c: int, rows: int = MC_ROWS,
                          seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The three scores averaged over ``rows`` uniform random rows (cue: the first ``c``
    tokens), and the standard errors of the means. Vectorised; no ties occur."""
    u = np.random.default_rng(seed).uniform(size=(rows, n))
    dot = u[:, :c].sum(1) / u.sum(1)
    order = np.argsort(-u, axis=1)
    hits = (order < c).astype(float)                     # cue token at rank r (0-based)
    precision = np.cumsum(hits, 1) / np.arange(1, n + 1)
    ap = (precision * hits).sum(1) / c
    probes = (u[:, c:] > u[:, :c].max(1, keepdims=True)).sum(1).astype(float)
    values = np.stack([dot, ap, probes], 1)
    return values.mean(0), values.std(0, ddof=1) / math.sqrt(rows)


def _cases_93(seed: int) -> list[tuple[str, int, int]]:
    """(label, n, c): one cue token, and cues of 2 and 3 sub-tokens; n drawn from the seed."""
    rng = np.random.default_rng(seed + 93)
    n1, n2, n3 = int(rng.integers(8, 14)), int(rng.integers(10, 16)), int(rng.integers(5, 8))
    return [(f"one cue token (n = {n1})", n1, 1),
            (f"several cue tokens: c = 2 (n = {n2})", n2, 2),
            (f"several cue tokens: c = 3 (n = {n3})", n3, 3)]


def _baseline_mistakes(n: int, c: int) -> dict[str, list[tuple[str, float]]]:
    """Per metric, (cause, value) of the usual mistakes, the more specific first."""
    H = harmonic(n)
    one_cue = ("the formula for ONE cue token was used: with c cue tokens (a cue split into "
               "sub-tokens) ")
    return {
        "dot": [
            (one_cue + "the cue's expected share is c/n, not 1/n.", 1 / n),
            ("n - 1 tokens: the chapter keeps every token in the row ([CLS], [SEP] and the "
             "[MASK] itself, exclude='none'), so the share is c/n.", c / (n - 1)),
        ],
        "ap": [
            ("H_n instead of H_n / n: E[1/r] over r = 1..n divides the harmonic sum by n.",
             (c - 1) / (n - 1) + (n - c) * H / (n - 1)),
            ("H_n instead of H_n / n: E[1/r] over r = 1..n divides the harmonic sum by n.", H),
            (one_cue + "AP averages the precision at EVERY cue token, and the other c - 1 "
             "cue tokens above a cue token raise its precision.", H / n),
            ("the harmonic sum stops one short: the ranks run from 1 to n, "
             "H_n = 1 + 1/2 + ... + 1/n.",
             (c - 1) / (n - 1) + (n - c) * harmonic(n - 1) / (n * (n - 1))),
            ("c/n is the expected precision at a random cut, not the mean of the precisions "
             "at the cue tokens (the average precision).", c / n),
        ],
        "probes_needed": [
            ("off by one: (n + 1)/(c + 1) is the expected 1-based RANK of the best cue token; "
             "probes needed counts the tokens above it, (n - c)/(c + 1).",
             (n + 1) / (c + 1)),
            (one_cue + "a non-cue token is above the best of them with probability "
             "1/(c + 1): (n - c)/(c + 1).", (n - 1) / 2),
            ("a non-cue token counts only if it is above ALL c cue tokens: probability "
             "1/(c + 1), not 1/2.", (n - c) / 2),
            ("the c cue tokens are never above the best cue: only the n - c other tokens can "
             "be counted, (n - c)/(c + 1), not n/(c + 1).", n / (c + 1)),
        ],
    }


def check_random_baselines(student_fn: Callable, *, seed: int = 0,
                           verbose: bool = True) -> CheckResult:
    r"""``student_fn(n, c) -> (dot, ap, probes_needed)``: the expected scores of a uniformly
    random row of ``n`` tokens with ``c`` cue tokens (chapter 9, every token kept), as three
    numbers or a dict with the keys ``dot``, ``ap``, ``probes_needed``.

    Three cases: one cue token, and cues of 2 and 3 sub-tokens (``n`` drawn from the seed).
    Prints a Monte-Carlo estimate next to the formula for the first case, and names, per
    metric, the mistake that explains the reader's numbers in every case: the one-cue
    formula, :math:`H_n` for :math:`H_n/n`, a harmonic sum one short, the precision at a cut,
    the 1-based rank for probes needed, :math:`(n-c)/2`, :math:`n/(c+1)`, :math:`n - 1`
    tokens."""
    res = CheckResult("check_random_baselines")
    rows: list[tuple[int, int, np.ndarray]] = []
    wrong: set[int] = set()
    for k, (label, n, c) in enumerate(_cases_93(seed)):
        res.begin(label)
        want_d = reference_random_baselines(n, c)
        want = np.array([want_d[key] for key in ALIGNMENT_KEYS])
        got = _values_call(res, student_fn, ALIGNMENT_KEYS, n, c)
        if got is None:
            break
        if k == 0:
            mc, se = monte_carlo_baselines(n, c, seed=seed)
            res.info(f"{label}: Monte Carlo over {MC_ROWS:,} random rows: "
                     + ", ".join(f"{key} {m:.4f} ± {2 * s:.4f}"
                                 for key, m, s in zip(ALIGNMENT_KEYS, mc, se))
                     + " (± 2 standard errors); the exact values are what is checked.")
        rows.append((n, c, got))
        if np.allclose(got, want, atol=ATOL, rtol=1e-9):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}: {ALIGNMENT_KEYS[ix[0]]}", ATOL)
        wrong |= {m for m in range(3) if not np.isclose(got[m], want[m], atol=ATOL, rtol=1e-9)}
    if wrong and len(rows) == 3 and all(
            np.allclose(got, np.array([reference_random_baselines(n, c)[key]
                                       for key in ALIGNMENT_KEYS]), rtol=0.05, atol=0.01)
            for n, c, got in rows):
        res.info("your numbers are close to the exact ones but not equal: a simulation only "
                 "estimates the expectation; derive the closed form and return it.")
    for m in sorted(wrong):
        per_case = [_baseline_mistakes(n, c)[ALIGNMENT_KEYS[m]] for n, c, _ in rows]
        for j, (cause, _) in enumerate(per_case[0]):
            if all(np.isclose(got[m], mistakes[j][1], atol=ATOL, rtol=1e-9)
                   for (_, _, got), mistakes in zip(rows, per_case)):
                res.info(f"{ALIGNMENT_KEYS[m]}, likely cause: {cause}")
                break
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 10.3 the online code of the label frequencies (add-one rule)
# ------------------------------------------------------------------------------------------

def _prior_bits(labels: np.ndarray, bounds: list[int], k: int, *, counted=None,
                add: float = 1.0, sequential: bool = False, uniform_first: bool = True) -> float:
    """Bits of the online code whose block ``b`` is sent with ``(n_c + add)/(N_b + K add)``;
    ``counted(b) -> (lo, hi)`` picks the labels that are counted (default: all earlier ones);
    ``sequential`` updates the counts after every label (within the blocks too)."""
    y = np.asarray(labels, dtype=int)
    edges = [0, *[int(b) for b in bounds]]
    bits = edges[1] * math.log2(k) if uniform_first else 0.0
    for b in range(1, len(edges) - 1):
        start, end = edges[b], edges[b + 1]
        if sequential:
            for i in range(start, end):
                n_c = np.bincount(y[:i], minlength=k)[y[i]]
                bits -= math.log2((n_c + add) / (i + k * add))
            continue
        lo, hi = counted(b, edges) if counted else (0, start)
        counts = np.bincount(y[lo:hi], minlength=k).astype(float)
        sent = np.bincount(y[start:end], minlength=k)
        with np.errstate(divide="ignore"):
            log_p = np.log2((counts + add) / (hi - lo + k * add))
        bits -= float(np.sum(sent[sent > 0] * log_p[sent > 0]))   # a class not sent costs 0
    return bits


def reference_prior_code(labels, bounds, n_classes: int) -> tuple[float, float]:
    r"""Online codelength (bits) and compression of the add-one rule: block :math:`b` sent with
    :math:`P(k) = (n_k + 1)/(N_b + K)` from the first :math:`N_b` labels; the first block with
    the uniform code (the same rule with no counts)."""
    y = np.asarray(labels, dtype=int).ravel()
    k, n = int(n_classes), y.size
    if int(bounds[-1]) != n:
        raise ValueError(f"the last block must end at N = {n}, not {bounds[-1]}")
    bits = _prior_bits(y, list(bounds), k)
    return bits, n * math.log2(k) / bits


def _prior_cases(seed: int) -> list[tuple[str, np.ndarray, list[int], int]]:
    """(label, labels, bounds, K): an unbalanced K = 2 set with the book's schedule, and a K = 3
    set whose third class first appears after the first blocks (unsmoothed counts give it
    probability 0)."""
    from cmixlib.metrics.probing import block_boundaries

    rng = np.random.default_rng(seed + 103)
    two = (rng.random(400) < 0.7).astype(int)
    three = rng.choice(3, size=60, p=[0.5, 0.3, 0.2])
    bounds3 = [5, 10, 20, 40, 60]
    three[:10] = rng.choice(2, size=10)           # class 2 is first seen in the third block
    three[10 + int(rng.integers(0, 5))] = 2
    return [("K = 2, unbalanced labels, N = 400", two, block_boundaries(400), 2),
            ("K = 3, a class first seen late, N = 60", three, bounds3, 3)]


def _prior_mistakes(y: np.ndarray, bounds: list[int], k: int,
                    got_bits: float) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    n = y.size
    ref = _prior_bits(y, bounds, k)
    first = bounds[0] * math.log2(k)
    nats = "natural logarithms (nats): the code is in bits, log2 (or divide nats by ln 2)."
    codelength = [
        (nats, ref * math.log(2)),
        (nats, first + (ref - first) * math.log(2)),
        ("the first block is missing: its N_1 labels are sent with the uniform code, "
         "N_1 log2 K bits (the add-one rule with no counts).", ref - first),
        ("the first block was charged 1 bit per label; the uniform code costs log2 K bits "
         "per label.", ref - first + bounds[0]),
        ("unsmoothed frequencies n_k / N_b: a class not seen yet gets probability 0 and an "
         "infinite cost; add one to every count, (n_k + 1)/(N_b + K).",
         _prior_bits(y, bounds, k, add=0.0)),
        ("the labels of the block being sent were counted: the receiver does not have them "
         "yet; count only the first N_b labels.",
         _prior_bits(y, bounds, k, counted=lambda b, e: (0, e[b + 1]))),
        ("only the previous block was counted: the code of block b learns from ALL the "
         "first N_b labels, as the probe is trained on all earlier blocks.",
         _prior_bits(y, bounds, k, counted=lambda b, e: (e[b - 1], e[b]))),
        ("the counts were updated after every label: the book's online code keeps one "
         "predictor per block, fitted on the blocks before it.",
         _prior_bits(y, bounds, k, sequential=True)),
        ("add-one per class means (n_k + 1)/(N_b + K); (n_k + 1/2)/(N_b + K/2) is the "
         "Krichevsky-Trofimov rule, a different code.", _prior_bits(y, bounds, k, add=0.5)),
    ]
    uniform = n * math.log2(k)
    inverted = ("compression is inverted: it is the uniform codelength over the MDL (above 1 "
                "when the code helps).")
    compression = [(inverted, ref / uniform),
                   ("the uniform codelength is N log2 K bits, not N (1 bit per label only when "
                    "K = 2).", n / ref)]
    if got_bits and np.isfinite(got_bits):
        compression += [(inverted, got_bits / uniform),
                        ("your compression follows from your codelength (N log2 K / MDL): fix "
                         "the codelength first.", uniform / got_bits)]
    return codelength, compression


def check_prior_code(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(labels, bounds, n_classes) -> (codelength, compression)``: the online code
    of chapter 10 with the add-one rule in place of a probe (block :math:`b` sent with
    :math:`(n_k + 1)/(N_b + K)` from the first :math:`N_b` labels, the first block uniform),
    in bits, and :math:`N \log_2 K / \mathrm{MDL}`; two numbers or a dict with the keys
    ``codelength`` and ``compression``.

    Two cases: K = 2 with unbalanced labels and the book's block schedule, K = 3 with a class
    first seen after the first blocks. Names nats, a missing or 1-bit first block, unsmoothed
    frequencies, counting the block being sent, counting only the previous block, updating
    after every label, the add-1/2 rule, and an inverted or mis-scaled compression."""
    res = CheckResult("check_prior_code")
    diagnosed: set[int] = set()
    for label, y, bounds, k in _prior_cases(seed):
        res.begin(label)
        want = np.array(reference_prior_code(y, bounds, k))
        got = _values_call(res, student_fn, CODE_KEYS, y.copy(), list(bounds), k)
        if got is None:
            break
        if np.allclose(got, want, atol=1e-6, rtol=1e-9):
            res.matched(label)
            continue
        if not np.isfinite(got).all():
            res.fail(f"{label}: your result is not finite ({got[0]}, {got[1]}).")
        else:
            _report_diff(res, got, want, lambda ix: f"{label}: "
                         f"{('codelength (bits)', 'compression')[ix[0]]}", 1e-6)
        for m, candidates in enumerate(_prior_mistakes(y, bounds, k, float(got[0]))):
            if m in diagnosed or np.isclose(got[m], want[m], atol=1e-6, rtol=1e-9):
                continue
            for cause, value in candidates:
                if np.isclose(got[m], value, atol=1e-6, rtol=1e-9) or (
                        np.isinf(value) and np.isinf(got[m])):
                    res.info(f"{CODE_KEYS[m]}, likely cause: {cause}")
                    diagnosed.add(m)
                    break
    return res.finish(verbose)
