"""Exercise 6.3's checker (cmix_course.spread_exercises.check_row_spread): it passes the mean
and largest total-variation distance between rows and the common floor, reports a stub as not
attempted, names each usual mistake per number, checks spread <= delta <= 1 - floor on the
reader's numbers; its spread is cmixlib.row_spread's, and the contraction that the chapter's
solution measures (delta of a product <= product of the deltas <= prod (1 - floor)) holds."""
from __future__ import annotations

import numpy as np
import pytest

import cmix_course as ex
from cmix_course import spread_exercises as S


def good_spread(C):
    C = np.asarray(C, dtype=float)
    tv = 0.5 * np.abs(C[:, None, :] - C[None, :, :]).sum(-1)
    return {"spread": tv.mean(), "delta": tv.max(), "floor": C.min(0).sum()}


def tuple_spread(C):
    C = np.asarray(C, dtype=float)
    n = len(C)
    d = [[1 - np.minimum(C[i], C[k]).sum() for k in range(n)] for i in range(n)]
    return float(np.mean(d)), float(np.max(d)), float(sum(min(C[:, j]) for j in range(n)))


def _variant(**kw):
    def fn(C):
        C = np.asarray(C, dtype=float)
        M = C.T if kw.get("cols") else C
        diff = np.abs(M[:, None, :] - M[None, :, :])
        tv = np.sqrt((diff ** 2).sum(-1)) if kw.get("l2") else diff.sum(-1)
        tv = tv if kw.get("no_half") else 0.5 * tv
        n = len(C)
        spread = tv.sum() / (n * (n - 1)) if kw.get("off") else tv.mean()
        floor = C.min(1).sum() if kw.get("axis") else C.min(0).sum()
        return {"spread": spread, "delta": tv.max(), "floor": floor}
    return fn


WRONG = [
    (_variant(no_half=True), ["spread", "delta"], "the 1/2 is missing"),
    (_variant(off=True), ["spread"], "the pairs i = k were left out"),
    (_variant(cols=True), ["spread", "delta"], "the columns were compared"),
    (_variant(l2=True, no_half=True), ["spread", "delta"], "the L2 distance was used"),
    (_variant(axis=True), ["floor"], "the minimum was taken over the wrong axis"),
    (lambda C: {**good_spread(C), "floor": 1 - good_spread(C)["floor"]}, ["floor"],
     "this is 1 - floor"),
    (lambda C: {**good_spread(C), "spread": good_spread(C)["delta"]}, ["spread"],
     "this is the largest distance"),
]


@pytest.mark.parametrize("seed", [0, 7])
def test_the_checker_passes_the_three_numbers(seed):
    for fn in (good_spread, tuple_spread):
        res = ex.check_row_spread(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 4 and all(res.cases.values())


def test_a_stub_is_not_attempted():
    def stub(C):
        raise NotImplementedError

    assert ex.check_row_spread(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, keys, phrase", WRONG, ids=[p for _, _, p in WRONG])
def test_the_checker_names_the_mistake(wrong, keys, phrase):
    res = ex.check_row_spread(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert [m.split(",")[0].strip(" ·") for m in causes] == keys, res.report()
    assert all(phrase in m for m in causes), res.report()


@pytest.mark.parametrize("seed", [0, 7])
def test_every_mistake_is_far_beyond_the_tolerance(seed):
    """Each named mistake moves its number by more than 1e-2 in at least one case."""
    cases = S._cases(seed)
    per_case = [(S.reference_row_spread(C), S.mistakes(C)) for _, C in cases]
    for key in S.KEYS:
        for c in range(len(per_case[0][1][key])):
            assert max(abs(found[key][c][1] - want[key]) for want, found in per_case) > 1e-2


def test_the_inequality_line_fails_when_broken():
    res = ex.check_row_spread(_variant(no_half=True), verbose=False)
    assert any("break spread <= delta <= 1 - floor" in m for m in res.messages), res.report()


def test_a_dict_without_a_key_is_reported():
    res = ex.check_row_spread(lambda C: {"spread": 0.0}, verbose=False)
    assert not res and res.status == "failed"
    assert any("no key(s)" in m for m in res.messages), res.report()


@pytest.mark.parametrize("seed", range(5))
def test_the_reference_is_row_spread_and_the_contraction_holds(seed):
    """spread is cmixlib.row_spread; delta(AB) <= delta(A) delta(B) and delta <= 1 - floor
    on random row-stochastic maps, and the rollout's delta is at most prod (1 - floor)."""
    import cmixlib

    rng = np.random.default_rng(seed)
    maps = rng.random((4, 6, 6)) ** 3
    maps[:, :, 0] += rng.random((4, 6))
    maps /= maps.sum(-1, keepdims=True)
    roll = cmixlib.rollout(maps, add_identity=False)
    bound = 1.0
    for l, C in enumerate(maps):
        ref = S.reference_row_spread(C)
        assert ref["spread"] == pytest.approx(cmixlib.row_spread(C), rel=1e-12)
        assert ref["spread"] <= ref["delta"] <= 1 - ref["floor"] + 1e-12
        bound *= 1 - ref["floor"]
        assert S.reference_row_spread(roll[l])["delta"] <= bound + 1e-12
    A, B = maps[0], maps[1]
    dA, dB = (S.reference_row_spread(M)["delta"] for M in (A, B))
    assert S.reference_row_spread(A @ B)["delta"] <= dA * dB + 1e-12


@pytest.mark.parametrize("wrong, points", [
    (_variant(off=True), 4.0), (_variant(no_half=True), 3.0), (_variant(axis=True), 3.0),
    (_variant(cols=True), 2.0), (_variant(l2=True, no_half=True), 2.0),
    (good_spread, 5.0)])
def test_the_rubric_gives_the_notes_partial_credit(wrong, points):
    """The grading cell's rubric, run on the checker's own records (no kernel)."""
    from tests.test_grading_partial import _grade

    assert _grade("6.3", wrong).points == points
