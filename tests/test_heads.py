"""Per-head maps (``context_mixing(..., heads=True)``) against independent, slow references.

Definitions (cmixlib.methods.layer_math, value_zeroing, value_zeroing_decoder), head h, query i,
source j, f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h (a decoder reads u_j = LN1(x_j)):

- attention  A^h_ij = alpha^h_ij
- N          N^h_ij = ||alpha^h_ij f^h(x_j)||_2
- ALTI       c^h_ij = max(0, ||o^h_i||_1 - ||o^h_i - alpha^h_ij f^h(x_j)||_1),
             o^h_i = sum_j alpha^h_ij f^h(x_j)
- VZ         C^h_ij = 1 - cos(o_i with v^h_j zeroed in head h only, o_i), the layer re-run

The references take the model's own tensors (layer inputs, attention weights, value outputs)
from an ordinary forward pass, cast them to float64 and loop over layers, heads and tokens
with the weights; Value Zeroing re-runs the whole model with a hook that zeroes head h's slice
of token j's value (encoders) or removes alpha^h_ij v^h_j from head h's input to W_O
(decoders: with grouped-query attention a query head cannot be reached through the shared
value projection). Tolerances (tests/tolerances.py): float64 rule 1 (a priori rounding
bounds, the library and the reference starting from the same tensors); float32 rule 2 (no
worse than the same loops run in float32, against the float64 loops).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cmixlib
from cmixlib import InputError
from cmixlib.forward.decoder import random_decoder, run_decoder
from cmixlib.forward.encoder import encoder_layers
from cmixlib.methods.layer_math import HEAD_METHODS, NO_HEAD_FORM
from tolerances import U64, assert_no_worse_than_baseline, gamma, unit_roundoff

ENCODERS = ["bert", "roberta", "distilbert", "electra", "mpnet"]
DECODERS = ["llama", "gpt2"]
#: Growth factor over the a priori bound gamma_K u S (rule 1): two computations (library and
#: reference) and the few extra roundings (alpha times a norm, max, the final subtraction).
GROWTH = 4.0


def encoder_and_ids(arch, dtype, seed=0, n=6, heads=4):
    model = cmixlib.random_model(arch, dtype=dtype, seed=seed, heads=heads)
    ids = torch.randint(5, 100, (1, n), generator=torch.Generator().manual_seed(seed + 1))
    return model, ids


# --------------------------------------------------------------------------- references
@torch.no_grad()
def encoder_reference(model, ids, dt=torch.float64):
    """Per layer, by loops in ``dt`` from the model's own layer inputs and attention weights:
    alpha (H, n, n), the head vectors f (H, n, d), |f|'s bound fa (H, n, d), and the maps."""
    base = getattr(model, "base_model", model)
    out = base(input_ids=ids, output_attentions=True, output_hidden_states=True)
    layers = []
    for k, m in enumerate(encoder_layers(model)):
        x = out.hidden_states[k][0].to(dt)
        alpha = out.attentions[k][0].to(dt)
        H = m.num_heads
        n, d = x.shape
        dh = d // H
        Wv, bv = m.value.weight.to(dt), m.value.bias.to(dt)
        Wo = m.out.weight.to(dt)
        f = torch.zeros(H, n, d, dtype=dt)
        fa = torch.zeros(H, n, d, dtype=dt)    # |x||W_V| + |b_V|, then |W_O|: bound
        for h in range(H):
            sl = slice(h * dh, (h + 1) * dh)
            for j in range(n):
                v = x[j] @ Wv[sl].T + bv[sl]
                f[h, j] = v @ Wo[:, sl].T
                fa[h, j] = (x[j].abs() @ Wv[sl].T.abs() + bv[sl].abs()) @ Wo[:, sl].T.abs()
        layers.append(per_head_maps(alpha, f, fa))
    return layers


def per_head_maps(alpha, f, fa):
    """attention, N and ALTI per head by loops (in alpha's dtype), and the rounding scales
    S^h_ij."""
    H, n, _ = alpha.shape
    N = torch.zeros(H, n, n, dtype=alpha.dtype)
    alti = torch.zeros(H, n, n, dtype=alpha.dtype)
    scale = torch.zeros(H, n, n, dtype=alpha.dtype)
    for h in range(H):
        for i in range(n):
            o = sum(alpha[h, i, j] * f[h, j] for j in range(n))
            s_i = sum(alpha[h, i, j] * fa[h, j] for j in range(n)).sum()   # >= sum|terms| of o
            for j in range(n):
                t = alpha[h, i, j] * f[h, j]
                N[h, i, j] = t.norm()
                alti[h, i, j] = max(0.0, float(o.abs().sum() - (o - t).abs().sum()))
                scale[h, i, j] = s_i
    return dict(attention=alpha.numpy(), attn_norm=N.numpy(), alti_layer=alti.numpy(),
                alpha=alpha, fa=fa, scale=scale.numpy())


@torch.no_grad()
def encoder_vz_reference(model, ids):
    """(L, H, n, n) 1 - cos(o_i^(not j,h), o_i): the model re-run with head h's slice of token
    j's value output (bias included) zeroed in layer k."""
    mods = encoder_layers(model)
    base = getattr(model, "base_model", model)

    def run(k=None, h=None, j=None):
        got = {}
        hooks = [mods[k0].layer.register_forward_hook(
            lambda mod, a, o, k0=k0: got.__setitem__(k0, o[0] if isinstance(o, tuple) else o))
            for k0 in range(len(mods))]
        if k is not None:
            dh = mods[k].value.out_features // mods[k].num_heads

            def zero(mod, a, o):
                o = o.clone()
                o[:, j, h * dh:(h + 1) * dh] = 0.0
                return o
            hooks.append(mods[k].value.register_forward_hook(zero))
        try:
            base(input_ids=ids)
        finally:
            for hk in hooks:
                hk.remove()
        return got

    clean = run()
    n, L, H = ids.shape[1], len(mods), mods[0].num_heads
    ref = np.zeros((L, H, n, n))
    for k in range(L):
        for h in range(H):
            for j in range(n):
                pert = run(k, h, j)[k][0].double()
                ref[k, h, :, j] = (1 - F.cosine_similarity(pert, clean[k][0].double(), dim=-1)).numpy()
    return ref


@torch.no_grad()
def decoder_reference(model, ids, dt=torch.float64):
    """Per layer, from the model's own captured attention weights and value outputs (hooks),
    by loops in float64: query head h reads key-value head g(h) = h // (H / KV)."""
    cap = run_decoder(model, ids)
    layers = []
    for st in cap.layers:
        p = st.parts
        H, KV, dh = p.num_heads, p.num_kv_heads, p.head_dim
        alpha = st.attn_weights.to(dt)
        raw = st.raw_values.to(dt)                         # (n, KV dh), the model's values
        Wo = p.w_o.to(dt)                                  # (d, H dh)
        n, d = raw.shape[0], Wo.shape[0]
        f = torch.zeros(H, n, d, dtype=dt)
        fa = torch.zeros(H, n, d, dtype=dt)
        for h in range(H):
            g = h // (H // KV)
            for j in range(n):
                v = raw[j, g * dh:(g + 1) * dh]
                f[h, j] = Wo[:, h * dh:(h + 1) * dh] @ v
                fa[h, j] = Wo[:, h * dh:(h + 1) * dh].abs() @ v.abs()
        layers.append(per_head_maps(alpha, f, fa))
    return cap, layers


@torch.no_grad()
def decoder_vz_reference(model, ids, cap):
    """(L, H, n, n) 1 - cos(x'_i^(not j,h), x'_i), 0 above the diagonal: the model re-run with
    alpha^h_ij v^h_j removed from head h's slice of the input to W_O in layer k."""
    parts = [st.parts for st in cap.layers]

    def run(k=None, h=None, j=None):
        got = {}
        hooks = [p.layer.register_forward_hook(
            lambda mod, a, o, k0=k0: got.__setitem__(k0, o[0] if isinstance(o, tuple) else o))
            for k0, p in enumerate(parts)]
        if k is not None:
            st, p = cap.layers[k], parts[k]
            dh, g = p.head_dim, h // (p.num_heads // p.num_kv_heads)
            v = st.raw_values[j, g * dh:(g + 1) * dh]
            a = st.attn_weights[h, :, j]

            def remove(mod, args):
                z = args[0].clone()
                z[0, :, h * dh:(h + 1) * dh] -= a[:, None] * v[None]
                return (z, *args[1:])
            hooks.append(p.out.register_forward_pre_hook(remove))
        try:
            model(input_ids=ids.reshape(1, -1), use_cache=False)
        finally:
            for hk in hooks:
                hk.remove()
        return got

    clean = run()
    n, L, H = len(ids), len(parts), parts[0].num_heads
    ref = np.zeros((L, H, n, n))
    for k in range(L):
        for h in range(H):
            for j in range(n):
                pert = run(k, h, j)[k][0].double()
                ref[k, h, j:, j] = (1 - F.cosine_similarity(
                    pert, clean[k][0].double(), dim=-1)).numpy()[j:]
    return ref


# --------------------------------------------------------------------------- comparisons
def check_maps(got, ref_layers, dtype, d, n, base_layers=None, err=""):
    """float64: rule 1 for attention, N and ALTI: |got - ref| <= GROWTH gamma_K(u) S^h_ij per
    entry, S^h_ij >= the sum of |terms| reaching it (alpha times |x||W_V| + |b_V| through
    |W_O|, summed over the row's sources for ALTI), K the longest chain of roundings (the
    projection d + bias, W_O's d_h <= d, the sum over n sources, the norm's d coordinates).
    float32 (``base_layers``: the same loops in float32): rule 2, sharper than rule 1's
    sum-of-|terms| bound where random weights make the terms cancel."""
    K = 3 * d + n + 4
    for name in ("attention", "attn_norm", "alti_layer"):
        ref = np.stack([r[name] for r in ref_layers])
        if base_layers is not None:
            assert_no_worse_than_baseline(got[name], ref,
                                          np.stack([r[name] for r in base_layers]),
                                          err_msg=f"{err} {name}")
            continue
        if name == "attention":      # softmax of float32 scores: the same tensor, copied
            scale = np.ones_like(ref)
        elif name == "attn_norm":
            scale = np.stack([(r["alpha"][:, :, :, None] * r["fa"][:, None]).norm(dim=-1)
                              .numpy() for r in ref_layers])
        else:
            scale = np.stack([r["scale"] for r in ref_layers])
        bound = GROWTH * gamma(K, dtype) * scale + unit_roundoff(dtype) * np.abs(ref)
        diff = np.abs(got[name] - ref)
        assert (diff <= bound).all(), (f"{err} {name}: max excess "
                                       f"{(diff - bound).max():.3g}, max error {diff.max():.3g}")


@pytest.mark.parametrize("arch", ENCODERS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_encoder_heads_against_loops(arch, dtype):
    model, ids = encoder_and_ids(arch, dtype)
    got = cmixlib.context_mixing(model, None, {"input_ids": ids}, ["attention", "attn_norm",
                                 "alti_layer"], normalize=False, heads=True)
    ref = encoder_reference(model, ids)
    base = None if dtype == torch.float64 else encoder_reference(model, ids, dtype)
    assert got["attn_norm"].shape == (2, 4, 6, 6)
    check_maps(got, ref, dtype, model.config.hidden_size, ids.shape[1], base, arch)


@pytest.mark.parametrize("arch", DECODERS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_decoder_heads_against_loops(arch, dtype):
    model = random_decoder(arch, dtype=dtype)
    ids = torch.arange(3, 10)
    got = cmixlib.context_mixing(model, None, {"input_ids": ids}, ["attention", "attn_norm",
                                 "alti_layer"], normalize=False, heads=True)
    _, ref = decoder_reference(model, ids)
    base = None if dtype == torch.float64 else decoder_reference(model, ids, dtype)[1]
    assert got["alti_layer"].shape == (3, 6, 7, 7)
    check_maps(got, ref, dtype, model.config.hidden_size, len(ids), base, arch)
    for name in ("attention", "attn_norm", "alti_layer"):
        assert np.all(np.triu(got[name], 1) == 0), name


def vz_tolerance(d, d_ff, n, H):
    """float64 Value Zeroing, library against the re-run: both are chains of at most
    K = 2 d + d_ff + n H roundings to o (projection, W_O, W1, W2, the sum over sources and
    heads; LayerNorm's mean and variance are d-term sums); a relative error e of o moves
    1 - cos by at most about 2 e (the distance is at most 2, its derivative in the angle at
    most 1), and the reference's 1 - cos adds gamma_d of cancellation. Growth 16: LayerNorm
    divides by a scale that can be ~0.1 of the input's norm here."""
    return 16 * (2 * gamma(2 * d + d_ff + n * H, torch.float64) + gamma(d, torch.float64))


@pytest.mark.parametrize("arch", ENCODERS)
def test_encoder_value_zeroing_heads_against_rerun(arch):
    model, ids = encoder_and_ids(arch, torch.float64, n=5)
    got = cmixlib.context_mixing(model, None, {"input_ids": ids}, "value_zeroing",
                                 normalize=False, heads=True)["value_zeroing"]
    ref = encoder_vz_reference(model, ids)
    cfg = model.config
    d = cfg.hidden_size
    d_ff = getattr(cfg, "intermediate_size", None) or getattr(cfg, "hidden_dim")
    np.testing.assert_allclose(got, ref, rtol=0, atol=vz_tolerance(d, d_ff, 5, 4))
    assert (np.diagonal(got, axis1=-2, axis2=-1) > 0).all(), "the diagonal is kept"


def test_encoder_value_zeroing_heads_float32():
    """Rule 2: the float32 library against the float64 re-run of the same weights, the
    float32 re-run being the baseline (row-normalised: the re-run's 1 - cos cancels)."""
    m32, ids = encoder_and_ids("bert", torch.float32, n=5)
    m64, _ = encoder_and_ids("bert", torch.float64, n=5)
    got = cmixlib.context_mixing(m32, None, {"input_ids": ids}, "value_zeroing",
                                 heads=True)["value_zeroing"]
    rn = cmixlib.normalize_rows
    assert_no_worse_than_baseline(got, rn(encoder_vz_reference(m64, ids)),
                                  rn(encoder_vz_reference(m32, ids)), err_msg="VZ heads")


@pytest.mark.parametrize("arch", DECODERS)
def test_decoder_value_zeroing_heads_against_rerun(arch):
    model = random_decoder(arch, dtype=torch.float64)
    ids = torch.arange(3, 9)
    got = cmixlib.context_mixing(model, None, {"input_ids": ids}, "value_zeroing",
                                 normalize=False, heads=True)["value_zeroing"]
    cap, _ = decoder_reference(model, ids)
    ref = decoder_vz_reference(model, ids, cap)
    cfg = model.config
    d = cfg.hidden_size
    d_ff = getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * d
    np.testing.assert_allclose(got, ref, rtol=0, atol=vz_tolerance(d, d_ff, len(ids), 6))
    assert np.all(np.triu(got, 1) == 0)


def test_decoder_value_zeroing_heads_float32():
    """Rule 2 as for encoders: float32 llama (grouped-query heads) against the float64 re-run
    of the same weights, the float32 re-run the baseline (rows normalised)."""
    ids = torch.arange(3, 9)
    m32, m64 = random_decoder("llama"), random_decoder("llama", dtype=torch.float64)
    got = cmixlib.context_mixing(m32, None, {"input_ids": ids}, "value_zeroing",
                                 heads=True)["value_zeroing"]
    rn = cmixlib.normalize_rows
    exact = rn(decoder_vz_reference(m64, ids, decoder_reference(m64, ids)[0]))
    base = rn(decoder_vz_reference(m32, ids, decoder_reference(m32, ids)[0]))
    assert_no_worse_than_baseline(got, exact, base, err_msg="decoder VZ heads")


# --------------------------------------------------------------------------- relations
def test_attention_heads_average_to_the_layer_map():
    """Mean over heads of the per-head (row-normalised) attention = the existing map: both
    divide rows summing to 1 within gamma_n, and the mean adds H terms."""
    for model, ids in (encoder_and_ids("roberta", torch.float32),
                       (random_decoder("llama"), {"input_ids": torch.arange(7)})):
        ids = ids if isinstance(ids, dict) else {"input_ids": ids}
        per_head = cmixlib.context_mixing(model, None, ids, "attention", heads=True)
        layer = cmixlib.context_mixing(model, None, ids, "attention")
        n = per_head["attention"].shape[-1]
        np.testing.assert_allclose(per_head["attention"].mean(axis=1), layer["attention"],
                                   rtol=0, atol=GROWTH * gamma(2 * n + 8))


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_head_norms_bound_and_one_head_identities(family):
    """N: F_ij = sum_h alpha^h_ij f^h(x_j), so N_ij <= sum_h N^h_ij (raw maps, within rule 1);
    with one head the per-head N and Value Zeroing are the layer's (row-normalised)."""
    if family == "bert":
        model, ids = encoder_and_ids("bert", torch.float64)
        one, _ = encoder_and_ids("bert", torch.float64, heads=1)
        ids = {"input_ids": ids}
    else:
        model, one = random_decoder("llama", dtype=torch.float64), \
            random_decoder("llama", dtype=torch.float64, heads=1, kv_heads=1)
        ids = {"input_ids": torch.arange(7)}
    per_head = cmixlib.context_mixing(model, None, ids, "attn_norm", heads=True, normalize=False)
    layer = cmixlib.context_mixing(model, None, ids, "attn_norm", normalize=False)
    total = per_head["attn_norm"].sum(axis=1)
    assert (layer["attn_norm"] <= total * (1 + 1e-12)).all()
    assert (layer["attn_norm"] < total * (1 - 1e-6)).any(), "heads are not all aligned here"
    for name, asked in (("attn_norm", "attn_norm"), ("value_zeroing", "value_zeroing"),
                        ("value_zeroing", cmixlib.ValueZeroing(distance="euclidean",
                                                               standardize=True))):
        a = cmixlib.context_mixing(one, None, ids, asked, heads=True)[name]
        b = cmixlib.context_mixing(one, None, ids, asked)[name]
        assert a.shape[1] == 1
        # float64, the same terms summed in another order: rule 1 (K <= a few hundred
        # roundings of u = 1.1e-16 on row-normalised values <= 1) stays below 1e-12
        np.testing.assert_allclose(a[:, 0], b, rtol=1e-9, atol=1e-12, err_msg=f"{name} {asked!r}")


# --------------------------------------------------------------------------- API
def test_rows_final_rows_and_batches_with_heads():
    # float64: the rows computed alone and within the whole map are the same terms summed in
    # another order (thread count and blocking decide it), so they agree to a few hundred
    # roundings of 1.1e-16 on values <= 1 (float32 differed by 5e-6 at 2 threads)
    model, ids = encoder_and_ids("electra", torch.float64, n=7)
    full = cmixlib.context_mixing(model, None, {"input_ids": ids}, heads=True)
    assert sorted(full) == sorted(HEAD_METHODS)
    some = cmixlib.context_mixing(model, None, {"input_ids": ids}, heads=True, rows=[1, 4])
    last = cmixlib.context_mixing(model, None, {"input_ids": ids}, heads=True, final_rows=[0])
    for name in HEAD_METHODS:
        np.testing.assert_allclose(some[name][..., [1, 4], :], full[name][..., [1, 4], :],
                                   rtol=1e-9, atol=1e-12)
        assert np.isnan(np.delete(some[name], [1, 4], axis=-2)).all()
        np.testing.assert_allclose(last[name][:-1], full[name][:-1], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(last[name][-1, :, 0], full[name][-1, :, 0],
                                   rtol=1e-9, atol=1e-12)
        assert np.isnan(last[name][-1, :, 1:]).all()
    pad = torch.cat([ids[:, :5], torch.zeros(1, 2, dtype=ids.dtype)], 1)
    batch = cmixlib.context_mixing(model, None, {"input_ids": torch.cat([ids, pad]),
                                   "attention_mask": torch.tensor([[1] * 7, [1] * 5 + [0] * 2])},
                                   ["alti_layer", "value_zeroing"], heads=True)
    alone = cmixlib.context_mixing(model, None, {"input_ids": ids[:, :5]},
                                   ["alti_layer", "value_zeroing"], heads=True)
    for name in ("alti_layer", "value_zeroing"):
        np.testing.assert_allclose(batch[1][name], alone[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["attention_rollout", "attention_flow", "alti", "globenc",
                                  "value_zeroing_rollout"])
def test_aggregated_methods_refused_with_the_per_layer_method(name):
    model, ids = encoder_and_ids("bert", torch.float32)
    spec = cmixlib.METHODS.get(name)
    if spec is None:
        pytest.skip(f"{name} is not a registered method")
    with pytest.raises(InputError, match=f"'{spec.base}'"):
        cmixlib.context_mixing(model, None, {"input_ids": ids}, name, heads=True)


@pytest.mark.parametrize("name", sorted(set(NO_HEAD_FORM) - {"alti_logit"}))
def test_methods_without_a_head_form_refused_with_the_reason(name):
    model, ids = encoder_and_ids("bert", torch.float32)
    with pytest.raises(InputError, match="no per-head form") as err:
        cmixlib.context_mixing(model, None, {"input_ids": ids}, name, heads=True)
    assert "belongs to no head" in str(err.value)


def test_decoder_refusals_and_unchanged_default():
    model = random_decoder("gpt2")
    ids = {"input_ids": torch.arange(5)}
    with pytest.raises(InputError, match="explain_logit"):
        cmixlib.context_mixing(model, None, ids, "alti_logit", heads=True)
    with pytest.raises(InputError, match="no per-head maps"):
        cmixlib.context_mixing(model, None, ids, cmixlib.ValueZeroing(convention="inseq"),
                               heads=True)
    with pytest.raises(InputError, match="'alti_layer'"):
        cmixlib.context_mixing(model, None, ids, "alti", heads=True)
    with pytest.raises(TypeError, match="heads"):
        cmixlib.context_mixing(model, None, ids, "alti", heads="yes")
    full = cmixlib.context_mixing(model, None, ids, heads=True)
    some = cmixlib.context_mixing(model, None, ids, heads=True, rows=[2, 4])
    for name in HEAD_METHODS:
        np.testing.assert_array_equal(some[name][..., [2, 4], :], full[name][..., [2, 4], :])
        assert np.isnan(some[name][..., [0, 1, 3], :]).all()
    a = cmixlib.context_mixing(model, None, ids, ["alti", "attention"])
    b = cmixlib.context_mixing(model, None, ids, ["alti", "attention"], heads=False)
    for name in ("alti", "attention"):
        assert a[name].shape == (3, 5, 5)
        np.testing.assert_array_equal(a[name], b[name])


def test_result_aggregates_heads():
    """MixingResult.aggregate(heads=...): selected heads keep the (L, h, n, n) shape; "mean"
    gives the mean over heads, which for attention is the per-layer map; a per-layer result is
    refused."""
    import torch
    import cmixlib
    from cmixlib.validation import InputError

    model = cmixlib.random_model("bert", layers=2)
    inputs = {"input_ids": torch.tensor([[1, 5, 6, 7, 2]])}
    per_head = cmixlib.context_mixing(model, None, inputs, ["attention"], heads=True)
    layer = cmixlib.context_mixing(model, None, inputs, ["attention"])
    H = per_head["attention"].shape[1]
    assert per_head.aggregate(heads=[0, -1])["attention"].shape == (2, 2, 5, 5)
    np.testing.assert_array_equal(per_head.aggregate(heads=[-1])["attention"][:, 0],
                                  per_head["attention"][:, H - 1])
    mean = per_head.aggregate(heads="mean")
    np.testing.assert_allclose(mean["attention"], layer["attention"], rtol=0,
                               atol=8 * H * np.finfo(np.float32).eps)
    assert mean.options["heads"] is False
    with pytest.raises(InputError, match="heads=True"):
        layer.aggregate(heads="mean")
    with pytest.raises(InputError):
        per_head.aggregate(heads="max")
