"""The checkers of chapters 9 (cue alignment) and 10 (online codelength) accept the solution,
diagnose typical wrong answers, report the stub as not attempted, and their references agree
with the library (cmixlib.metrics.evaluation, cmixlib.metrics.probing)."""
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score

import cmix_course as ex
from cmixlib.metrics import probing
from cmixlib.metrics.evaluation import cue_alignment
from tolerances import rounding_atol


def stub(*args):
    raise NotImplementedError


def diagnosed(res, phrase):
    return (not res) and res.status == "failed" and any(phrase in m for m in res.messages)


# ----- chapter 9: cue alignment ----------------------------------------------------------
def good_alignment(scores, cue_indices):
    s = np.clip(np.asarray(scores, dtype=float), 0, None)
    s = s / s.sum()
    xi = np.zeros(len(s))
    xi[cue_indices] = 1
    return s @ xi, average_precision_score(xi, s), float((s > s[xi == 1].max()).sum())


def test_alignment_checker_passes_the_solution():
    res = ex.check_cue_alignment(good_alignment, verbose=False)
    assert res and res.status == "passed"
    as_dict = lambda s, c: dict(zip(("dot", "ap", "probes_needed"), good_alignment(s, c)))
    assert ex.check_cue_alignment(as_dict, verbose=False)


def test_alignment_checker_stub_is_not_attempted(capsys):
    res = ex.check_cue_alignment(stub)
    assert res.status == "not attempted" and "NotImplementedError" in res.messages[0]
    assert "not attempted yet" in capsys.readouterr().out
    assert ex.check_cue_alignment(lambda s, c: None, verbose=False).status == "not attempted"


def test_alignment_checker_diagnoses_unnormalised_dot():
    def unnormalised(scores, cue):
        d, ap, probes = good_alignment(scores, cue)
        return float(np.asarray(scores)[cue].sum()), ap, probes

    res = ex.check_cue_alignment(unnormalised, verbose=False)
    assert diagnosed(res, "dot, likely cause: the row was not normalised")
    assert any("dot" in m and "yours" in m for m in res.messages)


def test_alignment_checker_diagnoses_unclipped_negatives():
    def unclipped(scores, cue):
        s = np.asarray(scores, dtype=float)
        _, ap, probes = good_alignment(scores, cue)
        return s[cue].sum() / s.sum(), ap, probes

    res = ex.check_cue_alignment(unclipped, verbose=False)
    assert diagnosed(res, "negatives were not clipped")
    # only the signed row has negatives: the other rows pass
    assert sum("all three scores match" in m for m in res.messages) == 3


def test_alignment_checker_diagnoses_ties_in_average_precision():
    def no_ties(scores, cue):
        d, _, probes = good_alignment(scores, cue)
        s = np.clip(np.asarray(scores, dtype=float), 0, None)
        xi = np.zeros(len(s))
        xi[cue] = 1
        hits = xi[np.argsort(-s)]                       # the chapter's by-hand version
        return d, np.mean([hits[: k + 1].mean() for k in np.flatnonzero(hits)]), probes

    res = ex.check_cue_alignment(no_ties, verbose=False)
    assert diagnosed(res, "ap, likely cause: tied scores must form ONE threshold")


@pytest.mark.parametrize("wrong, phrase", [
    (lambda s, c, best: float((s >= best).sum() - 1), "STRICTLY above"),
    (lambda s, c, best: float((s > best).sum() + 1), "1-based rank"),
    (lambda s, c, best: float((s > s[c].min()).sum()), "BEST-ranked"),
])
def test_alignment_checker_diagnoses_probes_needed(wrong, phrase):
    def answer(scores, cue):
        d, ap, _ = good_alignment(scores, cue)
        s = np.clip(np.asarray(scores, dtype=float), 0, None)
        return d, ap, wrong(s, cue, s[cue].max())

    res = ex.check_cue_alignment(answer, verbose=False)
    assert diagnosed(res, "probes_needed, likely cause:") and diagnosed(res, phrase)


def test_alignment_checker_reports_wrong_length():
    res = ex.check_cue_alignment(lambda s, c: good_alignment(s, c)[:2], verbose=False)
    assert diagnosed(res, "expected 3 numbers")
    res = ex.check_cue_alignment(lambda s, c: {"dot": 0.0}, verbose=False)
    assert diagnosed(res, "no key(s)")


def test_alignment_reference_equals_library():
    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(3, 15))
        scores = rng.normal(size=n) if trial % 2 else rng.random(n)
        if trial % 3 == 0:
            scores = np.round(scores, 1)                # ties
        cue = sorted(rng.choice(n, size=int(rng.integers(1, n)), replace=False).tolist())
        want = cue_alignment(scores, cue)
        got = ex.reference_cue_alignment(scores, cue)
        for key in want:
            assert got[key] == pytest.approx(want[key], abs=1e-12, nan_ok=True), (trial, key)
        s = np.clip(scores, 0, None)
        if s.sum() > 0:
            xi = np.isin(np.arange(n), cue).astype(int)
            assert got["ap"] == pytest.approx(average_precision_score(xi, s / s.sum()))
    assert math.isnan(ex.reference_cue_alignment([0.2, 0.8], [])["ap"])
    assert math.isnan(ex.reference_cue_alignment([0.2, 0.8], [0, 1])["ap"])


# ----- chapter 10: the online codelength -------------------------------------------------
def good_code(probs, labels, bounds):
    n, k = probs.shape
    first = bounds[0]
    p_true = probs[np.arange(first, n), labels[first:]]
    mdl = first * np.log2(k) - np.log2(p_true).sum()
    return mdl, n * np.log2(k) / mdl


def test_code_checker_passes_the_solution():
    assert ex.check_online_codelength(good_code, verbose=False).status == "passed"
    as_dict = lambda p, y, b: dict(zip(("codelength", "compression"), good_code(p, y, b)))
    assert ex.check_online_codelength(as_dict, verbose=False)


def test_code_checker_stub_is_not_attempted():
    res = ex.check_online_codelength(stub, verbose=False)
    assert res.status == "not attempted" and "NotImplementedError" in res.messages[0]


def test_code_checker_diagnoses_nats():
    def nats(probs, labels, bounds):
        n, k = probs.shape
        p_true = probs[np.arange(bounds[0], n), labels[bounds[0]:]]
        mdl = bounds[0] * np.log(k) - np.log(p_true).sum()
        return mdl, n * np.log(k) / mdl

    res = ex.check_online_codelength(nats, verbose=False)
    assert diagnosed(res, "codelength, likely cause: natural logarithms")
    # in nats throughout, the ratio is right: only the codelength is reported
    assert not any("compression, likely cause" in m for m in res.messages)


def test_code_checker_diagnoses_missing_first_block_and_nan():
    def no_first(probs, labels, bounds):
        n, k = probs.shape
        mdl = -np.nansum(np.log2(probs[np.arange(n), labels]))
        return mdl, n * np.log2(k) / mdl

    res = ex.check_online_codelength(no_first, verbose=False)
    assert diagnosed(res, "the first block is missing")
    assert diagnosed(res, "compression, likely cause: your compression follows from your")

    def with_nan(probs, labels, bounds):
        n, k = probs.shape
        mdl = -np.log2(probs[np.arange(n), labels]).sum()
        return mdl, n * np.log2(k) / mdl

    assert diagnosed(ex.check_online_codelength(with_nan, verbose=False), "NaN in your result")


def test_code_checker_diagnoses_wrong_label_and_inverted_compression():
    def top_class(probs, labels, bounds):
        n, k = probs.shape
        mdl = bounds[0] * np.log2(k) - np.log2(probs[bounds[0]:].max(1)).sum()
        return mdl, n * np.log2(k) / mdl

    assert diagnosed(ex.check_online_codelength(top_class, verbose=False), "TRUE label")

    def inverted(probs, labels, bounds):
        mdl, comp = good_code(probs, labels, bounds)
        return mdl, 1 / comp

    res = ex.check_online_codelength(inverted, verbose=False)
    assert diagnosed(res, "compression, likely cause: compression is inverted")

    def one_bit(probs, labels, bounds):
        n, k = probs.shape
        mdl, _ = good_code(probs, labels, bounds)
        return mdl, n / mdl

    res = ex.check_online_codelength(one_bit, verbose=False)
    assert diagnosed(res, "not N (1 bit per label")
    assert any("K = 2" in m and "match" in m for m in res.messages)   # K = 2 is right


def test_code_reference_equals_library(monkeypatch):
    """mdl_probe's bookkeeping (uniform first block, bits, sum, ratio) with fixed probes, whose
    per-example probabilities are known, equals the reference."""
    rng = np.random.default_rng(0)
    n, d, k = 120, 5, 3
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, k, size=n)

    def weights(n_train):
        g = torch.Generator().manual_seed(n_train)
        return torch.randn(d, k, generator=g), torch.randn(k, generator=g)

    class FixedProbe(torch.nn.Module):
        def __init__(self, n_train):
            super().__init__()
            self.w, self.b = weights(n_train)

        def forward(self, x):
            return x @ self.w + self.b

    monkeypatch.setattr(probing, "_train_probe", lambda X, y, k, **kw: (FixedProbe(len(X)), 0))
    result = probing.mdl_probe(X, y, num_classes=k, standardize=False, shuffle=False)
    bounds = probing.block_boundaries(n)
    probs = np.full((n, k), np.nan)
    scale_nats = 0.0       # sum over the coded examples of |max_c z_c - z_y| + ln k (bounds each one's nats)
    for start, end in zip(bounds[:-1], bounds[1:]):
        w, b = weights(start)
        logits = torch.from_numpy(X[start:end]) @ w + b
        probs[start:end] = torch.softmax(logits.double(), -1).numpy()
        z = logits.double()
        scale_nats += float((z.max(-1).values - z[torch.arange(end - start), torch.from_numpy(y[start:end])]).sum()
                            + (end - start) * math.log(k))
    mdl, compression = ex.reference_online_codelength(probs, y, bounds)
    # the same float32 logits on both sides (same op, same slices); mdl_probe's float32 cross-entropy
    # against the float64 reference. Rule 1, one float32 side: the sum over a block (max(diff(bounds)) = 60
    # terms) + log-sum-exp over k = 3 + 8 for exp and log (<= 1 ulp each) and the subtractions; scale in bits
    tol = rounding_atol(int(np.diff(bounds).max()) + k + 8, scale_nats / math.log(2), computations=1)
    assert mdl == pytest.approx(result.codelength, rel=0, abs=tol)
    # compression = N log2 k / MDL: relative error <= tol / (MDL - tol)
    assert compression == pytest.approx(result.compression, rel=tol / (mdl - tol), abs=0)
    assert result.blocks["cost_bits"].iloc[0] == pytest.approx(bounds[0] * math.log2(k))
