"""Exercise 15.3's checker (cmix_course.entropy_exercises.check_row_entropy): it passes the row
entropies, reports a stub as not attempted, names each usual mistake, and its reference gives
0 for a one-hot row, ln n for a uniform row and scipy's entropy elsewhere."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import xlogy
from scipy.stats import entropy

import cmix_course as ex
from cmix_course import entropy_exercises as E


def good_entropy(C):
    return -xlogy(C, C).sum(-1)


def eps_entropy(C):
    return -(C * np.log(C + 1e-12)).sum(1)


def loop_entropy(C):
    out = []
    for row in np.asarray(C):
        out.append(-sum(p * np.log(p) for p in row if p > 0))
    return out


WRONG = [
    (lambda C: good_entropy(C) / np.log(2), "base 2"),
    (lambda C: xlogy(C, C).sum(-1), "the sign is missing"),
    (lambda C: good_entropy(np.asarray(C).T), "COLUMNS"),
    (lambda C: good_entropy(C) / np.log(C.shape[0]), "divided by ln n"),
]


@pytest.mark.parametrize("seed", [0, 7, 123457])
def test_the_checker_passes_the_entropies(seed):
    for fn in (good_entropy, eps_entropy, loop_entropy):
        res = ex.check_row_entropy(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 2 and all(res.cases.values())


def test_a_stub_is_not_attempted():
    def stub(C):
        raise NotImplementedError

    assert ex.check_row_entropy(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", WRONG, ids=[p for _, p in WRONG])
def test_the_checker_names_the_mistake(wrong, phrase):
    res = ex.check_row_entropy(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert len(causes) == 2 and all(phrase in m for m in causes), res.report()


def test_nan_from_zero_weights_is_named():
    with np.errstate(divide="ignore", invalid="ignore"):
        res = ex.check_row_entropy(lambda C: -(C * np.log(C)).sum(-1), verbose=False)
    assert not res and any("0 ln 0 gave nan" in m for m in res.messages), res.report()


def test_one_number_for_the_map_is_named():
    res = ex.check_row_entropy(lambda C: good_entropy(C).mean(), verbose=False)
    assert not res and any("one number for the whole map" in m for m in res.messages)


def test_the_bounds_line_fails_outside_zero_to_ln_n():
    res = ex.check_row_entropy(lambda C: xlogy(C, C).sum(-1), verbose=False)
    assert any("outside" in m for m in res.messages), res.report()


def test_the_reference_at_its_extremes_and_against_scipy():
    for n in (2, 5, 9):
        assert np.allclose(E.reference_row_entropy(np.full((n, n), 1 / n)), np.log(n))
        assert np.allclose(E.reference_row_entropy(np.eye(n)), 0.0)
    for seed in (0, 7):
        for _, C in E._cases(seed):
            np.testing.assert_allclose(E.reference_row_entropy(C), entropy(C, axis=1),
                                       atol=1e-12)
            want = E.reference_row_entropy(C)
            for wrong, _ in WRONG:
                assert np.abs(np.asarray(wrong(C)) - want).max() > 1e-2
