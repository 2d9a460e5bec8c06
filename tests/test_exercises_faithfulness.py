"""Chapters 11 and 12's checkers (cmix_course.faithfulness_exercises): they pass the
solutions, name typical mistakes, report a stub as "not attempted", and their references equal
the library functions the experiments call."""
import numpy as np
import pytest
import torch
from scipy.stats import rankdata, spearmanr

from cmixlib.metrics import evaluation as ev
from cmixlib.metrics import statistics as st
import cmix_course as ex
from cmixlib.metrics.anisotropy import mean_pairwise_cosine


def stub(*args):
    raise NotImplementedError


def messages(res):
    return " ".join(res.messages)


# ----- 11.1 faithfulness of one example -----------------------------------------------------
def good_faithfulness(s_method, s_bo, t):
    n = len(s_method)
    J = [j for j in range(n) if j not in (0, n - 1, t)]
    x, y = np.asarray(s_method)[J], np.asarray(s_bo)[J]
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return spearmanr(x, y).statistic


def test_faithfulness_checker_passes_and_diagnoses():
    assert ex.check_faithfulness(good_faithfulness, verbose=False)
    res = ex.check_faithfulness(stub, verbose=False)
    assert res.status == "not attempted"

    def no_drop(s_method, s_bo, t):
        return spearmanr(s_method, s_bo).statistic

    res = ex.check_faithfulness(no_drop, verbose=False)
    assert res.status == "failed" and "no position was dropped" in messages(res)

    def pearson(s_method, s_bo, t):
        n = len(s_method)
        J = [j for j in range(n) if j not in (0, n - 1, t)]
        return np.corrcoef(s_method[J], s_bo[J])[0, 1]

    res = ex.check_faithfulness(pearson, verbose=False)
    assert not res and "RANKS" in messages(res)

    def ordinal(s_method, s_bo, t):
        n = len(s_method)
        J = [j for j in range(n) if j not in (0, n - 1, t)]
        rx = rankdata(s_method[J], method="ordinal")
        ry = rankdata(s_bo[J], method="ordinal")
        return np.corrcoef(rx, ry)[0, 1]

    res = ex.check_faithfulness(ordinal, verbose=False)
    assert not res and "ordinal ranks" in messages(res)
    assert "example 1 (distinct scores): matches" in messages(res)   # no ties there

    def shortcut(s_method, s_bo, t):
        n = len(s_method)
        J = [j for j in range(n) if j not in (0, n - 1, t)]
        d = rankdata(s_method[J]) - rankdata(s_bo[J])
        m = len(J)
        return 1 - 6 * np.sum(d ** 2) / (m * (m * m - 1))

    res = ex.check_faithfulness(shortcut, verbose=False)
    assert not res and "exact only without ties" in messages(res)

    def zero_if_constant(s_method, s_bo, t):
        rho = good_faithfulness(s_method, s_bo, t)
        return 0.0 if np.isnan(rho) else rho

    res = ex.check_faithfulness(zero_if_constant, verbose=False)
    assert not res and "float('nan')" in messages(res)

    def keep_special(s_method, s_bo, t):
        J = [j for j in range(len(s_method)) if j != t]
        return spearmanr(s_method[J], s_bo[J]).statistic

    res = ex.check_faithfulness(keep_special, verbose=False)
    assert not res and "exclude='target'" in messages(res)


def test_faithfulness_reference_equals_library():
    rng = np.random.default_rng(3)
    for n, t in [(9, 4), (12, 7), (6, 1)]:
        for _ in range(5):
            s_m = np.round(rng.random(n), 1)                # ties on purpose
            s_bo = np.round(rng.normal(size=n), 1)
            want = st.per_example_spearman([s_m], [s_bo], exclude=[0, n - 1, t])[0]
            got = ex.reference_faithfulness(s_m, s_bo, t)
            assert (np.isnan(want) and np.isnan(got)) or got == pytest.approx(want, abs=1e-12)
    s_m = np.array([0.5, 0.1, 0.1, 0.1, 0.1, 0.4])
    assert np.isnan(ex.reference_faithfulness(s_m, rng.random(6), 2))


# ----- 12.1 special-token rank ---------------------------------------------------------------
def good_special_rank(scores, tokens):
    ranks = rankdata(scores, method="dense") / len(scores)
    keep = [t in ("[CLS]", "[SEP]", ",", ".") for t in tokens]
    return ranks[keep].mean()


def test_special_rank_checker_passes_and_diagnoses():
    assert ex.check_special_rank(good_special_rank, verbose=False)
    assert ex.check_special_rank(stub, verbose=False).status == "not attempted"
    assert ex.check_special_rank(lambda s, t: None, verbose=False).status == "not attempted"

    def average(scores, tokens):
        ranks = rankdata(scores) / len(scores)
        return ranks[[t in ("[CLS]", "[SEP]", ",", ".") for t in tokens]].mean()

    res = ex.check_special_rank(average, verbose=False)
    assert res.status == "failed" and "dense" in messages(res) and "average ranks" in messages(res)

    def descending(scores, tokens):
        return good_special_rank(-np.asarray(scores), tokens)

    res = ex.check_special_rank(descending, verbose=False)
    assert not res and "HIGHEST" in messages(res)

    def cls_sep_only(scores, tokens):
        ranks = rankdata(scores, method="dense") / len(scores)
        return ranks[[t in ("[CLS]", "[SEP]") for t in tokens]].mean()

    res = ex.check_special_rank(cls_sep_only, verbose=False)
    assert not res and "',' and '.' count too" in messages(res)


def test_special_rank_reference_equals_library():
    rng = np.random.default_rng(5)
    vocab = ["[CLS]", "[SEP]", ",", ".", "a", "film", "!", "dull"]
    for _ in range(20):
        n = int(rng.integers(4, 14))
        tokens = list(rng.choice(vocab, n))
        scores = np.round(rng.random(n), 1)
        want = ev.special_token_rank(scores, tokens)
        got = ex.reference_special_rank(scores, tokens)
        assert (np.isnan(want) and np.isnan(got)) or got == pytest.approx(want, abs=1e-12)


# ----- 12.2 anisotropy -----------------------------------------------------------------------
def good_anisotropy(T):
    u = T / T.norm(dim=-1, keepdim=True)
    n = T.shape[-2]
    return ((u.sum(-2) ** 2).sum(-1) - n) / (n * (n - 1))


def test_anisotropy_checker_passes_and_diagnoses():
    assert ex.check_anisotropy(good_anisotropy, verbose=False)
    assert ex.check_anisotropy(stub, verbose=False).status == "not attempted"

    def with_self_pairs(T):
        u = T / T.norm(dim=-1, keepdim=True)
        return (u.sum(-2) ** 2).sum(-1) / T.shape[-2] ** 2

    res = ex.check_anisotropy(with_self_pairs, verbose=False)
    assert res.status == "failed" and "self-pairs (cosine 1) were included" in messages(res)

    def dots(T):
        n = T.shape[-2]
        s = T.sum(-2)
        return ((s ** 2).sum(-1) - (T ** 2).sum((-1, -2))) / (n * (n - 1))

    res = ex.check_anisotropy(dots, verbose=False)
    assert not res and "not cosines" in messages(res)

    res = ex.check_anisotropy(lambda T: good_anisotropy(T.transpose(0, 1)), verbose=False)
    assert not res and "wrong axis" in messages(res)

    res = ex.check_anisotropy(lambda T: good_anisotropy(T).mean(), verbose=False)
    assert not res and "one value per query" in messages(res)
    assert "mean over the queries" in messages(res)


def test_anisotropy_reference_equals_library():
    g = torch.Generator().manual_seed(2)
    for shape in [(3, 5, 8), (1, 2, 4), (4, 7, 3)]:
        T = torch.randn(*shape, generator=g, dtype=torch.float64) + 0.7
        np.testing.assert_allclose(ex.reference_anisotropy(T), mean_pairwise_cosine(T).numpy(),
                                   atol=1e-12)
