"""Every context-mixing method against a slow, obvious reference on small random models.

The references below are written independently of the library: explicit loops over heads and
tokens with weights sliced by hand, re-running the model with a hook that zeroes a value vector,
explicit matrix products, networkx max-flow.
"""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cmixlib
from cmixlib.forward.encoder import encoder_layers, layer_states, run_and_capture, iter_sentences
from tolerances import assert_no_worse_than_baseline

ARCHS = ["bert", "roberta", "electra", "distilbert", "mpnet"]
DTYPES = [torch.float32, torch.float64]


def tol(dtype):
    """float64 only (float32 goes through :func:`check`): rule 1 of tests/tolerances.py, a few
    hundred roundings of u = 1.1e-16 on values <= ~10 stay below 1e-12."""
    assert dtype == torch.float64
    return dict(rtol=1e-9, atol=1e-11)


def check(got, ref, ref64=None, err_msg=""):
    """``got`` (the library) against ``ref`` (the independent reference, same model and dtype).
    float64 (``ref64`` None): :func:`tol`. float32: rule 2 of tests/tolerances.py, with the
    float64 truth ``ref64`` (the reference on the same weights in float64) and the float32
    reference as the baseline: the library may be at most BASELINE_FACTOR times worse."""
    if ref64 is None:
        got, ref = (a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a) for a in (got, ref))
        np.testing.assert_allclose(got, ref, **tol(torch.float64), err_msg=err_msg)
    else:
        assert_no_worse_than_baseline(got, ref64, ref, err_msg=err_msg)


def make(arch, dtype, seed=0, n=7):
    model = cmixlib.random_model(arch, dtype=dtype, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(5, 100, (1, n), generator=g)
    return model, ids


def hooked_forward(model, ids, layer=None, zero_token=None):
    """Plain forward that records each LN1 input/output and each layer output; optionally zeroes
    token ``zero_token``'s value vector (all heads, bias included) in layer ``layer``."""
    mods = encoder_layers(model)
    rec = {"ln1_in": {}, "ln1_out": {}, "out": {}}
    handles = []
    for k, m in enumerate(mods):
        def ln1_hook(mod, inp, out, k=k):
            rec["ln1_in"][k], rec["ln1_out"][k] = inp[0], out

        def layer_hook(mod, inp, out, k=k):
            rec["out"][k] = out[0] if isinstance(out, tuple) else out
        handles.append(m.ln1.register_forward_hook(ln1_hook))
        handles.append(m.layer.register_forward_hook(layer_hook))
        if k == layer:
            def zero(mod, inp, out):
                out = out.clone()
                out[:, zero_token, :] = 0.0
                return out
            handles.append(m.value.register_forward_hook(zero))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    return rec


@torch.no_grad()
def reference_vectors(model, ids):
    """Per layer, by explicit loops: F_ij, z_ij, T_ij (LN1), w_ij (LN2), y_i, layer input x."""
    mods = encoder_layers(model)
    cap = run_and_capture(model, ids)
    out = []
    for k, m in enumerate(mods):
        x = cap.inputs[k][0]
        alpha = cap.attentions[k][0]
        n, d = x.shape
        H = m.num_heads
        dh = d // H
        Wv, bv, Wo, bo = m.value.weight, m.value.bias, m.out.weight, m.out.bias
        Fv = torch.zeros(n, n, d, dtype=x.dtype)
        for i in range(n):
            for j in range(n):
                for h in range(H):
                    sl = slice(h * dh, (h + 1) * dh)
                    v = x[j] @ Wv[sl].T + bv[sl]
                    Fv[i, j] += alpha[h, i, j] * (v @ Wo[:, sl].T)
        z = Fv.clone()
        for i in range(n):
            z[i, i] += x[i]
        p = Fv.sum(1) + bo + x
        g1, b1, e1 = m.ln1.weight, m.ln1.bias, m.ln1.eps
        s1 = torch.sqrt(p.var(-1, unbiased=False) + e1)
        T = torch.zeros_like(z)
        for i in range(n):
            for j in range(n):
                T[i, j] = g1 * (z[i, j] - z[i, j].mean()) / s1[i]
        y = (p - p.mean(-1, keepdim=True)) / s1[:, None] * g1 + b1
        q = m.ffn_out(m.act(m.ffn_in(y))) + y
        s2 = torch.sqrt(q.var(-1, unbiased=False) + m.ln2.eps)
        W = torch.zeros_like(z)
        for i in range(n):
            for j in range(n):
                W[i, j] = m.ln2.weight * (T[i, j] - T[i, j].mean()) / s2[i]
        out.append(dict(x=x, alpha=alpha, F=Fv, z=z, T=T, W=W, y=y, p=p, s1=s1, mods=m))
    return cap, out


def rownorm(a):
    return a / a.sum(-1, keepdims=True)


def states_and_hooks(arch, dtype):
    """The library's layer states of :func:`make`'s sentence and the hooks' record of the model."""
    model, ids = make(arch, dtype)
    cap = run_and_capture(model, ids)
    return layer_states(cap, encoder_layers(model), 0, iter_sentences(cap)[0]), hooked_forward(model, ids)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_ln1_decomposition_sums_to_real_ln1_output(arch, dtype):
    def run(dt):
        states, rec = states_and_hooks(arch, dt)
        out = []
        for k, st in enumerate(states):
            m = st.mods
            s1 = torch.sqrt(rec["ln1_in"][k][0].var(-1, unbiased=False, keepdim=True) + m.ln1.eps)
            bias_part = m.ln1.weight * (m.out.bias - m.out.bias.mean()) / s1 + m.ln1.bias
            out.append((st.ln1_vectors.sum(dim=1) + bias_part, rec["ln1_out"][k][0]))
        return out
    exact = run(torch.float64) if dtype == torch.float32 else None
    for k, (total, model_out) in enumerate(run(dtype)):
        # float32: the model's own LN1 output is the baseline, the float64 model's the truth
        check(total, model_out, None if exact is None else exact[k][1], err_msg=f"layer {k}")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_recompute_matches_model(arch, dtype):
    def run(dt):
        states, rec = states_and_hooks(arch, dt)
        return [(st.ln1_input, st.recompute_output(), st.o, rec["ln1_in"][k][0], rec["out"][k][0])
                for k, st in enumerate(states)]
    exact = run(torch.float64) if dtype == torch.float32 else None
    for k, (ln1_in, recomputed, o, rec_in, rec_out) in enumerate(run(dtype)):
        truth = (None, None) if exact is None else (exact[k][3], exact[k][4])
        check(ln1_in, rec_in, truth[0], err_msg=f"LN1 input, layer {k}")
        check(recomputed, rec_out, truth[1], err_msg=f"recomputed output, layer {k}")
        check(o, rec_out, truth[1], err_msg=f"captured output, layer {k}")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_family_against_loops(arch, dtype):
    names = ["attention", "attn_norm", "attn_norm_res", "attn_norm_res_ln", "globenc_layer",
             "alti_layer", "w_fixedres", "n_fixedres", "w_res"]
    model, ids = make(arch, dtype, n=6)
    _, ref = reference_vectors(model, ids)
    res = cmixlib.context_mixing(model, None, {"input_ids": ids}, normalize=False, methods=names)
    exact = None
    if dtype == torch.float32:                  # the float64 truth: the same weights in float64
        _, exact = reference_vectors(*make(arch, torch.float64, n=6))
    for k, r in enumerate(ref):
        want, truth = norm_family_expected(r), None if exact is None else norm_family_expected(exact[k])
        for name in names:
            check(res[name][k], want[name], None if truth is None else truth[name], err_msg=f"{name} {k}")


def norm_family_expected(r) -> dict[str, np.ndarray]:
    """The norm-based maps of one layer from the reference vectors, by loops and explicit sums."""
    n = r["x"].shape[0]
    A = r["alpha"].mean(0)
    N = r["F"].norm(dim=-1)
    alti = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            alti[i, j] = max(0.0, float(r["y"][i].abs().sum() - (r["y"][i] - r["T"][i, j]).abs().sum()))
    eye = np.eye(n)
    # W-Res with N-Enc's mixing ratio
    W = r["W"]
    wres = np.zeros((n, n))
    for i in range(n):
        mix = (W[i].sum(0) - W[i, i]).norm()
        ratio = float(mix / (mix + W[i, i].norm()))
        row = A[i].double().numpy().copy()
        row[i] = 0
        wres[i] = ratio * row / row.sum()
        wres[i, i] += 1 - ratio
    return {"attention": A.numpy(), "attn_norm": N.numpy(), "attn_norm_res": r["z"].norm(dim=-1).numpy(),
            "attn_norm_res_ln": r["T"].norm(dim=-1).numpy(), "globenc_layer": r["W"].norm(dim=-1).numpy(),
            "alti_layer": alti.numpy(), "w_fixedres": 0.5 * A.numpy() + 0.5 * eye,
            "n_fixedres": 0.5 * rownorm(N.numpy()) + 0.5 * eye, "w_res": wres}


def vz_by_rerun(model, ids) -> np.ndarray:
    """Raw cosine VZ maps (L, n, n): the model re-run with token t's value vector zeroed."""
    base = hooked_forward(model, ids)
    n, L = ids.shape[1], len(encoder_layers(model))
    ref = np.zeros((L, n, n))
    for layer in range(L):
        orig = base["out"][layer][0].double()
        for t in range(n):
            pert = hooked_forward(model, ids, layer=layer, zero_token=t)["out"][layer][0].double()
            ref[layer, :, t] = (1 - F.cosine_similarity(pert, orig, dim=-1)).numpy()
    return ref


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_value_zeroing_against_rerun_with_hook(arch, dtype):
    model, ids = make(arch, dtype, n=6)
    res = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=["value_zeroing"], normalize=False)
    vz = res["value_zeroing"]
    ref = vz_by_rerun(model, ids)
    if dtype == torch.float64:
        np.testing.assert_allclose(vz, ref, rtol=1e-7, atol=1e-12)   # 1 - cos: cancellation ~1e-16/1e-9
    else:  # rule 2: the re-run in float32 is the baseline, the float64 re-run the truth; the
        # library's 1/2|a/|a| - b/|b||^2 is more accurate than the baseline's 1 - cos, so the
        # row-normalised maps are compared (raw distances ~1e-3..1e-1 here)
        exact = vz_by_rerun(make(arch, torch.float64, n=6)[0], ids)
        check(rownorm(vz), rownorm(ref), rownorm(exact))
    assert np.all(np.diagonal(vz, axis1=1, axis2=2) > 0), "diagonal must be kept"


def test_value_zeroing_float32_close_to_float64():
    m32, ids = make("bert", torch.float32, n=8)
    m64 = cmixlib.random_model("bert", dtype=torch.float64, seed=0)
    a = cmixlib.context_mixing(m32, None, {"input_ids": ids}, methods=["value_zeroing"])["value_zeroing"]
    b = cmixlib.context_mixing(m64, None, {"input_ids": ids}, methods=["value_zeroing"])["value_zeroing"]
    # rule 2: row-normalised maps; baseline: the float32 model re-run with the value zeroed
    check(a, rownorm(vz_by_rerun(m32, ids)), b)


def test_cosine_distance_is_stable_for_nearly_equal_vectors():
    from cmixlib.methods.vz_distances import cosine_distance
    g = torch.Generator().manual_seed(0)
    a = torch.randn(64, 384, generator=g, dtype=torch.float64)
    b = a + 1e-6 * torch.randn(64, 384, generator=g, dtype=torch.float64)
    exact = cosine_distance(a, b)              # float64 is the reference
    naive32 = 1 - F.cosine_similarity(a.float(), b.float(), dim=-1).double()
    ours32 = cosine_distance(a.float(), b.float()).double()
    assert torch.all(exact > 0)
    # the naive float32 formula is dominated by rounding (errors beyond the distance itself) ...
    assert (naive32 - exact).abs().max() / exact.max() > 1.0
    # ... ours only by storing a and b in float32 (rule 2, baseline: the exact distance of the
    # float32-rounded inputs; normalising in float32 rounds each coordinate once more, so ours
    # loses about twice what the inputs lose: 2.5e-2 vs 1.1e-2 relative here, on every CPU tried)
    check(ours32, cosine_distance(a.float().double(), b.float().double()), exact)
    assert ((ours32 - exact).abs() / exact).max() < 0.1      # far from the naive formula's > 1


@pytest.mark.parametrize("distance", ["euclidean", "spearman"])
def test_value_zeroing_other_distances(distance):
    model, ids = make("bert", torch.float64, n=5)
    vz = cmixlib.context_mixing(model, None, {"input_ids": ids}, normalize=False,
                                methods=[cmixlib.ValueZeroing(distance=distance)])["value_zeroing"]
    base = hooked_forward(model, ids)
    from scipy.stats import spearmanr
    for layer in range(vz.shape[0]):
        orig = base["out"][layer][0].numpy()
        for t in range(ids.shape[1]):
            pert = hooked_forward(model, ids, layer=layer, zero_token=t)["out"][layer][0].numpy()
            for i in range(ids.shape[1]):
                ref = np.linalg.norm(pert[i] - orig[i]) if distance == "euclidean" \
                    else 1 - spearmanr(pert[i], orig[i]).statistic
                assert vz[layer, i, t] == pytest.approx(ref, rel=1e-6, abs=1e-9)


def test_value_zeroing_standardized():
    model, ids = make("bert", torch.float64, n=5)
    vz = cmixlib.context_mixing(model, None, {"input_ids": ids}, normalize=False,
                                methods=[cmixlib.ValueZeroing(standardize=True)])["value_zeroing"]
    base = hooked_forward(model, ids)
    for layer in range(vz.shape[0]):
        orig = base["out"][layer][0]
        mu, sd = orig.mean(0), orig.std(0, unbiased=False)
        for t in range(ids.shape[1]):
            pert = hooked_forward(model, ids, layer=layer, zero_token=t)["out"][layer][0]
            ref = 1 - F.cosine_similarity((pert - mu) / sd, (orig - mu) / sd, dim=-1)
            np.testing.assert_allclose(vz[layer, :, t], ref.numpy(), rtol=1e-7, atol=1e-12)


def test_rows_only_matches_full():
    model, ids = make("bert", torch.float64, n=7)
    full = cmixlib.context_mixing(model, None, {"input_ids": ids})
    part = cmixlib.context_mixing(model, None, {"input_ids": ids}, rows=[3])
    for name, maps in full.items():
        np.testing.assert_allclose(part[name][:, 3], maps[:, 3], rtol=1e-9, atol=1e-12, err_msg=name)
        if cmixlib.METHODS[name].kind == "layer":
            assert np.isnan(part[name][:, 0]).all()


@pytest.mark.parametrize("family", ["bert", "roberta", "electra", "distilbert"])
def test_final_rows_match_full_maps(family):
    # final_rows: the last layer at those rows only (NaN elsewhere), the layers below whole;
    # a padded batch with each sentence's own rows, every method, float64
    model, _ = make(family, torch.float64, n=7)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 90, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    inp = {"input_ids": ids, "attention_mask": mask}
    final = [[0], [1, 4], [2, 6]]
    full = cmixlib.context_mixing(model, None, inp)
    part = cmixlib.context_mixing(model, None, inp, final_rows=final)
    also = cmixlib.context_mixing(model, None, inp, rows=[[3], [0], [5]], final_rows=final)
    for b, rows in enumerate(final):
        n = full[b]["attention"].shape[-1]
        other = np.setdiff1d(np.arange(n), rows)
        for name, maps in full[b].items():
            got = part[b][name]
            if name == "attention_flow":
                np.testing.assert_array_equal(got, maps)
                continue
            np.testing.assert_allclose(got[:-1], maps[:-1], rtol=1e-12, atol=1e-15, err_msg=name)
            np.testing.assert_allclose(got[-1, rows], maps[-1, rows], rtol=1e-9, atol=1e-12,
                                       err_msg=name)
            assert np.isnan(got[-1, other]).all(), name
        for name in ("alti", "value_zeroing_rollout"):   # rows for layer maps, final for the last
            np.testing.assert_allclose(also[b][name][-1, rows], full[b][name][-1, rows], rtol=1e-9, atol=1e-12)


def test_rollout_rows_of_the_last_layer():
    rng = np.random.default_rng(3)
    for L in (1, 2, 4):
        maps = rng.random((L, 6, 6))
        for add_identity, normalize in ((False, False), (False, True), (True, True)):
            full = cmixlib.rollout(maps, add_identity=add_identity, normalize=normalize)
            last_only = maps.copy()
            last_only[-1, [0, 2, 3, 4]] = np.nan               # rows the caller does not read
            got = cmixlib.rollout(last_only, add_identity=add_identity, normalize=normalize,
                                  rows=[5, 1])
            np.testing.assert_allclose(got[-1, [1, 5]], full[-1, [1, 5]], rtol=1e-12)
            np.testing.assert_array_equal(got[:-1], full[:-1])
            assert np.isnan(got[-1, [0, 2, 3, 4]]).all()
    bad = rng.random((3, 4, 4))
    bad[1, 0, 0] = np.nan                                      # a lower layer is needed whole
    with pytest.raises(cmixlib.InputError, match="NaN outside"):
        cmixlib.rollout(bad, rows=[0])
    bad = rng.random((3, 4, 4))
    bad[-1, 2, 1] = np.nan                                     # so is a requested row
    with pytest.raises(cmixlib.InputError, match="NaN outside"):
        cmixlib.rollout(bad, rows=[2])


def test_rollout_against_explicit_products():
    rng = np.random.default_rng(0)
    maps = rng.random((4, 5, 5))
    out = cmixlib.rollout(maps, add_identity=False, normalize=True)
    norm = maps / maps.sum(-1, keepdims=True)
    for layer in range(4):
        expected = np.linalg.multi_dot([norm[k] for k in range(layer, -1, -1)]) if layer else norm[0]
        np.testing.assert_allclose(out[layer], expected, rtol=1e-12)
    withI = cmixlib.rollout(norm, add_identity=True)
    half = 0.5 * norm + 0.5 * np.eye(5)
    np.testing.assert_allclose(withI[-1], half[3] @ half[2] @ half[1] @ half[0], rtol=1e-12)
    np.testing.assert_allclose(cmixlib.rollout(np.stack([np.eye(5)] * 3), add_identity=True)[-1], np.eye(5))
    raw = cmixlib.rollout(maps, add_identity=False, normalize=False)
    np.testing.assert_allclose(raw[-1], maps[3] @ maps[2] @ maps[1] @ maps[0], rtol=1e-12)


def test_aggregated_methods_are_rollouts_of_layer_maps():
    model, ids = make("roberta", torch.float64, n=6)
    res = cmixlib.context_mixing(model, None, {"input_ids": ids})
    np.testing.assert_allclose(res["attention_rollout"], cmixlib.rollout(res["w_fixedres"], add_identity=False),
                               rtol=1e-10)
    # the documented rule: attention's rollout is rollout(attention) with the defaults
    np.testing.assert_allclose(res["attention_rollout"], cmixlib.rollout(res["attention"]), rtol=1e-10)
    for agg, base in [("globenc", "globenc_layer"), ("alti", "alti_layer"), ("value_zeroing_rollout", "value_zeroing")]:
        np.testing.assert_allclose(res[agg], cmixlib.rollout(res[base], add_identity=False), rtol=1e-10,
                                   err_msg=agg)
    for name, maps in res.items():
        np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=1e-10, err_msg=name)


def test_attention_flow_against_networkx():
    rng = np.random.default_rng(1)
    n, L = 4, 3
    maps = rownorm(rng.random((L, n, n)))
    ours = cmixlib.attention_flow(maps, add_identity=True)
    aug = rownorm(maps + np.eye(n))
    for top in range(L):
        G = nx.DiGraph()
        for k in range(top + 1):
            for i in range(n):
                for j in range(n):
                    G.add_edge((k, j), (k + 1, i), capacity=float(aug[k, i, j]))
        for i in range(n):
            for j in range(n):
                ref = nx.maximum_flow_value(G, (0, j), (top + 1, i))
                assert ours[top, i, j] == pytest.approx(ref, abs=1e-7)


@pytest.mark.parametrize("arch", ["bert", "distilbert"])
def test_padded_batch_equals_single_runs(arch):
    model = cmixlib.random_model(arch, dtype=torch.float64, seed=3)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randint(5, 100, (6,), generator=g), torch.randint(5, 100, (9,), generator=g)
    pad = model.config.pad_token_id or 0
    ids = torch.full((2, 9), pad)
    mask = torch.zeros(2, 9, dtype=torch.long)
    ids[0, :6], mask[0, :6] = a, 1
    ids[1], mask[1] = b, 1
    batch = cmixlib.context_mixing(model, None, {"input_ids": ids, "attention_mask": mask})
    single = [cmixlib.context_mixing(model, None, {"input_ids": x[None]}) for x in (a, b)]
    assert isinstance(batch, list) and len(batch) == 2
    for got, want in zip(batch, single):
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-8, atol=1e-11, err_msg=name)
    # one set of rows per sentence
    layer = ["attn_norm_res_ln", "value_zeroing", "alti_layer"]
    rowed = cmixlib.context_mixing(model, None, {"input_ids": ids, "attention_mask": mask}, methods=layer,
                                   rows=[[2], [0, 7]])
    for got, want, r in zip(rowed, single, ([2], [0, 7])):
        for name in layer:
            np.testing.assert_allclose(got[name][:, r], want[name][:, r], rtol=1e-8, atol=1e-11, err_msg=name)
            other = [i for i in range(got[name].shape[1]) if i not in r]
            assert np.isnan(got[name][:, other]).all()
    with pytest.raises(cmixlib.InputError, match="per-sentence"):
        cmixlib.context_mixing(model, None, {"input_ids": ids, "attention_mask": mask}, methods=layer,
                               rows=[[2], [0], [1]])


def test_mixing_ratio_matches_definition():
    model, ids = make("electra", torch.float64, n=5)
    _, ref = reference_vectors(model, ids)
    ratio = cmixlib.context_mixing_ratio(model, None, {"input_ids": ids})
    for k, r in enumerate(ref):
        T = r["T"]
        for i in range(T.shape[0]):
            mix = (T[i].sum(0) - T[i, i]).norm()
            assert ratio[k, i] == pytest.approx(float(mix / (mix + T[i, i].norm())), rel=1e-9)


# ------------------------------------------------------------------ bad input
def test_unknown_method_lists_valid_names():
    model, ids = make("bert", torch.float32)
    with pytest.raises(ValueError, match="Valid names: attention"):
        cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=["value_zero"])


def test_wrong_distance():
    model, ids = make("bert", torch.float32)
    with pytest.raises(ValueError, match="cosine"):
        cmixlib.ValueZeroing(distance="manhattan")


def test_empty_and_overlong_input(packaged_tokenizer):
    model = cmixlib.random_model("bert", vocab=packaged_tokenizer.vocab_size)
    with pytest.raises(cmixlib.InputError, match="Empty text"):
        cmixlib.context_mixing(model, packaged_tokenizer, "   ")
    with pytest.raises(cmixlib.InputError, match="No text"):
        cmixlib.context_mixing(model, packaged_tokenizer, [])
    with pytest.raises(cmixlib.InputError, match="at most 128"):
        cmixlib.context_mixing(model, packaged_tokenizer, "word " * 300)
    with pytest.raises(cmixlib.InputError, match="out of range"):
        cmixlib.context_mixing(model, packaged_tokenizer, "a short text", rows=[50])


def test_unsupported_architectures():
    import transformers as tf
    albert = tf.AlbertModel(tf.AlbertConfig(num_hidden_layers=1, hidden_size=16,
                                            num_attention_heads=2, intermediate_size=32,
                                            embedding_size=8, vocab_size=50))
    with pytest.raises(cmixlib.UnsupportedModelError, match="Supported"):
        cmixlib.context_mixing(albert, None, {"input_ids": torch.tensor([[1, 2, 3]])})
    # GPT-2 is read (cmixlib.methods.decoder), but only with eager attention weights
    gpt2 = tf.GPT2Model(tf.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50,
                                      attn_implementation="sdpa")).eval()
    with pytest.raises(cmixlib.UnsupportedModelError, match="eager"):
        cmixlib.context_mixing(gpt2, None, {"input_ids": torch.tensor([[1, 2, 3]])})
    dec = cmixlib.random_model("bert", is_decoder=True)
    with pytest.raises(cmixlib.UnsupportedModelError, match="decoder"):
        cmixlib.context_mixing(dec, None, {"input_ids": torch.tensor([[1, 2, 3]])})


def test_heads_model_is_accepted():
    base = cmixlib.random_model("bert", dtype=torch.float64, seed=5)
    mlm = cmixlib.random_model("bert", task="mlm", dtype=torch.float64, seed=5)
    mlm.base_model.load_state_dict(base.state_dict(), strict=False)
    ids = torch.randint(5, 100, (1, 6))
    a = cmixlib.context_mixing(base, None, {"input_ids": ids}, methods=["alti"])
    b = cmixlib.context_mixing(mlm, None, {"input_ids": ids}, methods=["alti"])
    np.testing.assert_allclose(a["alti"], b["alti"], rtol=1e-10)
