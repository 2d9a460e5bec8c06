"""The LayerNorm inputs captured from the model's forward pass (:func:`run_and_capture`) against
the decomposition's own recomputation, on float64 random models of every family, and the
decomposition identities that use them (LN2's vectors sum to the LN2 output minus its
unattributed part).

Tolerance: rule 1 of tests/tolerances.py in float64. Both sides are the same short computation
(a few hundred roundings of u = 1.1e-16 per value, values of order 1-10) done in another order
(the model on the padded batch, the library on one cropped sentence), so they agree to ~1e-14
relative; 1e-12 leaves room without hiding a wrong term (errors of order 1e-2 and more).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

import cmixlib
from cmixlib import norms
from cmixlib.encoder import (_as_slice, encoder_layers, iter_sentences, layer_norm_linear,
                             layer_norm_scale, layer_states, run_and_capture)

ARCHS = ["bert", "roberta", "electra", "distilbert", "mpnet"]
REL = 1e-12


def close(got, want, what):
    got, want = got.detach(), want.detach()
    scale = max(1.0, float(want.abs().max()))
    err = float((got - want).abs().max())
    assert err <= REL * scale, f"{what}: max |diff| {err:.3e} > {REL:.0e} * {scale:.3g}"


def padded_capture(arch):
    """A float64 random model of ``arch`` and the capture of a padded batch of two sentences."""
    model = cmixlib.random_model(arch, dtype=torch.float64, seed=3)
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(5, 100, (2, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0                                  # the second sentence: 6 tokens, 3 padding
    return model, run_and_capture(model, ids, mask)


def uncaptured(st):
    """The same layer state without the captured LayerNorm inputs (the fallback path)."""
    return dataclasses.replace(st, captured_ln1_input=None, captured_ln2_input=None,
                               captured_value=None, _cache={})


@pytest.mark.parametrize("arch", ARCHS)
def test_captured_ln_inputs_equal_recomputed(arch):
    model, cap = padded_capture(arch)
    mods = encoder_layers(model)
    assert cap.ln1_inputs is not None and cap.ln2_inputs is not None and cap.values is not None
    for b, keep in enumerate(iter_sentences(cap)):
        for k, st in enumerate(layer_states(cap, mods, b, keep)):
            assert st.captured_ln2_input is not None and st.ln2_input is st.captured_ln2_input
            assert st.ln1_input is st.captured_ln1_input
            close(st.captured_ln1_input, st.recomputed_ln1_input(), f"p, sentence {b} layer {k}")
            close(st.captured_ln2_input, st.recomputed_ln2_input(), f"u, sentence {b} layer {k}")
            close(st.captured_value, st.mods.value(st.x), f"v, sentence {b} layer {k}")
            no_v = dataclasses.replace(st, captured_value=None, _cache={})
            close(st.head_vectors, no_v.head_vectors, f"f(x), sentence {b} layer {k}")
            old = uncaptured(st)                     # built without them: recomputed, as before
            close(old.ln2_input, st.ln2_input, f"fallback u, sentence {b} layer {k}")
            close(old.ln1_input, st.ln1_input, f"fallback p, sentence {b} layer {k}")
            # the model's own LN2 output is the layer output
            assert torch.equal(st.mods.ln2(st.ln2_input), st.o)
            close(st.recompute_output(), st.o, f"recomputed output, sentence {b} layer {k}")


@pytest.mark.parametrize("arch", ARCHS)
def test_ln2_vectors_sum_to_ln2_output_minus_unattributed(arch):
    """sum_j T'_i(x_j) + gamma2 C(c_i + FFN(y_i)) / sigma(u_i) + beta2 = o_i, with
    c_i = gamma1 C(b_O) / sigma(p_i) + beta1 the LN1 part attributed to nobody (C: centring)."""
    model, cap = padded_capture(arch)
    mods = encoder_layers(model)
    for b, keep in enumerate(iter_sentences(cap)):
        for k, st in enumerate(layer_states(cap, mods, b, keep)):
            for state, label in ((st, "captured"), (uncaptured(st), "recomputed")):
                m = state.mods
                s1 = layer_norm_scale(m.ln1, state.ln1_input)
                c = layer_norm_linear(m.ln1, m.out.bias.expand_as(state.x), s1) + m.ln1.bias
                y = state.ln1_output
                ffn = m.ffn_out(m.act(m.ffn_in(y)))
                s2 = layer_norm_scale(m.ln2, state.ln2_input)
                total = state.ln2_vectors.sum(dim=1) + layer_norm_linear(m.ln2, c + ffn, s2) + m.ln2.bias
                close(total, st.o, f"{label}, sentence {b} layer {k}")
                close(state.ln1_vectors.sum(dim=1) + c, y, f"LN1 {label}, sentence {b} layer {k}")


@pytest.mark.parametrize("arch", ARCHS)
def test_vectors_from_f_equal_vectors_from_z(arch):
    """T built from F with z's diagonal (the fast path) equals T built from z; N-Res from N and
    ||z_ii|| equals ||z||; rows-restricted states equal the full ones on their rows."""
    model, cap = padded_capture(arch)
    mods = encoder_layers(model)
    keep = iter_sentences(cap)[1]
    rows = torch.tensor([0, 2, 5])
    for k, (st, sr) in enumerate(zip(layer_states(cap, mods, 1, keep),
                                     layer_states(cap, mods, 1, keep, rows=rows))):
        s1 = layer_norm_scale(st.mods.ln1, st.ln1_input)
        close(st.ln1_vectors, layer_norm_linear(st.mods.ln1, st.res_vectors, s1[:, None, :]),
              f"T, layer {k}")
        fresh = uncaptured(st)
        close(norms.attn_norm_res(fresh), torch.linalg.vector_norm(st.res_vectors, dim=-1),
              f"N-Res, layer {k}")
        close(sr.ln2_vectors, st.ln2_vectors[rows], f"rows of T', layer {k}")
        close(norms.attn_norm_res(sr), norms.attn_norm_res(st)[rows], f"rows of N-Res, layer {k}")
        close(norms.w_res(sr), norms.w_res(st)[rows], f"rows of W-Res, layer {k}")


def test_cropping_by_slice_equals_indexing():
    model, cap = padded_capture("bert")
    mods = encoder_layers(model)
    assert _as_slice(torch.arange(2, 6)) == slice(2, 6)
    assert _as_slice(torch.tensor([0, 2, 3])) is None
    assert _as_slice(torch.tensor([-2, -1])) is None
    for b, keep in enumerate(iter_sentences(cap)):
        for k, st in enumerate(layer_states(cap, mods, b, keep)):
            assert torch.equal(st.x, cap.inputs[k][b, keep])
            assert torch.equal(st.o, cap.outputs[k][b, keep])
            assert torch.equal(st.alpha, cap.attentions[k][b][:, keep][:, :, keep])
            assert torch.equal(st.captured_ln2_input, cap.ln2_inputs[k][b, keep])
            assert torch.equal(st.captured_value, cap.values[k][b, keep])
    # a state is a copy: changing it leaves the capture alone
    st = layer_states(cap, mods, 0, iter_sentences(cap)[0])[0]
    before = cap.inputs[0].clone()
    st.x.add_(1.0)
    assert torch.equal(cap.inputs[0], before)
