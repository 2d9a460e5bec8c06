"""Exercise 8.3's checker (cmix_course.ig_exercises.check_integrated_gradients): it passes the
midpoint rule, reports a stub as not attempted, names each usual mistake, and its reference is
exact where the midpoint rule is (a quadratic f, whose IG is known in closed form) and agrees
with captum's IntegratedGradients (method "riemann_middle") on the checker's own cases. The
checker's functions are torch modules only (the grader pickles them into the kernel)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmix_course as ex
from cmix_course import ig_exercises as IG


def _grads(f, x, baseline, alphas):
    out = torch.zeros_like(x)
    for a in alphas:
        p = (baseline + a * (x - baseline)).detach().requires_grad_(True)
        out += torch.autograd.grad(f(p), p)[0]
    return out / len(alphas)


def good_ig(f, x, baseline, n_steps):
    mid = [(t + 0.5) / n_steps for t in range(n_steps)]
    return ((x - baseline) * _grads(f, x, baseline, mid)).sum(-1)


def _mid(m):
    return [(t + 0.5) / m for t in range(m)]


WRONG = [
    (lambda f, x, b, m: _grads(f, x, b, _mid(m)).sum(-1), "not multiplied by (x - baseline)"),
    (lambda f, x, b, m: (x * _grads(f, x, b, _mid(m))).sum(-1), "multiplied by x instead"),
    (lambda f, x, b, m: ((x - b) * _grads(f, x, b, [1.0])).sum(-1), "taken at x only"),
    (lambda f, x, b, m: ((x - b) * _grads(f, x, b, [(t + 1) / m for t in range(m)])).sum(-1),
     "not t / m"),
    (lambda f, x, b, m: ((x - b) * _grads(f, x, b, [t / m for t in range(m)])).sum(-1),
     "not (t - 1) / m"),
    (lambda f, x, b, m: ((x - b) * _grads(f, x, b, _mid(m))).norm(dim=-1), "L2 norm"),
    (lambda f, x, b, m: ((b - x) * _grads(f, x, b, _mid(m))).sum(-1), "the sign is flipped"),
    (lambda f, x, b, m: m * good_ig(f, x, b, m), "summed over the steps"),
]


@pytest.mark.parametrize("seed", [0, 7])
def test_the_checker_passes_the_midpoint_rule(seed):
    res = ex.check_integrated_gradients(good_ig, seed=seed, verbose=False)
    assert res and res.status == "passed", res.report()
    assert len(res.cases) == 4 and all(res.cases.values()), res.cases
    assert any("completeness with 64 steps" in m and "f(x) - f(baseline)" in m
               for m in res.messages)


def test_a_stub_is_not_attempted():
    def stub(f, x, baseline, n_steps):
        raise NotImplementedError

    assert ex.check_integrated_gradients(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", WRONG, ids=[p for _, p in WRONG])
def test_the_checker_names_the_mistake(wrong, phrase):
    res = ex.check_integrated_gradients(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert causes and all(phrase in m for m in causes), res.report()


def test_a_wrong_rule_also_fails_completeness():
    left = WRONG[4][0]
    res = ex.check_integrated_gradients(left, verbose=False)
    assert any("completeness with 64 steps" in m and "✗" in m for m in res.messages), res.report()


def test_the_reference_is_exact_on_a_quadratic():
    """f(x) = sum c x^2 + b x: the gradient is linear along the path, so the midpoint rule is
    exact with any m, and s_j = sum_k c (x^2 - x'^2) + b (x - x')."""
    g = torch.Generator().manual_seed(0)
    c, b, x, xb = (torch.randn(4, 3, generator=g, dtype=torch.float64) for _ in range(4))

    def f(z):
        return (c * z**2 + b * z).sum()

    want = (c * (x**2 - xb**2) + b * (x - xb)).sum(-1).numpy()
    for m in (1, 3, 8):
        np.testing.assert_allclose(IG.reference_integrated_gradients(f, x, xb, m), want,
                                   rtol=1e-12, atol=1e-12)
    assert want.sum() == pytest.approx(float(f(x) - f(xb)), abs=1e-12)      # completeness


@pytest.mark.parametrize("seed", [0, 7])
def test_the_reference_equals_captum_on_the_checkers_cases(seed):
    captum = pytest.importorskip("captum.attr")
    for label, f, x, baseline, m in IG._cases(seed):
        assert isinstance(f, torch.nn.Sequential)
        ig = captum.IntegratedGradients(lambda z: f(z[0]).reshape(1))
        attr = ig.attribute(x[None], baselines=baseline[None], n_steps=m,
                            method="riemann_middle", internal_batch_size=1)
        np.testing.assert_allclose(IG.reference_integrated_gradients(f, x, baseline, m),
                                   attr[0].sum(-1).detach().numpy(), rtol=1e-9, atol=1e-10,
                                   err_msg=label)
