"""Exercises 16.2 and 16.3's checkers (cmix_course.decoder_exercises): each passes a right
answer (vectorised and looped), reports a stub as not attempted, names each usual mistake, and
its reference equals the library: the causal rollout is the decoder's ALTI rollout
(context_mixing's ``alti``), and the explanation from the target's and the foil's terms is
ALTI-Logit's explanation of lambda_t - lambda_f (explain_logit with the foil), on a tiny random
decoder."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmix_course as ex
from cmix_course import decoder_exercises as D


# --- 16.2: the causal rollout ------------------------------------------------------------------

def good_rollout(maps):
    m = np.asarray(maps, dtype=float)
    m = m / m.sum(-1, keepdims=True)
    out = [m[0]]
    for layer in m[1:]:
        out.append(layer @ out[-1])
    return np.stack(out)


def looped_rollout(maps):
    m = torch.as_tensor(np.asarray(maps), dtype=torch.float32)     # float32 is accepted
    L, n, _ = m.shape
    out, prev = torch.zeros(L, n, n), None
    for layer in range(L):
        c = m[layer] / m[layer].sum(-1, keepdim=True)
        prev = c if prev is None else c @ prev
        out[layer] = prev
    return out


def _softmax_rollout(maps):
    return good_rollout(np.exp(np.asarray(maps) - np.asarray(maps).max(-1, keepdims=True)))


WRONG_ROLLOUT = [
    (lambda m: ex.reference_rollout(m, add_identity=True), "the identity was added"),
    (lambda m: D._chain(D._rownorm(np.asarray(m)), left=False), "wrong order"),
    (lambda m: D._chain(np.asarray(m)), "not normalised before multiplying"),
    (lambda m: D._rownorm(D._chain(np.asarray(m))), "normalised after multiplying"),
    (lambda m: D._rownorm(np.asarray(m)), "not chained"),
    (_softmax_rollout, "a softmax"),
    (lambda m: np.swapaxes(good_rollout(m), -1, -2), "transposed"),
]


@pytest.mark.parametrize("seed", [0, 7])
def test_the_rollout_checker_passes_a_right_answer(seed):
    for fn in (good_rollout, looped_rollout):
        res = ex.check_causal_rollout(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 2 and all(res.cases.values())


def test_a_rollout_stub_is_not_attempted():
    def stub(maps):
        raise NotImplementedError

    assert ex.check_causal_rollout(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", WRONG_ROLLOUT, ids=[p for _, p in WRONG_ROLLOUT])
def test_the_rollout_checker_names_the_mistake(wrong, phrase):
    res = ex.check_causal_rollout(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    # every failed case names it (the normalisation slips pass the decoder's case, whose
    # ALTI rows already sum to 1; the random maps' rows do not)
    assert not res.cases["random lower-triangular maps, rows not normalised"]
    failed = sum(not ok for ok in res.cases.values())
    assert len(causes) == failed and all(phrase in m for m in causes), res.report()


def test_the_rollout_checker_says_when_the_upper_triangle_is_not_zero():
    for wrong in (_softmax_rollout, lambda m: np.swapaxes(good_rollout(m), -1, -2)):
        res = ex.check_causal_rollout(wrong, verbose=False)
        assert any("upper triangle is not zero" in m for m in res.messages), res.report()
    res = ex.check_causal_rollout(good_rollout, verbose=False)
    assert not any("upper triangle" in m for m in res.messages)


def test_the_rollout_checker_tests_the_prefix_property():
    """An answer that treats the last token apart breaks the block property and is told so."""
    def last_apart(maps):
        out = good_rollout(maps)
        out[:, -1] = np.roll(out[:, -1], 1, axis=-1)
        return out

    res = ex.check_causal_rollout(last_apart, verbose=False)
    assert any("is not the top-left" in m for m in res.messages), res.report()


def test_the_rollout_reference_is_the_decoders_alti_rollout():
    """By hand: lower-triangular and row-stochastic, and the library's ALTI rollout of a tiny
    random decoder; the rollout of a prefix run alone is the block of the whole run's."""
    import cmixlib
    from cmixlib.forward.decoder import random_decoder

    model = random_decoder("llama", seed=3)
    ids = torch.arange(5, 14)
    maps = cmixlib.context_mixing(model, None, {"input_ids": ids}, ["alti_layer", "alti"])
    want = D.reference_causal_rollout(maps["alti_layer"])
    np.testing.assert_allclose(want, maps["alti"], atol=1e-6)
    assert np.abs(np.triu(want, 1)).max() == 0.0
    np.testing.assert_allclose(want.sum(-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(want[:, 0], np.eye(len(ids))[0][None].repeat(len(want), 0))
    m = 5
    prefix = cmixlib.context_mixing(model, None, {"input_ids": ids[:m]}, ["alti_layer"])
    np.testing.assert_allclose(D.reference_causal_rollout(prefix["alti_layer"]),
                               want[:, :m, :m], atol=1e-5)


# --- 16.3: ALTI-Logit's explanation from its terms ---------------------------------------------

def good_explanation(target, foil, rollout, p):
    S = np.asarray(target["sources"], float) - np.asarray(foil["sources"], float)
    e = np.asarray(target["embedding"], float) - np.asarray(foil["embedding"], float)
    R = np.asarray(rollout, float)
    row = S[0, p].copy()
    for layer in range(1, len(S)):
        row += S[layer, p] @ R[layer - 1]
    row[p] += e[p]
    return row


def looped_explanation(target, foil, rollout, p):
    L, n, _ = np.shape(rollout)
    out = [0.0] * n
    for layer in range(L):
        for k in range(p + 1):
            s = float(target["sources"][layer][p][k] - foil["sources"][layer][p][k])
            if layer == 0:
                out[k] += s
            else:
                for j in range(n):
                    out[j] += s * float(rollout[layer - 1][k][j])
    out[p] += float(target["embedding"][p] - foil["embedding"][p])
    return torch.tensor(out, dtype=torch.float32)


def _with(fn, **change):
    def wrong(t, f, R, p):
        t, f = dict(t), dict(f)
        if "foil" in change:
            f = change["foil"](f)
        if "embedding" in change:
            t["embedding"] = 0 * np.asarray(t["embedding"])
            f["embedding"] = 0 * np.asarray(f["embedding"])
        return fn(t, f, change.get("R", lambda r: r)(R), p)
    return wrong


def _bos_embedding(t, f, R, p):
    row = _with(good_explanation, embedding=True)(t, f, R, p)
    row[0] += np.asarray(t["embedding"])[p] - np.asarray(f["embedding"])[p]
    return row


def _own_rollout(t, f, R, p):
    S = np.asarray(t["sources"]) - np.asarray(f["sources"])
    row = sum(S[layer, p] @ R[layer] for layer in range(len(S)))
    row[p] += np.asarray(t["embedding"])[p] - np.asarray(f["embedding"])[p]
    return row


def _not_carried(t, f, R, p):
    S = np.asarray(t["sources"]) - np.asarray(f["sources"])
    row = S[:, p].sum(0)
    row[p] += np.asarray(t["embedding"])[p] - np.asarray(f["embedding"])[p]
    return row


WRONG_EXPLANATION = [
    (_with(good_explanation, foil=lambda f: {k: -np.asarray(v) for k, v in f.items()}),
     "foil's terms were added"),
    (_with(good_explanation, foil=lambda f: {k: 0 * np.asarray(v) for k, v in f.items()}),
     "the foil was left out"),
    (_with(good_explanation, embedding=True), "embedding term is missing"),
    (_bos_embedding, "on the BOS"),
    (_own_rollout, "its own rollout"),
    (_not_carried, "not carried"),
    (_with(good_explanation, R=lambda r: np.swapaxes(r, -1, -2)), "rollout is transposed"),
]


@pytest.mark.parametrize("seed", [0, 7])
def test_the_explanation_checker_passes_a_right_answer(seed):
    for fn in (good_explanation, looped_explanation):
        res = ex.check_logit_explanation(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 2 and all(res.cases.values())


def test_an_explanation_stub_is_not_attempted():
    def stub(target, foil, rollout, p):
        raise NotImplementedError

    assert ex.check_logit_explanation(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", WRONG_EXPLANATION,
                         ids=[p for _, p in WRONG_EXPLANATION])
def test_the_explanation_checker_names_the_mistake(wrong, phrase):
    res = ex.check_logit_explanation(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert len(causes) == 2 and all(phrase in m for m in causes), res.report()


def test_the_last_row_instead_of_p_is_named():
    res = ex.check_logit_explanation(lambda t, f, R, p: good_explanation(t, f, R, len(R[0]) - 1),
                                     verbose=False)
    causes = [m for m in res.messages if "likely cause" in m]
    assert res.cases["a tiny random decoder"] and not res.cases["random terms"]
    assert causes and all("last row" in m for m in causes), res.report()


def test_the_sum_line_fails_when_the_row_does_not_add_up():
    for wrong in (WRONG_EXPLANATION[0][0], WRONG_EXPLANATION[2][0]):
        res = ex.check_logit_explanation(wrong, verbose=False)
        assert any("carrying by a rollout whose rows sum to 1" in m for m in res.messages)
    res = ex.check_logit_explanation(_own_rollout, verbose=False)   # the sum alone is no proof
    assert not any("carrying by a rollout" in m for m in res.messages)


def test_the_explanation_reference_is_alti_logits_with_the_foil():
    """The reference from each logit's own terms equals explain_logit(..., foil)'s explanation
    row, and with the remainder it adds up to the model's lambda_t - lambda_f."""
    from cmixlib.forward.decoder import random_decoder
    from cmixlib.methods.alti_logit import explain_logit

    model = random_decoder("llama", seed=5)
    ids = torch.arange(4, 12)
    both = explain_logit(model, None, {"input_ids": ids}, 7, 9)
    alone = [explain_logit(model, None, {"input_ids": ids}, w) for w in (7, 9)]
    terms = [{"sources": a.sources, "embedding": a.embedding} for a in alone]
    scale = np.abs(both.sources).max()
    for p in (3, len(ids) - 1):
        got = D.reference_logit_explanation(*terms, alone[0].rollout, p)
        np.testing.assert_allclose(got, both.explanation[p], atol=D._tolerance(3, 8, scale))
        assert abs(got.sum() + both.remainder[p] - both.logit[p]) < 1e-4 * abs(both.logit[p]) + 1e-5


# --- partial credit: the grading notes' rubrics on these checkers (no kernel) ------------------

@pytest.mark.parametrize("ex_id, fn, points", [
    ("16.1", good_rollout, 4.0),
    ("16.1", WRONG_ROLLOUT[0][0], 3.0),        # identity added: the cause's points
    ("16.1", WRONG_ROLLOUT[2][0], 3.0),        # raw product: decoder case 1, cause 3
    ("16.1", _softmax_rollout, 2.0),
    ("16.1", lambda m: np.zeros_like(m), 0.0),
    ("16.3", good_explanation, 4.0),
    ("16.3", WRONG_EXPLANATION[0][0], 3.0),    # the foil's sign
    ("16.3", WRONG_EXPLANATION[5][0], 2.0),    # not carried
    ("16.3", lambda t, f, R, p: good_explanation(t, f, R, len(R[0]) - 1), 2.0),  # last row
])
def test_the_rubric_gives_the_notes_points(ex_id, fn, points):
    from tests.test_grading_partial import _grade

    g = _grade(ex_id, fn)
    assert g.points == points, (g.points, g.feedback)
