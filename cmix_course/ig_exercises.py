r"""Exercise 8.2: integrated gradients by the midpoint rule, and its completeness.

For a scalar function :math:`f` of token vectors :math:`x \in \mathbb{R}^{n \times d}`, a baseline
:math:`x'` and :math:`m` steps, token :math:`j`'s attribution is

.. math::

   s_j = \sum_k (x_{jk} - x'_{jk}) \, \frac{1}{m} \sum_{t=1}^{m}
   \frac{\partial f}{\partial x_{jk}}\Big(x' + \alpha_t (x - x')\Big), \qquad
   \alpha_t = \frac{t - 1/2}{m},

and completeness says :math:`\sum_j s_j \to f(x) - f(x')` as :math:`m` grows (the midpoint rule's
error falls as :math:`1/m^2` for a smooth :math:`f`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .checking import CheckResult, _call, _check_shape, _close, _report_diff

#: Tolerance on an attribution (float64 functions; sums of at most 64 gradients).
ATOL = 1e-8


def _path_gradients(f: Callable, x: torch.Tensor, baseline: torch.Tensor,
                    alphas: np.ndarray) -> torch.Tensor:
    """The gradients of ``f`` at ``baseline + alpha (x - baseline)``, one per alpha, (m, n, d)."""
    out = []
    for a in alphas:
        point = (baseline + float(a) * (x - baseline)).detach().requires_grad_(True)
        (g,) = torch.autograd.grad(f(point), point)
        out.append(g)
    return torch.stack(out)


def reference_integrated_gradients(f: Callable, x: torch.Tensor, baseline: torch.Tensor,
                                   n_steps: int) -> np.ndarray:
    """Integrated gradients by the midpoint rule, summed over the hidden dimension, shape (n,)."""
    alphas = (np.arange(n_steps) + 0.5) / n_steps
    avg = _path_gradients(f, x, baseline, alphas).mean(0)
    return ((x - baseline) * avg).sum(-1).detach().numpy()


def _network(seed: int, n: int, d: int, layer_norm: bool) -> torch.nn.Module:
    """A scalar function of (n, d) token vectors made of torch modules only (the grader sends
    it to the submission's kernel, which can unpickle torch's classes but not this package's):
    per token an optional LayerNorm, a linear map and tanh or GELU, then one linear read-out
    of all tokens. Returns a one-element tensor; float64."""
    with torch.random.fork_rng():           # the grader's own random state stays as it was
        torch.manual_seed(seed)
        parts = [torch.nn.LayerNorm(d)] if layer_norm else []
        parts += [torch.nn.Linear(d, 16), torch.nn.GELU() if layer_norm else torch.nn.Tanh(),
                  torch.nn.Flatten(0), torch.nn.Linear(n * 16, 1)]
        net = torch.nn.Sequential(*parts).double()
        if layer_norm:                      # a non-trivial gain and bias
            with torch.no_grad():
                net[0].weight.uniform_(0.5, 1.5)
                net[0].bias.normal_(0, 0.3)
    return net.requires_grad_(False)


def _cases(seed: int) -> list[tuple[str, Callable, torch.Tensor, torch.Tensor, int]]:
    g = torch.Generator().manual_seed(seed + 11)
    n, d = 5, 8
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    shift = torch.randn(n, d, generator=g, dtype=torch.float64)
    tanh = _network(seed, n, d, layer_norm=False)
    gelu = _network(seed + 1, n, d, layer_norm=True)
    return [("a small tanh network, zero baseline, 8 steps", tanh, x, torch.zeros_like(x), 8),
            ("a small tanh network, non-zero baseline, 8 steps", tanh, x, 0.5 * shift, 8),
            ("a LayerNorm-GELU network, non-zero baseline, 16 steps", gelu, 2 * x, shift, 16)]


def _causes(f, x, baseline, m) -> dict[str, np.ndarray]:
    mid = (np.arange(m) + 0.5) / m
    grads = _path_gradients(f, x, baseline, mid)
    avg = grads.mean(0)
    diff = x - baseline
    left = _path_gradients(f, x, baseline, np.arange(m) / m).mean(0)
    right = _path_gradients(f, x, baseline, (np.arange(m) + 1) / m).mean(0)
    at_x = _path_gradients(f, x, baseline, np.array([1.0]))[0]
    num = lambda t: t.detach().numpy()  # noqa: E731
    return {
        "the gradient was not multiplied by (x - baseline).": num(avg.sum(-1)),
        "the gradient was multiplied by x instead of (x - baseline).": num((x * avg).sum(-1)),
        "the gradient was taken at x only: this is gradient x (input - baseline), not its "
        "average along the path.": num((diff * at_x).sum(-1)),
        "the points are not the midpoints: alpha_t = (t - 1/2) / m, not t / m.":
            num((diff * right).sum(-1)),
        "the points are not the midpoints: alpha_t = (t - 1/2) / m, not (t - 1) / m.":
            num((diff * left).sum(-1)),
        "the attributions were reduced with an L2 norm over the hidden dimension; integrated "
        "gradients sums the signed products.": num((diff * avg).norm(dim=-1)),
        "the sign is flipped: multiply by (x - baseline), not (baseline - x).":
            -num((diff * avg).sum(-1)),
        "the gradients were summed over the steps, not averaged (divide by m).":
            m * num((diff * avg).sum(-1)),
    }


def check_integrated_gradients(student_fn: Callable, *, seed: int = 0,
                               verbose: bool = True) -> CheckResult:
    """``student_fn(f, x, baseline, n_steps) -> (n,)``: integrated gradients of the scalar
    function ``f`` at ``x`` (n, d) from ``baseline`` (n, d), midpoint rule with ``n_steps``
    points, summed over the hidden dimension. Tested on a small tanh network (zero and non-zero
    baselines) and on a LayerNorm-GELU network; reports completeness for each, and checks it
    with 64 steps."""
    res = CheckResult("check_integrated_gradients")
    for label, f, x, baseline, m in _cases(seed):
        res.begin(label)
        want = reference_integrated_gradients(f, x, baseline, m)
        got = _call(res, student_fn, f, x.clone(), baseline.clone(), m)
        if got is None:
            break
        got = got.reshape(-1) if got.size == want.size else got
        if not _check_shape(res, got, want.shape, f"[{label}] (one attribution per token)"):
            break
        gap = float((f(x) - f(baseline)).detach())
        res.info(f"{label}: your attributions sum to {got.sum():.6f}; f(x) - f(baseline) = "
                 f"{gap:.6f} (completeness, up to the midpoint rule's error with {m} steps)")
        if _close(got, want, atol=ATOL, rtol=1e-6):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, token j={ix[0]}", ATOL)
        for cause, wrong in _causes(f, x, baseline, m).items():
            if _close(got, wrong, atol=ATOL, rtol=1e-6) and not _close(wrong, want, ATOL, 1e-6):
                res.info(f"likely cause: {cause}")
                break
    else:
        _completeness(res, student_fn, seed)
    return res.finish(verbose)


def _completeness(res: CheckResult, student_fn: Callable, seed: int, m: int = 64) -> None:
    """With many steps the attributions add up to f(x) - f(baseline), as closely as the
    midpoint rule gets there (its own gap, twice, as the tolerance)."""
    label = f"completeness with {m} steps"
    res.begin(label)
    _, f, x, baseline, _ = _cases(seed)[1]
    got = _call(res, student_fn, f, x.clone(), baseline.clone(), m)
    if got is None:
        return
    gap = float((f(x) - f(baseline)).detach())
    rule = float(reference_integrated_gradients(f, x, baseline, m).sum())
    tol = 2 * abs(rule - gap) + 1e-9
    if abs(float(got.sum()) - gap) <= tol:
        res.matched(label, f": the attributions sum to {float(got.sum()):.6f}, f(x) - "
                           f"f(baseline) = {gap:.6f}")
    else:
        res.fail(f"{label}: the attributions sum to {float(got.sum()):.6f}, but f(x) - "
                 f"f(baseline) = {gap:.6f} (the midpoint rule gets within {abs(rule - gap):.1e}).")
