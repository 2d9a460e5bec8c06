r"""Exercise 5.3: the value bias inside eq. (9), and the identity that makes it a constant.

Each :math:`F_{ij} = \sum_h \alpha^h_{ij} f^h(x_j)` with :math:`f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h`
carries the bias part

.. math::

   G_{ij} = \sum_{h=1}^{H} \alpha^h_{ij}\, b_V^h W_O^h , \qquad
   \sum_{j=1}^{n} G_{ij} = \sum_{h=1}^{H} b_V^h W_O^h = b_V W_O \quad \text{for every } i,

because every head's attention row sums to 1. Head :math:`h` owns the columns
:math:`h d_h, \dots, (h+1) d_h - 1` of :math:`b_V` and the same rows of :math:`W_O`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .checking import CheckResult, _call, _check_shape, _close, _report_diff, _tiny_bert, \
    _tiny_inputs

ATOL = 1e-10


def reference_value_bias(alpha: torch.Tensor, b_V: torch.Tensor, W_O: torch.Tensor,
                         interleaved: bool = False) -> np.ndarray:
    """:math:`G_{ij} = \\sum_h \\alpha^h_{ij} b_V^h W_O^h`, shape (n, n, d). ``alpha`` (H, n, n),
    ``b_V`` (d,), ``W_O`` (d, d) with :math:`a = \\mathrm{concat}_h(\\mathrm{head}^h) W_O + b_O`.
    ``interleaved`` splits the heads the wrong way (a likely mistake)."""
    H = alpha.shape[0]
    d = b_V.shape[0]
    dh = d // H
    if interleaved:
        idx = torch.arange(d).view(dh, H).T          # head h: columns h, h + H, ...
    else:
        idx = torch.arange(d).view(H, dh)            # head h: columns h dh .. (h+1) dh - 1
    per_head = torch.stack([b_V[idx[h]] @ W_O[idx[h]] for h in range(H)])     # (H, d)
    return torch.einsum("hij,hd->ijd", alpha, per_head).detach().numpy()


def _cases(seed: int):
    out = []
    g = torch.Generator().manual_seed(seed + 5)
    H, n, d = 4, 5, 16
    logits = 3 * torch.randn(H, n, n, generator=g, dtype=torch.float64)
    alpha = torch.softmax(logits, -1)
    out.append(("random peaked attention, 4 heads", alpha,
                torch.randn(d, generator=g, dtype=torch.float64),
                torch.randn(d, d, generator=g, dtype=torch.float64) / d ** 0.5))
    try:
        model = _tiny_bert(seed, layers=2).double()
        _, res = _tiny_inputs(model, seed=seed)
        layer = model.encoder.layer[1]
        out.append(("a layer of a tiny random BERT", res.attentions[1][0].double(),
                    layer.attention.self.value.bias.detach().double(),
                    layer.attention.output.dense.weight.detach().double().T))
    except Exception:  # noqa: BLE001 - the random case is enough
        pass
    return out


def check_value_bias(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(alpha, b_V, W_O) -> (n, n, d)``: the bias part :math:`G_{ij}` of every
    :math:`F_{ij}`. Tested on random peaked attention and on a tiny BERT's layer; checks the
    identity :math:`\\sum_j G_{ij} = b_V W_O` on the reader's result and names the usual
    slips (head-averaged attention, transposed attention, the same term for every j,
    interleaved heads)."""
    res = CheckResult("check_value_bias")
    for label, alpha, b_V, W_O in _cases(seed):
        res.begin(label)
        want = reference_value_bias(alpha, b_V, W_O)
        got = _call(res, student_fn, alpha.clone(), b_V.clone(), W_O.clone())
        if got is None:
            break
        if not _check_shape(res, got, want.shape, f"[{label}] (receiving i, sending j, d)"):
            break
        const = (b_V @ W_O).detach().numpy()
        rows = got.sum(1)
        if np.allclose(rows, const[None], atol=1e-8):
            res.ok(f"{label}: every row sums to b_V W_O (the identity)")
        else:
            res.fail(f"{label}: the rows do not sum to b_V W_O (largest gap "
                     f"{np.abs(rows - const[None]).max():.3g}); each head's attention row sums "
                     f"to 1, so they must.")
        if _close(got, want, atol=ATOL, rtol=1e-8):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, G[{ix[0]}, {ix[1]}], coordinate "
                                                 f"{ix[2]}", ATOL)
        mean_alpha = alpha.mean(0, keepdim=True).expand_as(alpha)
        n = alpha.shape[-1]
        causes = {
            "the head-averaged attention was used: each head's weights multiply its own "
            "b_V^h W_O^h.": reference_value_bias(mean_alpha, b_V, W_O) * 1.0,
            "the attention is transposed: G_ij uses alpha^h_ij, row i receiving, column j "
            "sending.": reference_value_bias(alpha.transpose(-1, -2), b_V, W_O),
            "the same term for every j: the attention weights are missing (b_V W_O / n).":
                np.broadcast_to((b_V @ W_O).detach().numpy() / n, want.shape),
            "the heads were split the wrong way: head h owns the contiguous columns "
            "h d_h .. (h+1) d_h - 1 of b_V and the same rows of W_O.":
                reference_value_bias(alpha, b_V, W_O, interleaved=True),
        }
        for cause, wrong in causes.items():
            if _close(got, np.asarray(wrong), atol=ATOL, rtol=1e-8) and \
                    not _close(np.asarray(wrong), want, ATOL, 1e-8):
                res.info(f"likely cause: {cause}")
                break
    return res.finish(verbose)
