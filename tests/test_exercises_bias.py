"""Exercise 5.3's checker (cmix_course.bias_exercises.check_value_bias): it passes the bias part
of eq. (9), reports a stub as not attempted, names each usual mistake, and its reference equals
the bias part of the library's own vectors F_ij (LayerState.attn_vectors with and without b_V)
on a real captured layer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmix_course as ex
from cmix_course import bias_exercises as B


def good_bias(alpha, b_V, W_O):
    H, d = alpha.shape[0], b_V.shape[0]
    per_head = torch.einsum("hk,hkd->hd", b_V.reshape(H, d // H), W_O.reshape(H, d // H, d))
    return torch.einsum("hij,hd->ijd", alpha, per_head)


def _loop_bias(alpha, b_V, W_O, split=None):
    H, n, _ = alpha.shape
    d = b_V.shape[0]
    dh = d // H
    out = torch.zeros(n, n, d, dtype=b_V.dtype)
    for h in range(H):
        cols = split(h) if split else list(range(h * dh, (h + 1) * dh))
        vec = b_V[cols] @ W_O[cols]
        for i in range(n):
            for j in range(n):
                out[i, j] += alpha[h, i, j] * vec
    return out


WRONG = [
    (lambda a, b, w: good_bias(a.mean(0, keepdim=True).expand_as(a), b, w),
     "head-averaged attention"),
    (lambda a, b, w: good_bias(a.transpose(-1, -2), b, w), "attention is transposed"),
    (lambda a, b, w: (b @ w / a.shape[-1]).expand(a.shape[-1], a.shape[-1], -1),
     "the same term for every j"),
    (lambda a, b, w: _loop_bias(a, b, w, split=lambda h: list(range(h, b.shape[0], a.shape[0]))),
     "heads were split the wrong way"),
]


@pytest.mark.parametrize("seed", [0, 7])
def test_the_checker_passes_the_bias_part(seed):
    for fn in (good_bias, _loop_bias):
        res = ex.check_value_bias(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 2 and all(res.cases.values())


def test_a_stub_is_not_attempted():
    def stub(alpha, b_V, W_O):
        raise NotImplementedError

    assert ex.check_value_bias(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", WRONG, ids=[p for _, p in WRONG])
def test_the_checker_names_the_mistake(wrong, phrase):
    res = ex.check_value_bias(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert len(causes) == 2 and all(phrase in m for m in causes), res.report()


def test_the_identity_line_fails_when_the_rows_do_not_add_up():
    res = ex.check_value_bias(lambda a, b, w: 2 * good_bias(a, b, w), verbose=False)
    assert any("do not sum to b_V W_O" in m for m in res.messages), res.report()


def test_the_reference_is_the_bias_part_of_the_librarys_vectors():
    """F_ij of a captured layer (LayerState.attn_vectors) minus F_ij rebuilt from the weights
    without b_V is the reference's G_ij, and its rows add up to b_V W_O."""
    from tests.test_exercises import _states_and_ln2_inputs

    states, _, _ = _states_and_ln2_inputs("bert")
    for st in states:
        H, n, _ = st.alpha.shape
        d = st.x.shape[-1]
        W_O = st.mods.out.weight.T
        v = (st.x @ st.mods.value.weight.T).reshape(n, H, d // H)        # no bias
        f = torch.einsum("jhk,hkd->hjd", v, W_O.reshape(H, d // H, d))
        without = torch.einsum("hij,hjd->ijd", st.alpha, f)
        want = (st.attn_vectors - without).detach().numpy()
        got = B.reference_value_bias(st.alpha, st.mods.value.bias, W_O)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got.sum(1), np.broadcast_to(
            (st.mods.value.bias @ W_O).detach().numpy(), (n, d)), rtol=1e-9, atol=1e-12)
