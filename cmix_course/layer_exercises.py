"""Exercises on one encoder layer: attention weights from the weights (1), the LayerNorm
decomposition (2) and one row of Value Zeroing by its definition (4)."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from cmixlib.models.arch import layer_list, layer_parts, parts_of_layer
from .checking import (CheckResult, _call, _check_normalised_row, _check_shape, _close, _diagnose,
                       _heads, _report_diff, _tiny_bert, _tiny_inputs)

# ------------------------------------------------------------------------------------------
# 1. attention weights from the layer's weights
# ------------------------------------------------------------------------------------------

def reference_attention_probs(layer, hidden: torch.Tensor, *, scale: bool = True,
                              softmax_dim: int = -1) -> torch.Tensor:
    """Attention weights (H, n, n) of a BERT layer for one unpadded sentence ``hidden`` (1, n, d)."""
    x = hidden[0]
    n, d = x.shape
    heads = _heads(layer)
    sa = parts_of_layer(layer, "bert", heads)
    dh = d // heads
    q = sa.query(x).view(n, heads, dh).transpose(0, 1)
    k = sa.key(x).view(n, heads, dh).transpose(0, 1)
    scores = q @ k.transpose(-1, -2)
    if scale:
        scores = scores / math.sqrt(dh)
    return torch.softmax(scores, dim=softmax_dim)


@torch.no_grad()
def check_attention_probs(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(layer, hidden) -> (H, n, n)`` attention weights of a tiny BERT layer.

    ``layer`` is a ``BertLayer``, ``hidden`` its input of shape (1, n, d) (one sentence, no
    padding). Compared with the weights the model itself returns (``output_attentions=True``).
    """
    res = CheckResult("check_attention_probs")
    model = _tiny_bert(seed)
    _, out = _tiny_inputs(model, seed=seed)
    for layer_idx in range(model.config.num_hidden_layers):
        layer = layer_list(model)[layer_idx]
        hidden = out.hidden_states[layer_idx]
        want = out.attentions[layer_idx][0].double().numpy()
        got = _call(res, student_fn, layer, hidden.clone())
        if got is None:
            break
        if got.ndim == 4 and got.shape[0] == 1:
            got = got[0]
        if not _check_shape(res, got, want.shape, "(heads, n, n)"):
            break
        rows = got.sum(-1)
        if not np.allclose(rows, 1.0, atol=1e-4):
            cols = got.sum(-2)
            hint = (" (columns sum to 1: the softmax ran over the query axis instead of the key axis)"
                    if np.allclose(cols, 1.0, atol=1e-4) else "")
            res.fail(f"layer {layer_idx + 1}: rows should sum to 1 but sum to "
                     f"{rows.min():.3f}..{rows.max():.3f}{hint}.")
        if _close(got, want, atol=1e-5):
            res.ok(f"layer {layer_idx + 1}: matches the model's attention weights")
            continue
        _report_diff(res, got, want, lambda ix: f"head {ix[0]}, query {ix[1]}, key {ix[2]}", 1e-5)
        _diagnose(res, got, {
            "the scores were not divided by sqrt(d_head).":
                reference_attention_probs(layer, hidden, scale=False).double().numpy(),
            "softmax over the wrong axis (it must normalise over keys, the last axis).":
                reference_attention_probs(layer, hidden, softmax_dim=-2).double().numpy(),
            "the matrix is transposed (rows must be queries, columns keys).":
                np.swapaxes(want, -1, -2),
        }, atol=1e-5, want=want)
        break
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 2. the LayerNorm decomposition (Kobayashi et al. 2021)
# ------------------------------------------------------------------------------------------

def reference_ln_decomposition(parts: torch.Tensor, ln: torch.nn.LayerNorm) -> torch.Tensor:
    """Split ``LN(sum_k parts[k])`` into terms g(parts[k]) with sum_k g(parts[k]) + beta = LN(sum).

    g(u) = gamma * (u - mean(u)) / sqrt(var(sum_k parts[k]) + eps): each part is centred on
    its own, and all parts share the standard deviation of the sum (the only non-linear bit).
    """
    total = parts.sum(0)
    std = torch.sqrt(total.var(-1, unbiased=False, keepdim=True) + ln.eps)
    centred = parts - parts.mean(-1, keepdim=True)
    return ln.weight * centred / std


@torch.no_grad()
def check_ln_decomposition(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(parts, ln) -> (m, d)``: terms whose sum plus ``ln.bias`` equals ``ln(parts.sum(0))``.

    ``parts`` is an (m, d) tensor of vectors whose sum enters the LayerNorm ``ln``; the terms must
    be the exact linear decomposition (each part centred, scaled by gamma and divided by the
    standard deviation of the *sum*), with the bias beta left out of the terms.
    """
    res = CheckResult("check_ln_decomposition")
    model = _tiny_bert(seed)
    ln = layer_parts(model)[0].ln1
    g = torch.Generator().manual_seed(seed + 1)
    d = ln.normalized_shape[0]
    for trial, m in enumerate((5, 2)):
        parts = torch.randn(m, d, generator=g) * torch.linspace(0.5, 3.0, m)[:, None] + 0.3
        want_t = reference_ln_decomposition(parts, ln)
        want = want_t.double().numpy()
        got = _call(res, student_fn, parts.clone(), ln)
        if got is None:
            break
        if not _check_shape(res, got, want.shape, "(one term per part)"):
            break
        total_ok = np.allclose(got.sum(0) + ln.bias.double().numpy(), ln(parts.sum(0)).double().numpy(), atol=1e-4)
        if total_ok:
            res.ok(f"trial {trial + 1}: the terms plus beta add up to LN(sum of parts)")
        else:
            res.fail(f"trial {trial + 1}: the terms plus beta do not add up to LN(sum of parts).")
        if _close(got, want, atol=1e-5):
            res.ok(f"trial {trial + 1}: every term matches the reference decomposition")
            continue
        if total_ok:
            res.fail("the sum is right but the individual terms are not: the split is not the linear one.")
        else:
            _report_diff(res, got, want, lambda ix: f"part {ix[0]}, dim {ix[1]}", 1e-5)
        std_sum = torch.sqrt(parts.sum(0).var(unbiased=False) + ln.eps)
        own_std = torch.sqrt(parts.var(-1, unbiased=False, keepdim=True) + ln.eps)
        centred = parts - parts.mean(-1, keepdim=True)
        _diagnose(res, got, {
            "beta was added to every term (leave it out; it is added once at the end).":
                (want_t + ln.bias).double().numpy(),
            "each part was divided by its own standard deviation; use the std of the sum.":
                (ln.weight * centred / own_std).double().numpy(),
            "the parts were not centred (subtract each part's own mean).":
                (ln.weight * parts / std_sum).double().numpy(),
            "gamma (ln.weight) is missing.": (centred / std_sum).double().numpy(),
            "each part was passed through the full LayerNorm (LN is not linear).":
                ln(parts).double().numpy(),
        }, atol=1e-5, want=want)
        break
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 4. one row of Value Zeroing
# ------------------------------------------------------------------------------------------

def _cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    an = a / a.norm(dim=-1, keepdim=True)
    bn = b / b.norm(dim=-1, keepdim=True)
    return 0.5 * (an - bn).norm(dim=-1) ** 2  # = 1 - cos, without cancellation


@torch.no_grad()
def reference_value_zeroing_row(layer, hidden: torch.Tensor, i: int, *, normalize: bool = True,
                                zero: str = "value", similarity: bool = False) -> torch.Tensor:
    """Row ``i`` of Value Zeroing for one BERT layer, by the definition (one forward per token).

    For each token j: zero the value vector of j in every head (bias included: the output of
    ``attention.self.value`` at position j), re-run the layer on the same input, and take the
    cosine distance between token i's new and original outputs. The row is normalised to sum
    to 1 (the diagonal is kept). ``zero="input"`` / ``similarity=True`` / ``normalize=False``
    produce the usual mistakes, used to diagnose the reader's answer.
    """
    original = layer(hidden)[0, i]
    n = hidden.shape[1]
    row = torch.empty(n, dtype=hidden.dtype)
    for j in range(n):
        if zero == "value":
            def hook(_module, _inp, out, j=j):
                out = out.clone()
                out[:, j] = 0.0
                return out

            handle = parts_of_layer(layer, "bert", _heads(layer)).value.register_forward_hook(hook)
            try:
                changed = layer(hidden)[0, i]
            finally:
                handle.remove()
        elif zero == "input":
            h = hidden.clone()
            h[:, j] = 0.0
            changed = layer(h)[0, i]
        else:
            raise ValueError(zero)
        dist = _cosine_distance(changed, original)
        row[j] = 1.0 - dist if similarity else dist
    if normalize:
        row = row / row.sum()
    return row


@torch.no_grad()
def check_value_zeroing_row(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(layer, hidden, i) -> (n,)``: row ``i`` of Value Zeroing at one BERT layer.

    ``layer`` is a ``BertLayer`` of a tiny random model (call it as ``layer(hidden)``; it
    returns the (1, n, d) output), ``hidden`` its input (1, n, d). Zero the value vectors of one
    token j at a time (all heads, bias included), re-run the layer, and score j by the cosine
    distance between token i's changed and original outputs; normalise the row to sum to 1.
    """
    res = CheckResult("check_value_zeroing_row")
    # float64: the distances are small, and 1 - cos in float32 would blur them
    model = _tiny_bert(seed, dtype=torch.float64)
    _, out = _tiny_inputs(model, n=6, seed=seed)
    cases = [(0, 0), (1, 3), (1, 5)]
    for layer_idx, i in cases:
        layer = layer_list(model)[layer_idx]
        hidden = out.hidden_states[layer_idx]
        want_t = reference_value_zeroing_row(layer, hidden, i)
        want = want_t.double().numpy()
        got = _call(res, student_fn, layer, hidden.clone(), i)
        matched = _check_normalised_row(res, got, want, f"layer {layer_idx + 1}, row {i}", "", 1e-4)
        if matched is None:
            break
        if matched:
            continue
        _diagnose(res, got, {
            "the row is not normalised to sum to 1.":
                reference_value_zeroing_row(layer, hidden, i, normalize=False).double().numpy(),
            "cosine similarity was used instead of cosine distance (1 - cos).":
                reference_value_zeroing_row(layer, hidden, i, similarity=True).double().numpy(),
            "the input vector x_j was zeroed instead of its value vector; that also changes every "
            "query and key, so the attention weights shift.":
                reference_value_zeroing_row(layer, hidden, i, zero="input").double().numpy(),
        }, atol=1e-4, want=want)
        break
    return res.finish(verbose)
