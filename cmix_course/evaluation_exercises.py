"""Exercises on the evaluation metrics: the cue alignment of one attribution row (9) and the
online (prequential) MDL codelength of a probe (10).

No model is needed: the inputs are small random arrays, made so that the usual slips (no
normalisation, ties, natural logarithms, a forgotten first block) give different numbers.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Callable

import numpy as np

from .checking import CheckResult, _call, _close, _report_diff, as_values

#: The three cue-alignment scores, in the order the reader's function returns them.
ALIGNMENT_KEYS = ("dot", "ap", "probes_needed")
#: The two outputs of the online code, in the order the reader's function returns them.
CODE_KEYS = ("codelength", "compression")


def _values_call(res: CheckResult, fn: Callable, keys: Sequence[str], *args) -> np.ndarray | None:
    got = _call(res, lambda *a: as_values(fn(*a), keys), *args)
    if got is None:
        return None
    got = got.reshape(-1)
    if got.size != len(keys):
        res.fail(f"expected {len(keys)} numbers {tuple(keys)}, got {got.size}.")
        return None
    return got


# ------------------------------------------------------------------------------------------
# 9. cue alignment of one row: dot product, average precision, probes needed
# ------------------------------------------------------------------------------------------

def reference_cue_alignment(scores, cue_indices) -> dict[str, float]:
    r"""Dot product, average precision and probes needed of one row against its cue, by the
    definitions of chapter 9 (written out, independently of :mod:`cmixlib.metrics.evaluation`).

    :math:`s` = the row with negatives clipped to 0, divided by its sum (uniform if the sum is
    0); :math:`\xi` the 0/1 cue vector. ``dot`` = :math:`s\cdot\xi`; ``ap`` =
    :math:`\sum_k (\mathrm{Rec}_k - \mathrm{Rec}_{k-1})\,\mathrm{Prec}_k` over the distinct
    values of :math:`s` from the highest down (tied scores form one threshold; NaN with no cue
    or only cues); ``probes_needed`` = :math:`\#\{j : s_j > \max_{k:\xi_k=1} s_k\}` (NaN with
    no cue).
    """
    s = np.clip(np.asarray(scores, dtype=float).ravel(), 0.0, None)
    n = s.size
    s = s / s.sum() if s.sum() > 0 else np.full(n, 1.0 / n)
    xi = np.zeros(n)
    xi[list(cue_indices)] = 1.0
    dot = float(s @ xi)
    if xi.sum() == 0:
        return {"dot": dot, "ap": float("nan"), "probes_needed": float("nan")}
    if xi.sum() == n:
        ap = float("nan")
    else:
        ap, recall_before = 0.0, 0.0
        for threshold in sorted(set(s.tolist()), reverse=True):
            chosen = s >= threshold                     # every token at or above the threshold
            true_pos = xi[chosen].sum()
            precision, recall = true_pos / chosen.sum(), true_pos / xi.sum()
            ap += (recall - recall_before) * precision
            recall_before = recall
    probes = float(np.sum(s > s[xi == 1].max()))
    return {"dot": dot, "ap": float(ap), "probes_needed": probes}


def _alignment_cases(seed: int) -> list[tuple[str, np.ndarray, list[int]]]:
    """Rows the checker scores: positive, unnormalised with a two-token cue, signed with ties
    after clipping, and a cue tied with a non-cue token at the top."""
    rng = np.random.default_rng(seed)
    positive = 0.05 + 0.3 * rng.random(9)
    positive[[0, 8, 3]] = [0.9, 0.7, 0.5]           # two sinks above the cue: 2 probes
    scaled = 0.5 + 2.5 * rng.random(10)
    scaled[[4, 3]] = [5.0, 1.0]                      # the cue's sub-tokens: first and lower
    signed = np.array([0.9, 0.4, -0.3, 0.6, -0.5, -0.2, -0.8, 0.1])
    signed[signed > 0] += 0.01 * rng.random(int((signed > 0).sum()))
    # cue 1 third best; cue 5 negative: clipped to 0 and tied with tokens 2, 4 and 6
    tied = np.round(0.2 + 0.6 * rng.random(7), 2)
    tied[[3, 5]] = 1.25                              # a non-cue token ties with the cue
    return [("a positive row, one cue token", positive, [3]),
            ("an unnormalised row, a cue of two sub-tokens", scaled, [3, 4]),
            ("signed scores (clip the negatives: tied zeros)", signed, [1, 5]),
            ("a non-cue token tied with the best cue", tied, [3])]


def _ap_without_ties(s: np.ndarray, xi: np.ndarray, order: np.ndarray) -> float:
    hits = xi[order]
    return float(np.mean([hits[: k + 1].mean() for k in np.flatnonzero(hits)]))


def _alignment_mistakes(scores: np.ndarray, cue: list[int]) -> dict[str, list[tuple[str, float]]]:
    """Per metric, the values that the usual mistakes give, as (cause, value) pairs, the more
    specific causes first (a cause is named only when it explains every checked row)."""
    raw = np.asarray(scores, dtype=float)
    s = np.clip(raw, 0.0, None)
    s = s / s.sum()
    xi = np.zeros(raw.size)
    xi[cue] = 1.0
    best = s[xi == 1].max()
    ties = ("tied scores must form ONE threshold: all tokens with the same score enter "
            "precision and recall together (scikit-learn's definition); the by-hand cell of "
            "the chapter assumed there were no ties.")
    orders = (np.argsort(-s), np.argsort(-s, kind="stable"),
              np.lexsort((-xi, -s)), np.lexsort((xi, -s)))     # cue first / last in a tie
    unclipped = ("the negatives were not clipped: rank the CLIPPED row, where every negative "
                 "score becomes 0 and the zeros are tied (one threshold).")
    return {
        "dot": [
            ("the row was not normalised: clip the negatives, then divide by the sum.",
             float(raw @ xi)),
            ("the negatives were not clipped before normalising (clip to 0 first, then divide "
             "by the sum of what is left).", float(raw @ xi / raw.sum())),
            ("the row was divided by the sum of |scores|; clip the negatives to 0 instead.",
             float(np.clip(raw, 0, None) @ xi / np.abs(raw).sum())),
            ("the cue mass was averaged over the cue tokens; the dot product sums it.",
             float(s @ xi / xi.sum())),
        ],
        "ap": [
            (unclipped, reference_cue_alignment(raw - raw.min(), cue)["ap"]),
            (unclipped, _ap_without_ties(raw, xi, np.argsort(-raw, kind="stable"))),
            *[(ties, _ap_without_ties(s, xi, order)) for order in orders],
        ],
        "probes_needed": [
            ("you counted the tokens with s_j >= the best cue score: that counts the best cue "
             "itself (and any token tied with it); count s_j > max cue score.",
             float(np.sum(s >= best))),
            ("count only the tokens STRICTLY above the best cue score (a token tied with the "
             "cue is not counted).", float(np.sum((s >= best) & (xi == 0)))),
            ("you returned the 1-based rank of the best cue; probes needed counts the tokens "
             "ranked above it (0 when a cue is first).", float(np.sum(s > best) + 1)),
            ("the worst-ranked cue token was used; use the BEST-ranked one (max over the cue).",
             float(np.sum(s > s[xi == 1].min()))),
            ("the scores were not clipped: a negative cue score still ranks above more negative "
             "tokens; clip to 0 first.", float(np.sum(raw > raw[xi == 1].max()))),
        ],
    }


def _consistent_causes(rows: list[tuple[np.ndarray, list[int], np.ndarray]], k: int,
                       key: str) -> str | None:
    """The first cause of metric ``key`` whose value equals the reader's in EVERY row checked
    (``rows``: scores, cue, the reader's three numbers). Causes are lists of (cause, value);
    the same cause may appear several times (variants), one of which must fit all rows."""
    per_row = [_alignment_mistakes(scores, cue)[key] for scores, cue, _ in rows]
    for c, (cause, _) in enumerate(per_row[0]):
        if all(np.isclose(got[k], mistakes[c][1], atol=1e-9, rtol=1e-4)
               for (_, _, got), mistakes in zip(rows, per_row)):
            return cause
    return None


def check_cue_alignment(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(scores, cue_indices) -> (dot, ap, probes_needed)``: chapter 9's three scores.

    ``scores`` (n,) is one raw row of a map (it may have negative entries, as signed gradient
    aggregations do, and need not sum to 1), ``cue_indices`` a list of the cue's positions.
    Clip negatives, normalise, and return the dot product with the cue vector, the average
    precision (tied scores form one threshold) and the probes needed (tokens strictly above
    the best-ranked cue), as three numbers or a dict with the keys ``dot``, ``ap``,
    ``probes_needed``. Four rows are checked: positive, unnormalised with a two-token cue,
    signed with ties after clipping, and a cue tied with a non-cue token. A likely cause is
    named for a metric only when that mistake explains the reader's numbers on every row.
    """
    res = CheckResult("check_cue_alignment")
    rows: list[tuple[np.ndarray, list[int], np.ndarray]] = []
    wrong_keys: set[int] = set()
    for label, scores, cue in _alignment_cases(seed):
        want_d = reference_cue_alignment(scores, cue)
        want = np.array([want_d[k] for k in ALIGNMENT_KEYS])
        got = _values_call(res, student_fn, ALIGNMENT_KEYS, scores.copy(), list(cue))
        if got is None:
            break
        rows.append((scores, list(cue), got))
        if _close(got, want, atol=1e-9):
            res.ok(f"{label}: all three scores match")
            continue
        _report_diff(res, got, want, lambda ix: f"{label}: {ALIGNMENT_KEYS[ix[0]]}", 1e-9)
        wrong_keys |= {k for k in range(len(ALIGNMENT_KEYS))
                       if not np.isclose(got[k], want[k], atol=1e-9, rtol=1e-4)}
    for k in sorted(wrong_keys):
        cause = _consistent_causes(rows, k, ALIGNMENT_KEYS[k])
        if cause:
            res.info(f"{ALIGNMENT_KEYS[k]}, likely cause: {cause}")
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 10. the online (prequential) MDL codelength and the compression
# ------------------------------------------------------------------------------------------

def reference_online_codelength(probs, labels, bounds) -> tuple[float, float]:
    r"""Online codelength (bits) and compression from the probes' predictions, by the formula
    of chapter 10 (independently of :func:`cmixlib.metrics.probing.mdl_probe`).

    ``probs`` (N, K): row k is :math:`P_{\theta_b}(\cdot \mid o_{(k)})`, the prediction of the
    probe trained on the blocks before example k's block (the rows of the first block are
    unused); ``labels`` (N,) in ``[0, K)``; ``bounds`` the cumulative block ends
    :math:`N_1 < \dots < N_B = N`.
    :math:`\mathrm{MDL} = N_1 \log_2 K - \sum_{k > N_1} \log_2 P(\nu_k \mid o_{(k)})`,
    compression :math:`= N \log_2 K / \mathrm{MDL}`.
    """
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels, dtype=int).ravel()
    n, k = probs.shape
    first = int(bounds[0])
    if int(bounds[-1]) != n:
        raise ValueError(f"the last block must end at N = {n}, not {bounds[-1]}")
    mdl = first * math.log2(k)
    for example in range(first, n):
        mdl -= math.log2(probs[example, labels[example]])
    return mdl, n * math.log2(k) / mdl


def _code_cases(seed: int) -> list[tuple[str, np.ndarray, np.ndarray, list[int]]]:
    """(label, probs, labels, bounds): K = 2 with the Value Zeroing block schedule, K = 3 with
    a coarser one. Later probes are sharper (trained on more data); first-block rows are NaN."""
    from cmixlib.metrics.probing import VZ_BLOCKS, block_boundaries

    rng = np.random.default_rng(seed)
    out = []
    for label, n, k, bounds in (("K = 2, N = 250", 250, 2, block_boundaries(250, VZ_BLOCKS)),
                                ("K = 3, N = 60", 60, 3, [6, 12, 24, 60])):
        y = rng.integers(0, k, size=n)
        logits = rng.normal(size=(n, k))
        for b in range(1, len(bounds)):
            rows = slice(bounds[b - 1], bounds[b])
            logits[rows, :] += 0.6 * b * np.eye(k)[y[rows]]     # better probes, later blocks
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[: bounds[0]] = np.nan                                  # no probe for the first block
        out.append((label, p, y, list(bounds)))
    return out


def _code_mistakes(probs: np.ndarray, y: np.ndarray, bounds: list[int],
                   got_mdl: float) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(cause, value) pairs of the usual mistakes: for the codelength, for the compression."""
    n, k = probs.shape
    first = bounds[0]
    later_bits = float(-np.log2(probs[np.arange(first, n), y[first:]]).sum())
    first_bits = first * math.log2(k)
    mdl, uniform = first_bits + later_bits, n * math.log2(k)
    block_means = [float(-np.log2(probs[np.arange(a, b), y[a:b]]).mean())
                   for a, b in zip(bounds[:-1], bounds[1:])]
    nats = "natural logarithms (nats): the code is in bits, log2 (or divide nats by ln 2)."
    codelength = [
        (nats, first_bits + later_bits * math.log(2)),
        (nats, mdl * math.log(2)),
        ("the first block is missing: its N_1 labels are sent with the uniform code, "
         "N_1 log2 K bits.", later_bits),
        ("the first block was charged 1 bit per label; the uniform code costs log2 K bits "
         "per label (K = probs.shape[1]).", first + later_bits),
        ("you used the probability of the probe's most likely class; the code pays for the "
         "TRUE label, -log2 P(label).",
         first_bits - float(np.log2(probs[first:].max(1)).sum())),
        ("each block's cost was averaged over its examples; the codelength sums them.",
         first_bits + sum(block_means)),
    ]
    inverted = ("compression is inverted: it is the uniform codelength over the MDL (above 1 "
                "when the probe helps).")
    compression = [
        (inverted, mdl / uniform),
        ("the uniform codelength covers all N labels (N log2 K), not only those after the "
         "first block.", (n - first) * math.log2(k) / mdl),
        ("the uniform codelength is N log2 K bits, not N (1 bit per label only when K = 2).",
         n / mdl),
    ]
    if got_mdl and np.isfinite(got_mdl):
        compression += [(inverted, got_mdl / uniform),
                        ("your compression follows from your codelength (N log2 K / MDL): "
                         "fix the codelength first.", uniform / got_mdl)]
    return codelength, compression


def check_online_codelength(student_fn: Callable, *, seed: int = 0,
                            verbose: bool = True) -> CheckResult:
    r"""``student_fn(probs, labels, bounds) -> (codelength, compression)``: chapter 10's code.

    ``probs`` (N, K): row k is the predicted distribution of the probe trained on all blocks
    before example k's block (rows of the first block are NaN: no probe exists yet);
    ``labels`` (N,) integers in ``[0, K)``; ``bounds`` the cumulative block ends
    ``[N_1, ..., N_B = N]``. Return the online codelength in bits,
    :math:`N_1 \log_2 K - \sum_{k > N_1} \log_2 P(\nu_k)`, and the compression
    :math:`N \log_2 K / \mathrm{MDL}` (two numbers, or a dict with the keys ``codelength`` and
    ``compression``). Checked with K = 2 and K = 3.
    """
    res = CheckResult("check_online_codelength")
    diagnosed: set[int] = set()
    for label, probs, y, bounds in _code_cases(seed):
        want = np.array(reference_online_codelength(probs, y, bounds))
        got = _values_call(res, student_fn, CODE_KEYS, probs.copy(), y.copy(), list(bounds))
        if got is None:
            break
        if np.isnan(got).any():
            res.fail(f"{label}: NaN in your result. The rows of the first block are NaN (no "
                     f"probe has been trained before it): send its N_1 = {bounds[0]} labels "
                     f"with the uniform code, N_1 log2 K bits, and use the probes only from "
                     f"example N_1 on.")
            continue
        if _close(got, want, atol=1e-6):
            res.ok(f"{label}: codelength and compression match")
            continue
        _report_diff(res, got, want,
                     lambda ix: f"{label}: {('codelength (bits)', 'compression')[ix[0]]}", 1e-6)
        for k, candidates in enumerate(_code_mistakes(probs, y, bounds, float(got[0]))):
            if k in diagnosed or np.isclose(got[k], want[k], atol=1e-6, rtol=1e-4):
                continue
            for cause, value in candidates:
                if np.isclose(got[k], value, atol=1e-6, rtol=1e-4):
                    res.info(f"{CODE_KEYS[k]}, likely cause: {cause}")
                    diagnosed.add(k)
                    break
    return res.finish(verbose)
