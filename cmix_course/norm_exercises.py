"""Exercise on chapter 4 (vector norms): the N-ResLN map of one layer from its parts.

The reader gets what one layer's attention block consists of (the weights alpha, the transformed
value vectors f^h(x_j), the residual x, the output bias b_O and LN1) and builds, in one function,
the three steps of the chapter: the vectors F_ij that token j sends to token i, the residual on
the diagonal (z_ij), and the exact LN1 decomposition with sigma(p_i) frozen (T_i(x_j)). The
checker compares the norms ||T_i(x_j)||_2 with ``reference_n_res_ln`` and names the step
that went wrong.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .checking import CheckResult, _call, _check_shape, _close, _diagnose, _report_diff

STAGES = ("n", "n_res", "n_res_ln")


def reference_n_res_ln(alpha: torch.Tensor, fx: torch.Tensor, x: torch.Tensor, b_o: torch.Tensor,
                       ln1: torch.nn.LayerNorm, *, stage: str = "n_res_ln") -> torch.Tensor:
    r"""N-ResLN of one layer, :math:`\lVert T_i(x_j) \rVert_2`, shape (n, n), by its definition.

    ``alpha`` (H, n, n): :math:`\alpha^h_{ij}` (receiving token i, sending token j); ``fx``
    (H, n, d): :math:`f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h`; ``x`` (n, d): the layer input;
    ``b_o`` (d,): the output bias; ``ln1``: the first LayerNorm.

    .. math::
        F_{ij} = \sum_h \alpha^h_{ij} f^h(x_j), \quad z_{ij} = F_{ij} + \delta_{ij} x_i, \quad
        p_i = \sum_j z_{ij} + b_O, \quad
        T_i(x_j) = \gamma_1 \odot \frac{z_{ij} - \mu(z_{ij})\mathbf{1}}{\sigma(p_i)} .

    ``stage="n"`` returns :math:`\lVert F_{ij}\rVert_2` (N), ``"n_res"`` :math:`\lVert z_{ij}\rVert_2`
    (N-Res). Written token pair by token pair (the obvious way; the library batches it), so that
    it is independent of :mod:`cmixlib.methods.norms`.
    """
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    heads, n, _ = alpha.shape
    rows = []
    for i in range(n):
        z_i = []
        for j in range(n):
            f_ij = sum(alpha[h, i, j] * fx[h, j] for h in range(heads))   # F_ij
            z_i.append(f_ij + x[i] if (i == j and stage != "n") else f_ij)
        rows.append(torch.stack(z_i))
    z = torch.stack(rows)                                                # (n, n, d)
    if stage != "n_res_ln":
        return torch.linalg.vector_norm(z, dim=-1)
    p = z.sum(1) + b_o                                                   # p_i, the LN1 input
    sigma = torch.sqrt(((p - p.mean(-1, keepdim=True)) ** 2).mean(-1) + ln1.eps)  # (n,)
    t = ln1.weight * (z - z.mean(-1, keepdim=True)) / sigma[:, None, None]
    return torch.linalg.vector_norm(t, dim=-1)


def _peaky_case(seed: int, heads: int = 3, n: int = 5, d: int = 12):
    """Synthetic parts of one layer: peaked attention rows, vectors of unequal size, a random
    LayerNorm (gain and bias not 1 and 0), so that every usual mistake changes the answer."""
    g = torch.Generator().manual_seed(seed)
    dt = torch.float64
    alpha = torch.rand(heads, n, n, generator=g, dtype=dt) ** 4 + 0.01
    alpha = alpha / alpha.sum(-1, keepdim=True)
    scale = torch.linspace(0.3, 2.0, n, dtype=dt)
    fx = torch.randn(heads, n, d, generator=g, dtype=dt) * scale[None, :, None] + 0.3
    x = torch.randn(n, d, generator=g, dtype=dt) * 1.5 + 0.2
    b_o = torch.randn(d, generator=g, dtype=dt) * 0.8 + 0.5
    ln1 = torch.nn.LayerNorm(d, eps=1e-12).to(dt)
    with torch.no_grad():
        ln1.weight.copy_(torch.rand(d, generator=g, dtype=dt) * 1.5 + 0.25)
        ln1.bias.copy_(torch.randn(d, generator=g, dtype=dt) * 0.5)
    return alpha, fx, x, b_o, ln1


def _layer_case(seed: int):
    """The parts of layer 1 of a tiny random BERT (float64) for one 6-token input."""
    from cmixlib.forward.encoder import (encoder_layers, iter_sentences, layer_states,
                                         run_and_capture)
    from cmixlib.models.random_models import random_model

    model = random_model("bert", hidden=32, layers=2, heads=4, seed=seed, dtype=torch.float64)
    ids = torch.randint(5, model.config.vocab_size, (1, 6),
                        generator=torch.Generator().manual_seed(seed))
    cap = run_and_capture(model, ids, torch.ones_like(ids))
    st = layer_states(cap, encoder_layers(model), 0, iter_sentences(cap)[0])[0]
    return st.alpha, st.head_vectors, st.x, st.mods.out.bias, st.mods.ln1


def _wrong_answers(alpha, fx, x, b_o, ln1) -> dict[str, np.ndarray]:
    """The usual mistakes, each computed in full, keyed by the diagnosis shown to the reader."""
    n = alpha.shape[-1]
    eye = torch.eye(n, dtype=x.dtype)[:, :, None]
    norm = lambda v: torch.linalg.vector_norm(v, dim=-1).detach().double().numpy()  # noqa: E731

    def sd(v):
        return torch.sqrt(v.var(-1, unbiased=False, keepdim=True) + ln1.eps)

    def ln_part(z, p):                     # gamma * centred z / sigma(p_i), the right LN step
        return ln1.weight * (z - z.mean(-1, keepdim=True)) / sd(p)[:, None, :]

    def own(z):                            # the LN step with sigma of the reader's own p_i
        return ln_part(z, z.sum(1) + b_o)

    res_ = eye * x[:, None, :]                 # delta_ij x_i
    F = torch.einsum("hij,hjd->ijd", alpha, fx)
    z = F + res_
    p = z.sum(1) + b_o
    right = ln_part(z, p)
    return {
        "this is N-Res, ||z_ij||: the vectors have not gone through LN1 yet (centre each z_ij, "
        "multiply by gamma_1, divide by sigma(p_i)).": norm(z),
        "this is N, ||F_ij||: the residual x_i (on the diagonal) and the LN1 step are both "
        "missing.": norm(F),
        "the residual x_i is missing: z_ii = F_ii + x_i, and p_i contains x_i.": norm(own(F)),
        "the residual is missing from z_ii, although sigma(p_i) was computed with it: "
        "z_ij = F_ij + delta_ij x_i.": norm(ln_part(F, p)),
        "x_i was added to every z_ij of row i; the residual belongs on the diagonal only "
        "(delta_ij).": norm(own(F + x[:, None, :])),
        "x_j was added to every z_ij of column j; the residual belongs on the diagonal only "
        "(delta_ij).": norm(own(F + x[None, :, :])),
        "the attention weights were read transposed: alpha[h, i, j] has the receiving token i "
        "(query) first and the sending token j (key) second.":
            norm(own(torch.einsum("hji,hjd->ijd", alpha, fx) + res_)),
        "the value vectors of the receiving token i were used; F_ij carries f^h(x_j) of the "
        "sending token j.": norm(own(torch.einsum("hij,hid->ijd", alpha, fx) + res_)),
        "the heads were averaged; F_ij is the sum over heads.":
            norm(own(F / alpha.shape[0] + res_)),
        "sigma(p_i) was computed without b_O: the real LN1 input is p_i = sum_j z_ij + b_O.":
            norm(ln_part(z, z.sum(1))),
        "each vector was divided by its own std; all vectors of row i share sigma(p_i).":
            norm(ln1.weight * (z - z.mean(-1, keepdim=True)) / sd(z)),
        "the vectors z_ij were not centred (subtract each vector's own mean over d).":
            norm(ln1.weight * z / sd(p)[:, None, :]),
        "gamma_1 (ln1.weight) is missing.": norm((z - z.mean(-1, keepdim=True)) / sd(p)[:, None, :]),
        "beta_1 (ln1.bias) was added to every vector; it belongs to no token.":
            norm(right + ln1.bias),
        "each z_ij was passed through the full LayerNorm; LN1 is linear only with sigma(p_i) "
        "fixed at the real input's value.": norm(ln1(z)),
        "the rows were normalised; the exercise asks for the raw norms.":
            (norm(right) / norm(right).sum(-1, keepdims=True)),
    }


@torch.no_grad()
def check_n_res_ln(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(alpha, fx, x, b_O, ln1) -> (n, n)``: the un-normalised N-ResLN map of a layer.

    ``alpha`` (H, n, n) the attention weights :math:`\alpha^h_{ij}`, ``fx`` (H, n, d) the vectors
    :math:`f^h(x_j)`, ``x`` (n, d) the layer input, ``b_O`` (d,) the output bias, ``ln1`` the
    first LayerNorm. Entry (i, j) is :math:`\lVert T_i(x_j)\rVert_2` (see
    ``reference_n_res_ln``). Tested on synthetic parts with peaked attention and on layer 1
    of a tiny random BERT.
    """
    res = CheckResult("check_n_res_ln")
    cases = [("synthetic layer", _peaky_case(seed + 11))]
    try:
        cases.append(("layer 1 of a tiny random BERT", _layer_case(seed)))
    except Exception:  # noqa: BLE001 - the synthetic case is enough to judge the answer
        pass
    for label, (alpha, fx, x, b_o, ln1) in cases:
        want = reference_n_res_ln(alpha, fx, x, b_o, ln1).double().numpy()
        got = _call(res, student_fn, alpha.clone(), fx.clone(), x.clone(), b_o.clone(), ln1)
        if got is None:
            break
        if not _check_shape(res, got, want.shape, f"[{label}: receiving token i, sending token j]"):
            break
        if (got < -1e-9).any():
            res.fail(f"{label}: negative entries; every entry is a vector norm.")
        if _close(got, want, atol=1e-8, rtol=1e-6):
            res.ok(f"{label}: matches the reference N-ResLN map")
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, row i={ix[0]}, column j={ix[1]}", 1e-8)
        _diagnose(res, got, _wrong_answers(alpha, fx, x, b_o, ln1), atol=1e-8, want=want)
        break
    return res.finish(verbose)
