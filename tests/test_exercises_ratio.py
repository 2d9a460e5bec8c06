"""Exercise 4.3's checker (cmix_course.ratio_exercises.check_mixing_ratio): it passes the
context-mixing ratio, reports a stub as not attempted, names each usual mistake, checks the
bound r_i <= s_i on the reader's result, and its reference equals the library's ratio
(cmixlib.methods.norms.mixing_ratio) on every layer of tiny random encoders."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmix_course as ex
from cmix_course import ratio_exercises as R


def good_ratio(T):
    n = T.shape[0]
    own = T[torch.arange(n), torch.arange(n)]                 # T_i(x_i), (n, d)
    mix = torch.linalg.vector_norm(T.sum(1) - own, dim=-1)
    keep = torch.linalg.vector_norm(own, dim=-1)
    return mix / (mix + keep)


def loop_ratio(T):
    out = []
    for i in range(T.shape[0]):
        ctx = sum(T[i, j] for j in range(T.shape[0]) if j != i)
        a, b = float(ctx.norm()), float(T[i, i].norm())
        out.append(a / (a + b))
    return out


def _lengths(T):
    n = T.shape[0]
    L = T.norm(dim=-1)
    off = L.sum(1) - L[torch.arange(n), torch.arange(n)]
    return off / L.sum(1)


def _with_diag(T):
    n = T.shape[0]
    whole = T.sum(1).norm(dim=-1)
    keep = T[torch.arange(n), torch.arange(n)].norm(dim=-1)
    return whole / (whole + keep)


def _whole_denominator(T):
    n = T.shape[0]
    own = T[torch.arange(n), torch.arange(n)]
    return (T.sum(1) - own).norm(dim=-1) / T.sum(1).norm(dim=-1)


WRONG = [
    (_lengths, "the lengths were added"),
    (_with_diag, "the diagonal was kept in the context sum"),
    (lambda T: good_ratio(T.transpose(0, 1)), "read transposed"),
    (lambda T: 1 - good_ratio(T), "this is 1 - r_i"),
    (_whole_denominator, "the denominator is the norm of the whole sum"),
]


@pytest.mark.parametrize("seed", [0, 7])
def test_the_checker_passes_the_ratio(seed):
    for fn in (good_ratio, loop_ratio, lambda T: good_ratio(T.float())):
        res = ex.check_mixing_ratio(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 2 and all(res.cases.values())


def test_a_stub_is_not_attempted():
    def stub(T):
        raise NotImplementedError

    assert ex.check_mixing_ratio(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", WRONG, ids=[p for _, p in WRONG])
def test_the_checker_names_the_mistake(wrong, phrase):
    res = ex.check_mixing_ratio(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert len(causes) == 2 and all(phrase in m for m in causes), res.report()


@pytest.mark.parametrize("seed", [0, 7])
def test_every_mistake_is_far_beyond_the_tolerance(seed):
    """The tolerance admits float32 arithmetic; every named mistake moves some r_i by more
    than 1e-4 in every case (so none passes, and none is mistaken for another)."""
    for _, T in R._cases(seed):
        want = R.reference_mixing_ratio(T)
        wrongs = list(R.wrong_answers(T).values())
        for w in wrongs:
            assert np.abs(w - want).max() > 1e-4
        for a in range(len(wrongs)):
            for b in range(a + 1, len(wrongs)):
                assert np.abs(wrongs[a] - wrongs[b]).max() > 1e-4


def test_the_bound_line_fails_outside_the_bound():
    res = ex.check_mixing_ratio(lambda T: 1 - good_ratio(T), verbose=False)
    assert any("outside [0, s_i]" in m for m in res.messages), res.report()
    res = ex.check_mixing_ratio(_lengths, verbose=False)
    assert not any("outside [0, s_i]" in m for m in res.messages), res.report()


@pytest.mark.parametrize("arch", ["bert", "distilbert"])
def test_the_reference_is_the_librarys_ratio(arch):
    from cmixlib.methods import norms
    from tests.test_exercises import _states_and_ln2_inputs

    states, _, _ = _states_and_ln2_inputs(arch)
    for st in states:
        for kind in ("attn_norm_res", "attn_norm_res_ln"):
            vec = getattr(st, norms.MIXING_RATIO_VECTORS[kind])
            np.testing.assert_allclose(R.reference_mixing_ratio(vec),
                                       norms.mixing_ratio(st, kind).detach().numpy(),
                                       rtol=1e-10, atol=1e-12)
            assert (R.reference_mixing_ratio(vec) <= R.length_share(vec) + 1e-12).all()


@pytest.mark.parametrize("wrong, points", [
    (lambda T: 1 - good_ratio(T), 3.0), (_with_diag, 2.0),
    (lambda T: good_ratio(T.transpose(0, 1)), 2.0), (_whole_denominator, 2.0),
    (_lengths, 1.0), (good_ratio, 4.0)])
def test_the_rubric_gives_the_notes_partial_credit(wrong, points):
    """The grading cell's rubric, run on the checker's own records (no kernel)."""
    from tests.test_grading_partial import _grade

    assert _grade("4.3", wrong).points == points
