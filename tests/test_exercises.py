"""The exercise checkers accept correct answers and diagnose typical wrong ones."""
import math

import numpy as np
import pytest
import torch

import cmix_course as ex
from cmixlib.models.arch import layer_list
from tolerances import rounding_atol


# ----- attention weights -----------------------------------------------------------------
def good_attention(layer, hidden):
    sa = layer.attention.self
    x = hidden[0]
    n, d = x.shape
    h = sa.num_attention_heads
    dh = d // h
    q = sa.query(x).view(n, h, dh).transpose(0, 1)
    k = sa.key(x).view(n, h, dh).transpose(0, 1)
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)


def unscaled_attention(layer, hidden):
    sa = layer.attention.self
    x = hidden[0]
    n, d = x.shape
    h = sa.num_attention_heads
    q = sa.query(x).view(n, h, d // h).transpose(0, 1)
    k = sa.key(x).view(n, h, d // h).transpose(0, 1)
    return torch.softmax(q @ k.transpose(-1, -2), dim=-1)


def test_attention_checker(capsys):
    assert ex.check_attention_probs(good_attention)
    res = ex.check_attention_probs(unscaled_attention)
    assert not res
    assert any("sqrt(d_head)" in m for m in res.messages)
    res = ex.check_attention_probs(lambda layer, hidden: good_attention(layer, hidden).transpose(-1, -2))
    assert not res and any("query axis" in m or "transposed" in m for m in res.messages)
    assert "NOT correct" in capsys.readouterr().out
    res = ex.check_attention_probs(lambda layer, hidden: None)
    assert not res and res.status == "not attempted" and "returned None" in res.messages[0]
    assert "not attempted yet" in capsys.readouterr().out


# ----- LayerNorm decomposition -------------------------------------------------------------
def good_ln(parts, ln):
    total = parts.sum(0)
    std = torch.sqrt(total.var(-1, unbiased=False) + ln.eps)
    return ln.weight * (parts - parts.mean(-1, keepdim=True)) / std


def test_ln_checker():
    assert ex.check_ln_decomposition(good_ln, verbose=False)
    res = ex.check_ln_decomposition(lambda p, ln: good_ln(p, ln) + ln.bias, verbose=False)
    assert not res and any("beta was added" in m for m in res.messages)
    res = ex.check_ln_decomposition(lambda p, ln: ln(p), verbose=False)
    assert not res and any("not linear" in m for m in res.messages)

    def raises(p, ln):
        raise NotImplementedError

    res = ex.check_ln_decomposition(raises, verbose=False)
    assert not res and res.status == "not attempted" and "NotImplementedError" in res.messages[0]


def test_ln_reference_is_exact():
    from cmixlib import random_model

    ln = random_model("bert", hidden=32, layers=1, heads=4).encoder.layer[0].output.LayerNorm
    parts = torch.randn(4, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        terms = ex.reference_ln_decomposition(parts, ln)
        x = parts.sum(0)
        s = torch.sqrt(x.double().var(unbiased=False) + ln.eps)
        # per coordinate j: the errors of the 4-part sum and of the mean (<= max|x|) scaled by |gamma_j| / s,
        # the relative error of s times |term|, plus beta
        scale = float((ln.weight.abs().double() * (parts.abs().sum(0).double() + x.abs().max()) / s
                       + ln.bias.abs()).max())
        # rule 1: chains of 2 d + 10 roundings (4-part sum, mean and variance over d = 32, sqrt, divide,
        # gamma, the 4-term sum of the parts, beta) on both sides; scale from the data above
        torch.testing.assert_close(terms.sum(0) + ln.bias, ln(x), rtol=0, atol=rounding_atol(2 * 32 + 10, scale))


# ----- rollout -----------------------------------------------------------------------------
def good_rollout(maps, add_identity):
    m = np.asarray(maps, dtype=float)
    if add_identity:
        m = m + np.eye(m.shape[-1])
    m = m / m.sum(-1, keepdims=True)
    out = [m[0]]
    for k in range(1, len(m)):
        out.append(m[k] @ out[-1])
    return np.stack(out)


def wrong_order_rollout(maps, add_identity):
    m = np.asarray(maps, dtype=float)
    if add_identity:
        m = m + np.eye(m.shape[-1])
    m = m / m.sum(-1, keepdims=True)
    out = [m[0]]
    for k in range(1, len(m)):
        out.append(out[-1] @ m[k])
    return np.stack(out)


def test_rollout_checker():
    assert ex.check_rollout(good_rollout, verbose=False)
    res = ex.check_rollout(wrong_order_rollout, verbose=False)
    assert not res and any("wrong order" in m for m in res.messages)
    res = ex.check_rollout(lambda maps, add_identity: good_rollout(maps, add_identity)[-1], verbose=False)
    assert not res and any("last layer" in m for m in res.messages)
    res = ex.check_rollout(lambda maps, add_identity: good_rollout(maps, False), verbose=False)
    assert not res and any("identity was not added" in m for m in res.messages)


def test_reference_rollout_matches_library():
    from cmixlib.methods.aggregation import rollout

    from cmix_course.method_exercises import random_maps  # the checker's input maps

    maps = random_maps(3, 5, 0)
    np.testing.assert_allclose(ex.reference_rollout(maps, True), rollout(maps, add_identity=True))
    np.testing.assert_allclose(good_rollout(maps, True), rollout(maps, add_identity=True), atol=1e-12)


# ----- Value Zeroing -----------------------------------------------------------------------
def good_vz_row(layer, hidden, i):
    with torch.no_grad():
        original = layer(hidden)[0, i]
        scores = []
        for j in range(hidden.shape[1]):
            def hook(mod, inp, out):
                out = out.clone()
                out[:, j] = 0
                return out
            h = layer.attention.self.value.register_forward_hook(hook)
            changed = layer(hidden)[0, i]
            h.remove()
            scores.append(1 - torch.cosine_similarity(changed, original, dim=0))
        s = torch.stack(scores)
        return s / s.sum()


def test_value_zeroing_checker():
    assert ex.check_value_zeroing_row(good_vz_row, verbose=False)
    res = ex.check_value_zeroing_row(lambda l, h, i: good_vz_row(l, h, i) * 3, verbose=False)
    assert not res and any("normalise it" in m for m in res.messages)

    def zero_input(layer, hidden, i):
        return ex.reference_value_zeroing_row(layer, hidden, i, zero="input")

    res = ex.check_value_zeroing_row(zero_input, verbose=False)
    assert not res and any("input vector" in m for m in res.messages)


def test_value_zeroing_reference_matches_library():
    import cmixlib

    model = cmixlib.random_model("bert", hidden=32, layers=2, heads=4, dtype=torch.float64)
    ids = torch.randint(5, 100, (1, 6), generator=torch.Generator().manual_seed(3))
    maps = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=["value_zeroing"])["value_zeroing"]
    with torch.no_grad():
        hs = model(ids, output_hidden_states=True).hidden_states
    for layer_idx in range(2):
        for i in range(6):
            row = ex.reference_value_zeroing_row(layer_list(model)[layer_idx], hs[layer_idx], i)
            np.testing.assert_allclose(maps[layer_idx, i], row.numpy(), rtol=1e-9, atol=1e-12)   # float64


# ----- N-Enc, ALTI row, gradient x input (chapters 5, 6, 8) -------------------------------
def _states_and_ln2_inputs(arch="bert"):
    """Layer states of a tiny random model and the real LN2 input of each layer (by a hook)."""
    import cmixlib
    from cmixlib.forward.encoder import (encoder_layers, iter_sentences, layer_states,
                                         run_and_capture)

    model = cmixlib.random_model(arch, dtype=torch.float64, seed=4)
    ids = torch.randint(5, 100, (1, 6), generator=torch.Generator().manual_seed(4))
    mods = encoder_layers(model)
    q = [None] * len(mods)
    handles = [m.ln2.register_forward_pre_hook(lambda mod, inp, k=k: q.__setitem__(k, inp[0][0].detach()))
               for k, m in enumerate(mods)]
    try:
        cap = run_and_capture(model, ids, torch.ones_like(ids))
    finally:
        for h in handles:
            h.remove()
    return layer_states(cap, mods, 0, iter_sentences(cap)[0]), q, mods


@pytest.mark.parametrize("arch", ["bert", "distilbert"])
def test_nenc_and_alti_references_match_the_library(arch):
    from cmixlib.methods import norms

    states, q, mods = _states_and_ln2_inputs(arch)
    for st, qk, m in zip(states, q, mods):
        ref = ex.reference_nenc(st.ln1_vectors, qk, m.ln2)
        assert torch.allclose(ref, norms.globenc_layer(st), rtol=1e-9, atol=1e-12)
        alti = norms.alti_layer(st)
        for i in range(alti.shape[0]):
            row = ex.reference_alti_row(st.ln1_vectors[i], st.ln1_output[i])
            assert torch.allclose(row, alti[i] / alti[i].sum(), rtol=1e-9, atol=1e-12)


def test_nenc_checker():
    good = lambda T, q, ln2: ex.reference_nenc(T, q, ln2)  # noqa: E731
    assert ex.check_nenc(good, verbose=False)

    def scale_of_y(T, q, ln2):
        return ex.reference_nenc(T, T.sum(1), ln2)

    res = ex.check_nenc(scale_of_y, verbose=False)
    assert not res and any("std of y_i" in m for m in res.messages)
    res = ex.check_nenc(lambda T, q, ln2: good(T, q, ln2) / good(T, q, ln2).sum(-1, keepdim=True), verbose=False)
    assert not res and any("rows were normalised" in m for m in res.messages)
    res = ex.check_nenc(lambda T, q, ln2: good(T, q, ln2)[0], verbose=False)
    assert not res and any("shape" in m for m in res.messages)


def test_alti_row_checker():
    assert ex.check_alti_row(lambda T, y: ex.reference_alti_row(T, y), verbose=False)
    for kwargs, phrase in [({"clamp": False}, "clamp"), ({"p": 2}, "L2 norms"), ({"normalize": False}, "normalise")]:
        res = ex.check_alti_row(lambda T, y: ex.reference_alti_row(T, y, **kwargs), verbose=False)
        assert not res and any(phrase in m for m in res.messages), (kwargs, res.messages)
    res = ex.check_alti_row(lambda T, y: None, verbose=False)
    assert not res and any("returned None" in m for m in res.messages)


def test_grad_x_input_reference_matches_the_library():
    import cmixlib
    from cmixlib import gradients as G

    model = cmixlib.random_model("bert", task="mlm", dtype=torch.float64, seed=2)
    ids = torch.randint(5, 100, (1, 7), generator=torch.Generator().manual_seed(2))
    target = G.MLMTarget(position=3, target_id=11, foil_id=17)
    lib = G.grad_x_input_l2(model, ids, target)
    np.testing.assert_allclose(ex.reference_grad_x_input(model, ids, 3, 11, 17), lib, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ex.reference_grad_x_input(model, ids, 3, 11, 17, reduce="grad"),
                               G.grad_l2(model, ids, target), rtol=1e-9, atol=1e-12)


def test_grad_x_input_checker():
    assert ex.check_grad_x_input(lambda *a: ex.reference_grad_x_input(*a), verbose=False)
    for kwargs, phrase in [({"objective": "target"}, "z_t alone"), ({"reduce": "grad"}, "without multiplying"),
                           ({"reduce": "dot"}, "summed over dimensions"), ({"where": "embeddings"}, "whole embedding"),
                           ({"objective": "prob"}, "softmax probability")]:
        res = ex.check_grad_x_input(lambda *a: ex.reference_grad_x_input(*a, **kwargs), verbose=False)
        assert not res and any(phrase in m for m in res.messages), (kwargs, res.messages)
