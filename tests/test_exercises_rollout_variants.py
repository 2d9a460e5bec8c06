"""Exercises 11.3 and 13.3's checkers (cmix_course.rollout_variant_exercises): each passes
honest answers, reports a stub as not attempted and names every usual mistake; the 11.3
reference equals the library's attention rollout (which adds ½I) on the same maps, and the
13.3 reference equals the product of the raw maps D C~."""
from __future__ import annotations

import numpy as np
import pytest

import cmix_course as ex
from cmix_course import rollout_variant_exercises as V


def good_identity(maps, i):
    maps = np.asarray(maps, dtype=float)
    n = maps.shape[-1]
    R, out = np.eye(n), []
    for C in maps:
        R = (0.5 * C + 0.5 * np.eye(n)) @ R
        out.append(R[i].copy())
    return np.stack(out)


def loop_identity(maps, i):
    """The row only, carried through plain loops: e_i^T R^l = sum_k (½C^l + ½I)_ik R^(l-1)_k,
    so keep the whole product R."""
    L, n = len(maps), len(maps[0])
    R = [[1.0 if a == b else 0.0 for b in range(n)] for a in range(n)]
    rows = []
    for layer in range(L):
        A = [[0.5 * float(maps[layer][a][b]) + (0.5 if a == b else 0.0) for b in range(n)]
             for a in range(n)]
        R = [[sum(A[a][k] * R[k][b] for k in range(n)) for b in range(n)] for a in range(n)]
        rows.append(list(R[i]))
    return rows


def good_raw(norm_maps, row_sums):
    C = np.asarray(row_sums)[:, :, None] * np.asarray(norm_maps)
    P, out = np.eye(C.shape[-1]), []
    for layer in C:
        P = layer @ P
        out.append(P[0])
    return np.stack(out)


def vector_raw(norm_maps, row_sums):
    """e_0^T D^l C~^l D^(l-1) ... : carry the row vector, never the matrix."""
    v, out = None, []
    Ct, d = np.asarray(norm_maps), np.asarray(row_sums)
    for layer in range(len(Ct)):
        # the row of the product up to layer l is d^l_0 C~^l_0 D^(l-1) C~^(l-1) ...: build it
        # from the top, so recompute from scratch per layer
        v = d[layer, 0] * Ct[layer, 0]
        for below in range(layer - 1, -1, -1):
            v = (v * d[below]) @ Ct[below]
        out.append(v)
    return out


IDENTITY_WRONG = [
    (lambda m, i: V.reference_identity_rollout_row(m, i, identity=False),
     "the identity was not added"),
    (lambda m, i: V.reference_identity_rollout_row(m, i, half=False), "C + I without the halves"),
    (lambda m, i: V.reference_identity_rollout_row(m, i, first_left=True), "wrong order"),
    (lambda m, i: V.reference_identity_rollout_row(m, i, once=True), "added once, to the product"),
    (lambda m, i: np.stack([r[:, i] for r in _products(m)]), "column"),
    (lambda m, i: np.concatenate([np.eye(m.shape[-1])[i][None], good_identity(m, i)[:-1]]),
     "off by one layer"),
]

RAW_WRONG = [
    (lambda c, d: V.reference_raw_cls_row(c, d, scale="none"), "the row sums were not used"),
    (lambda c, d: V.reference_raw_cls_row(c, d, scale="columns"), "scaled the columns"),
    (lambda c, d: V.reference_raw_cls_row(c, d, scale="divide"), "divided by their sums"),
    (lambda c, d: V.reference_raw_cls_row(c, d, first_left=True), "wrong order"),
    (lambda c, d: V.reference_raw_cls_row(c, d, column=True), "column 0"),
    (lambda c, d: good_raw(c, d) / good_raw(c, d).sum(-1, keepdims=True),
     "the rows were normalised"),
]


def _products(maps):
    n = maps.shape[-1]
    R, out = np.eye(n), []
    for C in maps:
        R = (0.5 * C + 0.5 * np.eye(n)) @ R
        out.append(R)
    return out


@pytest.mark.parametrize("seed", [0, 7])
def test_the_identity_checker_passes_honest_answers(seed):
    for fn in (good_identity, loop_identity):
        res = ex.check_identity_rollout(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 2 and all(res.cases.values())


@pytest.mark.parametrize("seed", [0, 7])
def test_the_raw_checker_passes_honest_answers(seed):
    for fn in (good_raw, vector_raw):
        res = ex.check_raw_cls_row(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 2 and all(res.cases.values())


def test_stubs_are_not_attempted():
    def stub(*args):
        raise NotImplementedError

    assert ex.check_identity_rollout(stub, verbose=False).status == "not attempted"
    assert ex.check_raw_cls_row(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", IDENTITY_WRONG, ids=[p for _, p in IDENTITY_WRONG])
def test_the_identity_checker_names_the_mistake(wrong, phrase):
    res = ex.check_identity_rollout(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert len(causes) == 2 and all(phrase in m for m in causes), res.report()


@pytest.mark.parametrize("wrong, phrase", RAW_WRONG, ids=[p for _, p in RAW_WRONG])
def test_the_raw_checker_names_the_mistake(wrong, phrase):
    res = ex.check_raw_cls_row(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert len(causes) == 2 and all(phrase in m for m in causes), res.report()


def test_the_bound_and_the_row_sums_are_reported():
    res = ex.check_identity_rollout(lambda m, i: V.reference_identity_rollout_row(
        m, i, identity=False), verbose=False)
    assert any("falls below 2^-l" in m for m in res.messages), res.report()
    res = ex.check_identity_rollout(lambda m, i: V.reference_identity_rollout_row(
        m, i, half=False), verbose=False)
    assert any("not 1" in m for m in res.messages), res.report()
    res = ex.check_raw_cls_row(lambda c, d: V.reference_raw_cls_row(c, d, scale="none"),
                               verbose=False)
    assert any("layer 1's row should be" in m for m in res.messages), res.report()


def test_the_identity_reference_is_the_librarys_attention_rollout():
    """cmixlib's rollout with add_identity (attention rollout's ½A + ½I) gives the same rows."""
    from cmixlib.methods.aggregation import rollout

    rng = np.random.default_rng(3)
    maps = V._stochastic(rng, 4, 6)
    lib = np.asarray(rollout(maps, add_identity=True), dtype=float)
    for i in range(6):
        np.testing.assert_allclose(V.reference_identity_rollout_row(maps, i), lib[:, i],
                                   rtol=1e-10, atol=1e-12)


def test_the_raw_reference_is_the_product_of_the_raw_maps():
    rng = np.random.default_rng(5)
    C = rng.uniform(0.1, 2.0, (3, 5, 5))
    d = C.sum(-1)
    got = V.reference_raw_cls_row(C / d[:, :, None], d)
    np.testing.assert_allclose(got[-1], (C[2] @ C[1] @ C[0])[0], rtol=1e-12)
    # the top layer's sums only scale the row: ranks equal to the normalised rollout at layer 1
    norm = V.reference_raw_cls_row(C / d[:, :, None], d, scale="none")
    np.testing.assert_allclose(got[0] / got[0].sum(), norm[0], rtol=1e-12)
