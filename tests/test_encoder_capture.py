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
from cmixlib.methods import norms
from cmixlib.forward.encoder import (_as_slice, encoder_layers, iter_sentences, layer_norm_linear,
                                     layer_norm_scale, layer_output, layer_states,
                                     record_layer_calls, run_and_capture)

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


# --------------------------------------------------------------------------- named capture points
# The HF module of each point, typed here from the transformers source of each family (not read
# from cmixlib.models.arch), so that a wrong path in arch or points cannot agree with itself.
from cmixlib.forward import points as P                      # noqa: E402
from cmixlib.forward.decoder import random_decoder           # noqa: E402

_BERT_PATHS = {"layers": "encoder.layer", "value": "attention.self.value",
               "out": "attention.output.dense", "ln1": "attention.output.LayerNorm",
               "ffn_out": "output.dense", "ln2": "output.LayerNorm"}
HF_PATHS = {"bert": _BERT_PATHS, "roberta": _BERT_PATHS, "electra": _BERT_PATHS,
            "mpnet": {"layers": "encoder.layer", "value": "attention.attn.v",
                      "out": "attention.attn.o", "ln1": "attention.LayerNorm",
                      "ffn_out": "output.dense", "ln2": "output.LayerNorm"},
            "distilbert": {"layers": "transformer.layer", "value": "attention.v_lin",
                           "out": "attention.out_lin", "ln1": "sa_layer_norm",
                           "ffn_out": "ffn.lin2", "ln2": "output_layer_norm"}}


def _get(obj, path):
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def hooked_reference(model, arch, ids):
    """Every capture point of one sentence by plain forward hooks on the HF modules and
    ``output_hidden_states`` / ``output_attentions`` of a second, ordinary forward pass."""
    paths = HF_PATHS[arch]
    layers = list(_get(model.base_model, paths["layers"]))
    got = [dict() for _ in layers]
    handles = []
    for k, layer in enumerate(layers):
        def out_hook(name, k=k):
            return lambda m, a, o: got[k].__setitem__(name, (o[0] if isinstance(o, tuple) else o)[0])

        def in_hook(name, k=k):
            return lambda m, a: got[k].__setitem__(name, a[0][0])
        handles += [_get(layer, paths["value"]).register_forward_hook(out_hook("values")),
                    _get(layer, paths["out"]).register_forward_pre_hook(in_hook("mixed_values")),
                    _get(layer, paths["out"]).register_forward_hook(out_hook("attn_out")),
                    _get(layer, paths["ln1"]).register_forward_pre_hook(in_hook("resid_mid")),
                    _get(layer, paths["ln1"]).register_forward_hook(out_hook("ln1_out")),
                    _get(layer, paths["ffn_out"]).register_forward_hook(out_hook("mlp_out")),
                    _get(layer, paths["ln2"]).register_forward_pre_hook(in_hook("ln2_in"))]
    try:
        with torch.no_grad():
            out = model.base_model(input_ids=ids[None], output_hidden_states=True,
                                   output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    H = model.config.num_attention_heads if arch != "distilbert" else model.config.n_heads
    for k, g in enumerate(got):
        n = g["values"].shape[0]
        g["values"] = g["values"].reshape(n, H, -1).permute(1, 0, 2)          # (H, n, d_h)
        g["mixed_values"] = g["mixed_values"].reshape(n, H, -1).permute(1, 0, 2)
        w_o = _get(layers[k], paths["out"]).weight                             # (d, H d_h)
        dh = g["values"].shape[-1]
        g["head_out"] = torch.stack([g["values"][h] @ w_o[:, h * dh:(h + 1) * dh].T
                                     for h in range(H)])                        # (H, n, d)
        g["resid_in"] = out.hidden_states[k][0]
        g["resid_out"] = out.hidden_states[k + 1][0]
        g["attn_weights"] = out.attentions[k][0]
        g["ln1_in"] = g["resid_mid"]
    return got, out.hidden_states[0][0], layers, paths


@pytest.mark.parametrize("arch", ARCHS)
def test_every_capture_point_equals_an_independent_hook(arch):
    model = cmixlib.random_model(arch, dtype=torch.float64, seed=5)
    ids = torch.randint(5, 100, (7,), generator=torch.Generator().manual_seed(6))
    cap = cmixlib.capture(model, {"input_ids": ids})
    ref, emb, _, _ = hooked_reference(model, arch, ids)
    assert cap.kind == "encoder" and len(cap) == len(ref)
    assert set(cap.layer_points) == set(P.ENCODER_LAYER_POINTS) | set(P.ENCODER_ALIASES)
    for k, want in enumerate(ref):
        for name in cap.layer_points:
            got = cap[k, name]
            assert got.shape == want[name].shape, (arch, k, name)
            close(got, want[name], f"{arch} layer {k} {name}")
            assert torch.equal(got, cap.layer(k)[name])
    close(cap["embeddings"], emb, f"{arch} embeddings")
    assert torch.equal(cap.input_ids, ids)


@pytest.mark.parametrize("arch", ARCHS)
def test_capture_points_add_up_to_the_layer_output(arch):
    """Per family: sum_j F_ij + b_O = a_i; p = x + a; y = LN1(p); u = y + FFN(y); o = LN2(u); and
    each layer's resid_out is the next layer's resid_in (the decomposition identity)."""
    model = cmixlib.random_model(arch, dtype=torch.float64, seed=7)
    ids = torch.randint(5, 100, (6,), generator=torch.Generator().manual_seed(8))
    cap = cmixlib.capture(model, {"input_ids": ids})
    _, _, layers, paths = hooked_reference(model, arch, ids)
    for k, layer in enumerate(layers):
        b_o = _get(layer, paths["out"]).bias
        parts = torch.einsum("hij,hjd->id", cap[k, "attn_weights"], cap[k, "head_out"]) + b_o
        close(parts, cap[k, "attn_out"], f"{arch} layer {k}: sum_j F_ij + b_O = a")
        mixed = cap[k, "attn_weights"] @ cap[k, "values"]                  # eq. (3), (H, n, d_h)
        close(mixed, cap[k, "mixed_values"], f"{arch} layer {k}: head = sum_j alpha v")
        close(cap[k, "resid_in"] + cap[k, "attn_out"], cap[k, "resid_mid"], f"{arch} {k}: p")
        close(_get(layer, paths["ln1"])(cap[k, "ln1_in"]), cap[k, "ln1_out"], f"{arch} {k}: y")
        close(cap[k, "ln1_out"] + cap[k, "mlp_out"], cap[k, "ln2_in"], f"{arch} {k}: u")
        close(_get(layer, paths["ln2"])(cap[k, "ln2_in"]), cap[k, "resid_out"], f"{arch} {k}: o")
        if k + 1 < len(layers):
            assert torch.equal(cap[k, "resid_out"], cap[k + 1, "resid_in"])
    assert torch.equal(cap["embeddings"], cap[0, "resid_in"])


def test_a_wrong_point_would_be_caught():
    """The comparison can fail: a point read from the wrong module (LN1's output given as the
    attention output) differs from the hook by far more than the tolerance."""
    model = cmixlib.random_model("bert", dtype=torch.float64, seed=5)
    ids = torch.arange(5, 12)
    cap = cmixlib.capture(model, {"input_ids": ids})
    ref, _, _, _ = hooked_reference(model, "bert", ids)
    with pytest.raises(AssertionError):
        close(cap[0, "ln1_out"], ref[0]["attn_out"], "swapped")
    with pytest.raises(AssertionError):
        close(cap[0, "head_out"].sum(0), ref[0]["attn_out"], "attention weights left out")


def test_batched_capture_equals_one_sentence_captures():
    """capture_encoder on a padded batch gives each sentence the points it has alone."""
    model = cmixlib.random_model("roberta", dtype=torch.float64, seed=3)
    ids = torch.randint(5, 100, (2, 8), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    _, states, points = P.capture_encoder(model, ids, mask)
    both = cmixlib.capture(model, {"input_ids": ids, "attention_mask": mask})
    assert isinstance(both, list) and len(both) == 2
    for b in range(2):
        alone = cmixlib.capture(model, {"input_ids": ids[b][mask[b].bool()]})
        close(points[b]["embeddings"], alone["embeddings"], f"embeddings {b}")
        assert torch.equal(both[b].input_ids, alone.input_ids)
        # the additive mask the layers received: 0 on real tokens, the minimum on padding
        m = both[b]["attn_mask"]
        assert m.shape == (8,) and torch.all(m[mask[b].bool()] == 0)
        assert torch.all(m[~mask[b].bool()] == torch.finfo(m.dtype).min)
        for k, st in enumerate(states[b]):
            for name in P.ENCODER_LAYER_POINTS:
                close(st[name], alone[k, name], f"sentence {b} layer {k} {name}")
                close(both[b][k, name], alone[k, name], f"capture of a list, {b} {k} {name}")


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_capture_of_a_decoder_has_the_same_api(arch):
    model = random_decoder(arch, dtype=torch.float64)
    ids = torch.arange(3, 9)
    cap = cmixlib.capture(model, {"input_ids": ids})
    assert cap.kind == "decoder" and cap.layer_points == P.DECODER_LAYER_POINTS
    for k in range(len(cap)):
        for name in P.DECODER_LAYER_POINTS:
            assert torch.equal(cap[k, name], cap.raw.layers[k][name])
        close(cap[k, "resid_in"] + cap[k, "attn_out"], cap[k, "resid_mid"], f"decoder {k}: m")
        close(cap[k, "resid_mid"] + cap[k, "mlp_out"], cap[k, "resid_out"], f"decoder {k}: x'")
    assert torch.equal(cap["embeddings"], cap[0, "resid_in"])
    assert cap["logits"].shape == (6, model.config.vocab_size)
    shared = set(P.DECODER_LAYER_POINTS) & set(P.ENCODER_LAYER_POINTS)
    assert {"resid_in", "attn_weights", "values", "head_out", "attn_out", "resid_mid",
            "mlp_out", "resid_out", "ln1_out"} <= shared


def test_capture_refuses_bad_names_and_batches():
    model = cmixlib.random_model("bert", seed=1)
    cap = cmixlib.capture(model, {"input_ids": torch.arange(5, 10)})
    with pytest.raises(KeyError, match="layer points"):
        cap[0, "ln2_out"]                      # a decoder name that no encoder point has
    with pytest.raises(KeyError, match="model point"):
        cap["logits"]
    with pytest.raises(IndexError, match="0 .. 1"):
        cap.layer(2)
    with pytest.raises(KeyError, match="cap\\[layer, name\\]"):
        cap[0, "values", 1]
    with pytest.raises(cmixlib.InputError, match="input_ids"):
        cmixlib.capture(model, {"ids": torch.arange(5, 15)})


@pytest.mark.parametrize("arch", ARCHS)
def test_edited_values_is_value_zeroing(arch):
    """``edited(layer, "values", ...)`` zeroing v_j in every head equals the closed form of
    Value Zeroing, p_i - F_ij through LN1, the FFN and LN2 (cmixlib.methods.value_zeroing's batched
    form), on the layer module called as the model calls it; the hook is gone afterwards."""
    model = cmixlib.random_model(arch, dtype=torch.float64, seed=9)
    ids = torch.randint(5, 100, (6,), generator=torch.Generator().manual_seed(1))
    cap = cmixlib.capture(model, {"input_ids": ids})
    st, j = cap.layer(1), 2
    m = st.mods
    args, kwargs, _ = record_layer_calls(model, ids[None])[1]  # MPNet's position bias too

    def run(layer):
        return layer_output(layer(st.x[None], *args[1:], **kwargs))[0]
    with P.edited(st, "values", lambda v: v.index_fill(1, torch.tensor([j]), 0.0)):
        changed = run(m.layer)
    y = m.ln1(st.ln1_input - st.attn_vectors[:, j])
    close(changed, m.ln2(m.ffn_out(m.act(m.ffn_in(y))) + y), f"{arch}: v_j zeroed")
    close(run(m.layer), st.o, f"{arch}: hook removed")
    bare = list(_get(model.base_model, HF_PATHS[arch]["layers"]))[1]
    with P.edited(bare, "attn_out", torch.zeros_like):       # a bare HF layer module
        no_attn = run(bare)
    y0 = m.ln1(st.x)
    close(no_attn, m.ln2(m.ffn_out(m.act(m.ffn_in(y0))) + y0), f"{arch}: attention removed")
    with pytest.raises(KeyError, match="editable"):
        with P.edited(st, "head_out", torch.zeros_like):
            pass
