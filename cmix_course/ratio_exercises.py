r"""Exercise 4.3: the context-mixing ratio of Kobayashi et al. (2021), from one layer's vectors.

With :math:`T_i(x_j)` the vectors of row :math:`i` (what token :math:`j` sends to token
:math:`i`'s LN1 output, the residual on the diagonal),

.. math::

   r_i = \frac{\lVert \sum_{j \ne i} T_i(x_j) \rVert_2}
              {\lVert \sum_{j \ne i} T_i(x_j) \rVert_2 + \lVert T_i(x_i) \rVert_2} .

The norm of the summed context, not the sum of its norms: by the triangle inequality
:math:`r_i \le s_i`, the share of row :math:`i`'s lengths that lies off the diagonal,
:math:`s_i = \sum_{j \ne i} \lVert T_i(x_j)\rVert / \sum_j \lVert T_i(x_j)\rVert`, with
equality when the context vectors all point the same way. The checker checks that bound on the
reader's result and names the usual slips.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .checking import CheckResult, _call, _check_shape, _close, _report_diff

#: float64 inputs with d <= 32: a float32 computation errs below 1e-6 relative, while every
#: named mistake moves some r_i by more than 1e-4 in every case of the checker (tested).
ATOL, RTOL = 1e-7, 1e-5


def reference_mixing_ratio(T: torch.Tensor) -> np.ndarray:
    r""":math:`r_i` for every receiving token, shape (n,), from ``T`` (n, n, d) with
    ``T[i, j]`` :math:`= T_i(x_j)` (receiving i, sending j). Written row by row."""
    T = T.detach().double()
    n = T.shape[0]
    out = np.zeros(n)
    for i in range(n):
        context = sum(T[i, j] for j in range(n) if j != i)
        mix = float(torch.linalg.vector_norm(context))
        keep = float(torch.linalg.vector_norm(T[i, i]))
        out[i] = mix / (mix + keep)
    return out


def length_share(T: torch.Tensor) -> np.ndarray:
    r""":math:`s_i`: the share of row i's vector lengths off the diagonal, shape (n,); the
    upper bound of :math:`r_i` (and what adding the lengths instead of the vectors gives)."""
    lengths = torch.linalg.vector_norm(T.detach().double(), dim=-1).numpy()     # (n, n)
    diag = np.diag(lengths)
    return (lengths.sum(-1) - diag) / lengths.sum(-1)


def _random_case(seed: int) -> torch.Tensor:
    """Random vectors of one row per token where the context partly cancels: each row has a
    pair of senders that point almost opposite ways, and the diagonals differ in size."""
    g = torch.Generator().manual_seed(seed + 43)
    n, d = 6, 8
    T = torch.randn(n, n, d, generator=g, dtype=torch.float64)
    T = T * torch.linspace(0.4, 1.6, n, dtype=torch.float64)[None, :, None]
    for i in range(n):
        a, b = (i + 1) % n, (i + 2) % n
        T[i, b] = -0.9 * T[i, a] + 0.1 * torch.randn(d, generator=g, dtype=torch.float64)
        T[i, i] = T[i, i] * (0.5 + i / n)
    return T


def _layer_case(seed: int) -> torch.Tensor:
    """:math:`T_i(x_j)` of layer 1 of a tiny random BERT (float64) for one 7-token input."""
    from cmixlib.forward.encoder import (encoder_layers, iter_sentences, layer_states,
                                         run_and_capture)
    from cmixlib.models.random_models import random_model

    model = random_model("bert", hidden=32, layers=2, heads=4, seed=seed, dtype=torch.float64)
    ids = torch.randint(5, model.config.vocab_size, (1, 7),
                        generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        cap = run_and_capture(model, ids, torch.ones_like(ids))
        st = layer_states(cap, encoder_layers(model), 0, iter_sentences(cap)[0])[0]
        return st.ln1_vectors.detach().clone()


def _cases(seed: int) -> list[tuple[str, torch.Tensor]]:
    out = [("random vectors with cancelling senders", _random_case(seed))]
    try:
        out.append(("layer 1 of a tiny random BERT", _layer_case(seed)))
    except Exception:  # noqa: BLE001 - the random case is enough to judge the answer
        pass
    return out


def wrong_answers(T: torch.Tensor) -> dict[str, np.ndarray]:
    """The usual mistakes, each computed in full, keyed by the diagnosis shown to the reader."""
    T = T.detach().double()
    n = T.shape[0]
    eye = torch.eye(n, dtype=T.dtype)[:, :, None]
    norm = lambda v: torch.linalg.vector_norm(v, dim=-1).numpy()  # noqa: E731
    diag = norm(T[torch.arange(n), torch.arange(n)])
    context = norm((T * (1 - eye)).sum(1))
    whole = norm(T.sum(1))
    right = context / (context + diag)
    return {
        "the lengths were added: r_i takes the norm of the SUMMED context vectors, "
        "||sum_{j!=i} T_i(x_j)||, which is smaller when they point different ways (this is "
        "the off-diagonal share of the N-ResLN row).": length_share(T),
        "the diagonal was kept in the context sum: sum over j != i only; T_i(x_i) is the "
        "token's own (residual) part.": whole / (whole + diag),
        "the vectors were read transposed: T[i, j] is what token j sends to token i (row i "
        "receiving); r_i reads row i, not column i.": reference_mixing_ratio(T.transpose(0, 1)),
        "this is 1 - r_i, the share the token keeps: r_i puts the context's norm on top.":
            1.0 - right,
        "the denominator is the norm of the whole sum ||sum_j T_i(x_j)||; r_i divides by "
        "the sum of the two norms, so that it lies between 0 and 1.": context / whole,
    }


@torch.no_grad()
def check_mixing_ratio(student_fn: Callable, *, seed: int = 0,
                       verbose: bool = True) -> CheckResult:
    r"""``student_fn(T) -> (n,)``: the context-mixing ratio :math:`r_i` of every token of one
    layer, ``T`` (n, n, d) with ``T[i, j]`` :math:`= T_i(x_j)`. Tested on random vectors whose
    context partly cancels and on layer 1 of a tiny random BERT; checks
    :math:`0 \le r_i \le s_i` (the off-diagonal share of the lengths) on the reader's result
    and names the usual slips (lengths added, diagonal kept, transposed, :math:`1 - r_i`, the
    whole sum's norm as denominator)."""
    res = CheckResult("check_mixing_ratio")
    for label, T in _cases(seed):
        res.begin(label)
        want = reference_mixing_ratio(T)
        got = _call(res, student_fn, T.clone())
        if got is None:
            break
        got = got.reshape(-1) if got.size == want.size else got
        if not _check_shape(res, got, want.shape, f"[{label}: one ratio per receiving token]"):
            break
        bound = length_share(T)
        if ((got >= -ATOL) & (got <= bound + ATOL + RTOL * bound)).all():
            res.ok(f"{label}: 0 <= r_i <= the off-diagonal share of the lengths, for every i")
        else:
            res.fail(f"{label}: some r_i lie outside [0, s_i], s_i the off-diagonal share of "
                     f"row i's lengths; the triangle inequality says they cannot.")
        if _close(got, want, atol=ATOL, rtol=RTOL):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, r_{ix[0]}", ATOL)
        for cause, wrong in wrong_answers(T).items():
            if _close(got, wrong, atol=ATOL, rtol=RTOL) and not _close(wrong, want, ATOL, RTOL):
                res.info(f"likely cause: {cause}")
                break
    return res.finish(verbose)
