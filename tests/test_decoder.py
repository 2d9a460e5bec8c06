"""Context mixing in pre-LN decoder LMs (cmixlib.forward.decoder, cmixlib.methods.decoder) against slow,
obvious references on small random Llama (grouped-query attention: 6 query heads, 2 key-value
heads; attention and MLP biases on) and GPT-2 models in float64, norm gains and biases perturbed.

The references are written independently of the library: module paths and weight slices spelled
out by hand per family, hooks on the model's own modules, loops over (i, j, h), the model re-run
with one token's values zeroed in every key-value head.

Tolerances (tests/tolerances.py). HF's eager Llama computes RMSNorm (and softmax, RoPE) in
float32 even in a float64 model; :func:`float32_inside` detects this per norm module. Where a
comparison goes through such a norm, :func:`float64_norms` swaps in the float64 formula for the
duration of the test, so both sides are float64 computations of the same value that differ only in
the order of operations (rule 1: a few hundred roundings of u = 1.1e-16 on values <= ~10 stay
below 1e-12; the tolerances below leave two orders of margin), and one test keeps the model's own
float32-inside norms and applies rule 2 (no worse than the model's own forward pass, the float64
formula's result being the truth). Softmax and RoPE only make alpha, which both sides read from
the same forward pass.
"""
from __future__ import annotations

import types
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cmixlib
from cmixlib.methods import decoder as dm
from cmixlib.methods import value_zeroing_decoder as dv
from cmixlib.forward.decoder import DecoderLayerState, random_decoder, run_decoder
from cmixlib.forward.decoder_checks import DecompositionError
from tolerances import U64, assert_no_worse_than_baseline, gamma

ARCHS = ["llama", "gpt2"]
N = 7
RTOL, ATOL = 1e-9, 1e-11          # rule 1, float64 (module docstring)
VZ_RTOL, VZ_ATOL = 1e-7, 1e-12    # 1 - cos: cancellation of ~1e-16 on distances >= ~1e-9


def make(arch, seed=0, n=N):
    model = random_decoder(arch, dtype=torch.float64, seed=seed)
    ids = torch.randint(0, 101, (n,), generator=torch.Generator().manual_seed(seed + 7))
    return model, ids


# ------------------------------------------------------------------ float32 inside HF modules
def _norm_f64(mod, h):
    """RMSNorm / LayerNorm in the input's dtype (float64), the textbook formula."""
    if isinstance(mod, torch.nn.LayerNorm):
        c = h - h.mean(-1, keepdim=True)
        return mod.weight * c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + mod.eps) + mod.bias
    eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", None))
    return mod.weight * h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)


def float32_inside(mod) -> bool:
    """Whether a float64 norm module computes at float32 precision inside (HF's LlamaRMSNorm)."""
    h = torch.randn(4, mod.weight.shape[0], dtype=torch.float64,
                    generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        err = (mod(h) - _norm_f64(mod, h)).abs().max() / _norm_f64(mod, h).abs().max()
    return float(err) > 1e3 * U64


@contextmanager
def float64_norms(model):
    """Every norm that computes in float32 inside gets the float64 formula while inside."""
    patched = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")
               and float32_inside(m)]
    for m in patched:
        m.forward = types.MethodType(_norm_f64, m)
    try:
        yield patched
    finally:
        for m in patched:
            del m.forward


def test_float32_inside_is_detected():
    llama, gpt2 = make("llama")[0], make("gpt2")[0]
    assert not float32_inside(gpt2.transformer.ln_f)
    inside = float32_inside(llama.model.norm)        # True with transformers 5.x eager Llama
    with float64_norms(llama) as patched:
        assert len(patched) == (7 if inside else 0)  # 2 per layer + the final norm
        assert not float32_inside(llama.model.norm)
    assert float32_inside(llama.model.norm) == inside


# ------------------------------------------------------------------ references, by hand
def parts_by_hand(model, arch, k):
    """(layer, ln1, ln2, value module, W_V (d, KV dh), b_V, W_O (H dh, d), b_O) in x @ W form."""
    if arch == "llama":
        layer = model.model.layers[k]
        a = layer.self_attn
        return (layer, layer.input_layernorm, layer.post_attention_layernorm, a.v_proj,
                a.v_proj.weight.T, a.v_proj.bias, a.o_proj.weight.T, a.o_proj.bias)
    layer = model.transformer.h[k]
    d = model.config.n_embd
    c = layer.attn.c_attn
    return (layer, layer.ln_1, layer.ln_2, c, c.weight[:, 2 * d:], c.bias[2 * d:],
            layer.attn.c_proj.weight, layer.attn.c_proj.bias)


def heads(model, arch):
    cfg = model.config
    H = cfg.num_attention_heads
    return H, getattr(cfg, "num_key_value_heads", H) if arch == "llama" else H


@torch.no_grad()
def hooked(model, arch, ids, layer=None, zero=None):
    """A plain forward with hooks: per layer the LN1 output, the LN2 input and the layer output,
    the attention weights from output_attentions, the final norm input and the logits;
    optionally token ``zero``'s values zeroed in every key-value head of layer ``layer``."""
    L = model.config.num_hidden_layers
    rec = {"ln1": {}, "mid": {}, "out": {}, "in": {}}
    hs = []
    for k in range(L):
        lay, ln1, ln2, vmod, *_ = parts_by_hand(model, arch, k)
        hs.append(ln1.register_forward_hook(lambda m, a, o, k=k: rec["ln1"].__setitem__(k, o[0])))
        hs.append(ln2.register_forward_pre_hook(
            lambda m, a, k=k: rec["mid"].__setitem__(k, a[0][0])))
        hs.append(lay.register_forward_hook(lambda m, a, o, k=k: rec["out"].__setitem__(
            k, (o[0] if isinstance(o, tuple) else o)[0])))
        hs.append(lay.register_forward_pre_hook(
            lambda m, a, kw, k=k: rec["in"].__setitem__(k, (a[0] if a else kw["hidden_states"])[0]),
            with_kwargs=True))
        if k == layer:
            d = model.config.hidden_size

            def zero_value(m, a, o):
                o = o.clone()
                if arch == "llama":
                    o[:, zero, :] = 0.0                  # every key-value head
                else:
                    o[:, zero, 2 * d:] = 0.0             # the value third of q | k | v
                return o
            hs.append(vmod.register_forward_hook(zero_value))
    fin = model.model.norm if arch == "llama" else model.transformer.ln_f
    hs.append(fin.register_forward_pre_hook(lambda m, a: rec.__setitem__("fin", a[0][0])))
    try:
        res = model(input_ids=ids[None], output_attentions=True, use_cache=False)
    finally:
        for h in hs:
            h.remove()
    rec["alpha"] = [a[0] for a in res.attentions]
    rec["logits"] = res.logits[0]
    return rec


@torch.no_grad()
def reference(model, arch, ids):
    """Per layer, by loops over (i, j <= i, h): F_ij, z_ij, N, N-Res, ALTI c_ij."""
    rec = hooked(model, arch, ids)
    H, KV = heads(model, arch)
    n = len(ids)
    out = []
    for k in range(model.config.num_hidden_layers):
        _, _, _, _, Wv, bv, Wo, bo = parts_by_hand(model, arch, k)
        dh = Wo.shape[0] // H
        u, x, alpha, m = rec["ln1"][k], rec["in"][k], rec["alpha"][k], rec["mid"][k]
        Fv = torch.zeros(n, n, x.shape[-1], dtype=x.dtype)
        for i in range(n):
            for j in range(i + 1):
                for h in range(H):
                    g = h // (H // KV)
                    v = u[j] @ Wv[:, g * dh:(g + 1) * dh] + bv[g * dh:(g + 1) * dh]
                    Fv[i, j] += alpha[h, i, j] * (v @ Wo[h * dh:(h + 1) * dh])
        z = Fv.clone()
        alti = torch.zeros(n, n, dtype=x.dtype)
        for i in range(n):
            z[i, i] += x[i]
            for j in range(i + 1):
                alti[i, j] = max(0.0, float(m[i].abs().sum() - (m[i] - z[i, j]).abs().sum()))
        out.append(dict(F=Fv, z=z, x=x, m=m, bo=bo, alpha=alpha, N=Fv.norm(dim=-1),
                        NRes=z.norm(dim=-1), alti=alti))
    return rec, out


def close(got, want, rtol=RTOL, atol=ATOL, err_msg=""):
    got, want = (a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
                 for a in (got, want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=err_msg)


def rownorm(a):
    s = a.sum(-1, keepdims=True)
    return a / np.where(s == 0, 1, s)


# ------------------------------------------------------------------ capture and decomposition
@pytest.mark.parametrize("arch", ARCHS)
def test_capture_points_and_decomposition_identity(arch):
    """sum_j F_ij + b_O == the captured attention output; m = x + a; x' = m + g; rule 1 with
    the chain of one sum over n sources and H d_h products per output coordinate."""
    model, ids = make(arch)
    cap = run_decoder(model, ids)
    rec = hooked(model, arch, ids)
    H, KV = heads(model, arch)
    for k, st in enumerate(cap.layers):
        assert st.attn_weights.shape == (H, N, N) and st.values.shape[:2] == (H, N)
        assert st.raw_values.shape[-1] == KV * st.parts.head_dim
        torch.testing.assert_close(st["ln1_out"], rec["ln1"][k], rtol=0, atol=0)
        torch.testing.assert_close(st["resid_in"], rec["in"][k], rtol=0, atol=0)
        torch.testing.assert_close(st["attn_weights"], rec["alpha"][k], rtol=0, atol=0)
        assert torch.all(st.attn_weights.triu(1) == 0)
        # sum_{h,j,k} |alpha v W_O|: the magnitude of the summed terms (rule 1)
        w_o = st.parts.w_o.reshape(-1, H, st.parts.head_dim).abs()
        scale = torch.einsum("hij,hjk,dhk->id", st.attn_weights, st.values.abs(), w_o).max()
        scale = scale.detach()
        atol = 2 * gamma(N + H * st.parts.head_dim + 1, torch.float64) * float(scale + 1)
        close(st.attn_vectors.sum(1) + st.parts.b_o, st["attn_out"], rtol=0, atol=atol)
        close(st.recomputed_attn_out(), st["attn_out"], rtol=0, atol=atol)
        assert torch.equal(st["resid_mid"], st["resid_in"] + st["attn_out"])
        assert torch.equal(st["resid_out"], st["resid_mid"] + st["mlp_out"])
        assert torch.equal(st["resid_mid"], rec["mid"][k])
        assert torch.equal(st["resid_out"], rec["out"][k])
        assert torch.all(st.attn_vectors[tuple(torch.triu_indices(N, N, 1))] == 0)
    assert torch.equal(cap["final_norm_in"], rec["fin"])
    assert torch.equal(cap["logits"], rec["logits"])
    with pytest.raises(KeyError, match="capture point"):
        cap.layers[0]["nope"]


def test_sdpa_model_gets_a_clear_error():
    model, ids = make("llama")
    model.set_attn_implementation("sdpa")
    with pytest.raises(cmixlib.UnsupportedModelError, match="attn_implementation='eager'"):
        run_decoder(model, ids)


# ------------------------------------------------------------------ norm family, ALTI, rollout
def check_norms_and_alti(arch, seed=0):
    model, ids = make(arch, seed)
    _, ref = reference(model, arch, ids)
    names = ["attention", "attn_norm", "attn_norm_res", "alti_layer", "w_fixedres", "n_fixedres"]
    res = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=names, normalize=False)
    for k, r in enumerate(ref):
        # Llama's eager softmax runs in float32: rows of alpha sum to 1 only to ~1e-7, so
        # W-FixedRes is 0.5 rownorm(A) + 0.5 I (as for encoders), not 0.5 A + 0.5 I
        A = r["alpha"].mean(0).numpy()
        want = {"attention": A, "attn_norm": r["N"], "attn_norm_res": r["NRes"],
                "alti_layer": r["alti"], "w_fixedres": 0.5 * rownorm(A) + 0.5 * np.eye(N),
                "n_fixedres": 0.5 * rownorm(r["N"].numpy()) + 0.5 * np.eye(N)}
        for name in names:
            close(res[name][k], want[name], err_msg=f"{arch} {name} layer {k}")
    return model, ids, ref


@pytest.mark.parametrize("arch", ARCHS)
def test_norms_and_alti_against_loops(arch):
    check_norms_and_alti(arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_rollouts_against_explicit_products(arch):
    model, ids, ref = check_norms_and_alti(arch, seed=1)
    res = cmixlib.context_mixing(model, None, {"input_ids": ids},
                                 methods=["attention_rollout", "alti", "alti_layer"])
    half = [rownorm(r["alpha"].mean(0).numpy() + np.eye(N)) for r in ref]   # (A + I) / 2
    alti = [rownorm(r["alti"].numpy()) for r in ref]
    roll_a, roll_c = half[0], alti[0]
    for k in range(len(ref)):
        if k:
            roll_a, roll_c = half[k] @ roll_a, alti[k] @ roll_c
        close(res["attention_rollout"][k], roll_a, err_msg=f"rollout {k}")
        close(res["alti"][k], roll_c, err_msg=f"alti rollout {k}")
    close(res["alti_layer"], np.stack(alti))


# ------------------------------------------------------------------ Value Zeroing
@torch.no_grad()
def vz_by_hooked_forward(model, arch, ids):
    """Cosine VZ maps (L, n, n): the real model re-run with token t's values zeroed in every
    key-value head of one layer, that layer's real output read; rows i < t must not change."""
    base = hooked(model, arch, ids)
    L, n = model.config.num_hidden_layers, len(ids)
    ref = np.zeros((L, n, n))
    for layer in range(L):
        orig = base["out"][layer]
        for t in range(n):
            pert = hooked(model, arch, ids, layer=layer, zero=t)["out"][layer]
            assert torch.equal(pert[:t], orig[:t]), "zeroing token t changed an earlier row"
            ref[layer, t:, t] = (1 - F.cosine_similarity(pert[t:], orig[t:], dim=-1)).numpy()
    return ref


def check_vz(arch, seed=0, methods=("batched", "factored")):
    model, ids = make(arch, seed)
    with float64_norms(model):
        ref = vz_by_hooked_forward(model, arch, ids)
        cap = run_decoder(model, ids)
        for method in methods:
            got = torch.stack([dv.value_zeroing_layer(st, method=method) for st in cap.layers])
            close(got, ref, rtol=VZ_RTOL, atol=VZ_ATOL, err_msg=f"{arch} {method}")
            assert torch.all(got.triu(1) == 0)
        api = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods="value_zeroing",
                                     normalize=False)["value_zeroing"]
    close(api, ref, rtol=VZ_RTOL, atol=VZ_ATOL, err_msg=f"{arch} API")
    assert np.all(np.diagonal(ref, axis1=1, axis2=2) > 0), "diagonal kept"
    return model, ids, ref


@pytest.mark.parametrize("arch", ARCHS)
def test_value_zeroing_against_hooked_forward(arch):
    check_vz(arch)


def test_value_zeroing_float32_inside_no_worse_than_the_model():
    """Rule 2 on the unpatched Llama (RMSNorm at float32 precision inside): the truth is the
    hooked forward with float64 norms, the baseline the same hooked forward with the model's own
    norms; the batched form (the model's LN2 and MLP modules) and the factored form (float64
    formula) may be at most BASELINE_FACTOR times further from the truth than the baseline."""
    model, ids = make("llama", seed=2)
    with float64_norms(model) as patched:
        assert patched, "this transformers' LlamaRMSNorm is float64 inside: nothing to check"
        truth = vz_by_hooked_forward(model, "llama", ids)
    baseline = vz_by_hooked_forward(model, "llama", ids)
    assert np.abs(baseline - truth).max() > 0
    cap = run_decoder(model, ids)
    for method in ("batched", "factored"):
        got = torch.stack([dv.value_zeroing_layer(st, method=method) for st in cap.layers])
        assert_no_worse_than_baseline(got, truth, baseline, dtype=torch.float64,
                                      err_msg=f"llama {method}")


@pytest.mark.parametrize("arch", ARCHS)
def test_value_zeroing_distances_and_standardisation(arch):
    """Euclidean and standardised VZ: the factored form against the batched one (rule 1)."""
    model, ids = make(arch, seed=3)
    with float64_norms(model):
        cap = run_decoder(model, ids)
        for kw in (dict(distance="euclidean"), dict(standardize=True)):
            for st in cap.layers:
                close(dv.value_zeroing_layer(st, method="factored", **kw),
                      dv.value_zeroing_layer(st, method="batched", **kw),
                      rtol=VZ_RTOL, atol=VZ_ATOL, err_msg=str(kw))


# ------------------------------------------------------------------ ALTI-Logit
@torch.no_grad()
def alti_logit_by_loops(model, arch, ids, target, foil):
    """ALTI-Logit by loops: u = U_target - U_foil; the final norm linearised by hand at each
    row's real final residual; each layer's per-source attention term carried to the input
    tokens by the explicit product of the row-normalised ALTI maps of the layers below."""
    rec, ref = reference(model, arch, ids)
    L, n = len(ref), len(ids)
    u = model.lm_head.weight[target] - model.lm_head.weight[foil]
    norm = model.model.norm if arch == "llama" else model.transformer.ln_f
    fin = rec["fin"]
    sources = np.zeros((L, n, n))
    other = np.zeros(n)
    for i in range(n):
        if arch == "llama":
            s = torch.sqrt(fin[i].pow(2).mean() + norm.variance_epsilon)
            lin = lambda v, s=s: norm.weight * v / s                       # noqa: E731
        else:
            s = torch.sqrt(fin[i].var(unbiased=False) + norm.eps)
            lin = lambda v, s=s: norm.weight * (v - v.mean()) / s          # noqa: E731
        other[i] = float(u @ lin(rec["in"][0][i]))
        if arch == "gpt2":
            other[i] += float(u @ norm.bias)
        for k, r in enumerate(ref):
            other[i] += float(u @ lin(r["bo"])) + float(u @ lin(rec["out"][k][i] - r["m"][i]))
            for j in range(i + 1):
                sources[k, i, j] = float(u @ lin(r["F"][i, j]))
    tracked = sources.copy()
    roll = rownorm(ref[0]["alti"].numpy())
    for k in range(1, L):
        tracked[k] = sources[k] @ roll
        roll = rownorm(ref[k]["alti"].numpy()) @ roll
    return sources, tracked, other


def check_alti_logit(arch, seed=0):
    model, ids = make(arch, seed)
    target, foil = 5, 11
    sources, tracked, other = alti_logit_by_loops(model, arch, ids, target, foil)
    res = dm.alti_logit(run_decoder(model, ids), model, target=target, foil=foil)
    close(res.sources, sources, err_msg="sources")
    close(res.tracked, tracked, err_msg="tracked")
    close(res.reconstruction() - res.sources.sum((0, 2)), other, err_msg="other terms")
    api = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=cmixlib.AltiLogit(target=target, foil=foil)
                                 )["alti_logit"]
    close(api, tracked, err_msg="API")
    return model, ids, res


@pytest.mark.parametrize("arch", ARCHS)
def test_alti_logit_against_loops_and_the_real_logit(arch):
    model, ids, _ = check_alti_logit(arch)
    with float64_norms(model):                 # a float64 model: the identity to rule 1
        res = dm.alti_logit(run_decoder(model, ids), model, target=5, foil=11)
        close(res.reconstruction(), res.logit, err_msg="logit difference reconstructed")
        # rows of the ALTI rollout sum to 1: the tracked terms keep each layer's total
        close(res.tracked.sum(-1), res.sources.sum(-1))
        one = dm.alti_logit(run_decoder(model, ids), model, target=5)
        close(one.reconstruction(), one.logit, err_msg="single logit")
        top = dm.alti_logit(run_decoder(model, ids), model)
        assert np.array_equal(top.target, run_decoder(model, ids).logits.argmax(-1).numpy())


def test_alti_logit_float32_inside_no_worse_than_the_model():
    """Rule 2 on the unpatched Llama: the reconstruction against the logit difference from the
    float64 final-norm formula (the truth) may be at most BASELINE_FACTOR times as far as the
    model's own logits (final RMSNorm at float32 precision inside, the baseline)."""
    model, ids = make("llama", seed=4)
    cap = run_decoder(model, ids)
    res = dm.alti_logit(cap, model, target=5, foil=11)
    u = model.lm_head.weight[5] - model.lm_head.weight[11]
    truth = (_norm_f64(model.model.norm, cap["final_norm_in"]) @ u).detach().numpy()
    assert_no_worse_than_baseline(res.reconstruction(), truth, res.logit, dtype=torch.float64)


# ------------------------------------------------------------------ API: causality, errors
@pytest.mark.parametrize("arch", ARCHS)
def test_every_map_is_causal_and_rows_sum_to_one(arch):
    model, ids = make(arch, seed=5)
    res = cmixlib.context_mixing(model, None, {"input_ids": ids})
    assert set(res) == set(dm.DECODER_METHOD_NAMES)
    for name, maps in res.items():
        assert maps.shape == (3, N, N), name
        assert np.all(np.triu(maps, 1) == 0), f"{name} leaks above the diagonal"
        if name != "alti_logit":
            close(maps.sum(-1), np.ones((3, N)), err_msg=name)


def test_batch_rows_and_base_model():
    model, ids = make("gpt2", seed=6)
    short = ids[:4]
    batch = {"input_ids": torch.stack([ids, torch.cat([short, torch.zeros(3, dtype=torch.long)])]),
             "attention_mask": torch.tensor([[1] * 7, [1] * 4 + [0] * 3])}
    names = ["alti", "value_zeroing", "alti_logit"]
    asked = ["alti", "value_zeroing", cmixlib.AltiLogit(target=3)]
    got = cmixlib.context_mixing(model, None, batch, methods=asked)
    for g, single in zip(got, (ids, short)):
        want = cmixlib.context_mixing(model, None, {"input_ids": single}, methods=asked)
        for name in names:
            close(g[name], want[name], err_msg=name)
    part = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=["alti_layer", "alti"],
                                  rows=[2, 5])
    full = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=["alti_layer", "alti"])
    close(part["alti_layer"][:, [2, 5]], full["alti_layer"][:, [2, 5]])
    assert np.isnan(part["alti_layer"][:, 0]).all()
    close(part["alti"], full["alti"])
    base = model.base_model                    # no LM head: everything but alti_logit
    res = cmixlib.context_mixing(base, None, {"input_ids": ids})
    assert "alti_logit" not in res
    close(res["alti"], full["alti"])
    with pytest.raises(TypeError, match="no LM head"):
        cmixlib.context_mixing(base, None, {"input_ids": ids}, methods="alti_logit")


@pytest.mark.parametrize("name", sorted(dm.UNSUPPORTED))
def test_methods_without_a_pre_ln_counterpart_raise_with_the_reason(name):
    model, ids = make("llama")
    with pytest.raises(dm.UnsupportedMethodError, match="no post-residual LayerNorm"):
        cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=[name])
    assert issubclass(dm.UnsupportedMethodError, ValueError)


def test_logit_target_is_refused_for_encoders():
    with pytest.raises(cmixlib.InputError, match="decoder"):
        cmixlib.context_mixing(cmixlib.random_model("bert"), None,
                               {"input_ids": torch.tensor([[1, 5, 2]])},
                               cmixlib.AltiLogit(target=3))


def test_decoder_families_in_the_arch_table():
    from cmixlib.models import arch
    llama, gpt2 = make("llama")[0], make("gpt2")[0]
    assert arch.decoder_family_of(llama).name == "llama"
    assert arch.decoder_family_of(gpt2).name == "gpt2"
    assert arch.decoder_family_of(cmixlib.random_model("bert")) is None
    p = arch.decoder_parts(llama)[1]
    layer = llama.model.layers[1]
    assert p.value is layer.self_attn.v_proj and p.ln2 is layer.post_attention_layernorm
    assert (p.num_heads, p.num_kv_heads, p.head_dim) == (6, 2, 8)
    g = arch.decoder_parts(gpt2)[0]
    assert torch.equal(g.w_v, gpt2.transformer.h[0].attn.c_attn.weight[:, 96:].T)
    assert arch.decoder_final_norm(gpt2) is gpt2.transformer.ln_f
    with pytest.raises(cmixlib.UnsupportedModelError):     # the encoder helpers still refuse
        arch.layer_parts(llama)
    with pytest.raises(ValueError, match="grouped-query"):
        arch.random_decoder_config("gpt2", hidden=48, layers=1, heads=6, kv_heads=2,
                                   intermediate=96, vocab=101)


# ------------------------------------------------------------------ the checks can fail
def _drop_kv_head_0(monkeypatch):
    real = DecoderLayerState.values.func

    def values(st):
        v = real(st).clone()
        v[st.kv_index == 0] = 0.0              # every query head of key-value group 0
        return v
    monkeypatch.setattr(DecoderLayerState, "values", property(values))


@pytest.mark.parametrize("plant", ["kv head dropped", "residual forgotten (N-Res, ALTI)",
                                   "VZ residual forgotten", "VZ factored residual forgotten"])
def test_checks_catch_planted_bugs(plant, monkeypatch):
    if plant == "kv head dropped":
        _drop_kv_head_0(monkeypatch)
        checks = [lambda: check_norms_and_alti("llama"), lambda: check_vz("llama"),
                  lambda: check_alti_logit("llama")]
    elif plant.startswith("residual"):
        from cmixlib.forward import decomposition
        monkeypatch.setattr(decomposition, "add_residual", lambda z, x_rows, rows: z)
        checks = [lambda: check_norms_and_alti(a) for a in ARCHS]
    elif plant == "VZ residual forgotten":
        monkeypatch.setattr(DecoderLayerState, "mlp_block",
                            lambda st, m: st.parts.mlp(st.parts.ln2(m)))
        checks = [lambda: check_vz(a, methods=("batched",)) for a in ARCHS]
    else:
        real = dv._down
        monkeypatch.setattr(dv, "_down", lambda st, h, r: real(st, h, torch.zeros_like(r)))
        checks = [lambda: check_vz(a, methods=("factored",)) for a in ARCHS]
    # a dropped key-value head also breaks the capture's own identity check (DecompositionError)
    caught = (AssertionError, DecompositionError) if plant == "kv head dropped" else AssertionError
    for check in checks:
        with pytest.raises(caught):
            check()


def test_final_rows_hold_on_decoders_as_on_encoders():
    """final_rows: the last layer's other rows NaN in every map but attention flow, the rows
    kept equal to a full run (it was silently ignored on decoders)."""
    model, ids = make("llama", seed=3)
    names = ["alti_layer", "alti", "attention_flow", "value_zeroing"]
    full = cmixlib.context_mixing(model, None, {"input_ids": ids}, names)
    part = cmixlib.context_mixing(model, None, {"input_ids": ids}, names, final_rows=[2, 4])
    assert part.options["final_rows"] == [2, 4]
    other = [i for i in range(len(ids)) if i not in (2, 4)]
    for name in names:
        np.testing.assert_array_equal(part[name][:-1], full[name][:-1], err_msg=name)
        np.testing.assert_array_equal(part[name][-1, [2, 4]], full[name][-1, [2, 4]])
        if name == "attention_flow":
            np.testing.assert_array_equal(part[name], full[name])
        else:
            assert np.isnan(part[name][-1, other]).all(), name
    heads = cmixlib.context_mixing(model, None, {"input_ids": ids}, "alti_layer", heads=True,
                                   final_rows=0)["alti_layer"]
    assert np.isnan(heads[-1, :, 1:]).all() and np.isfinite(heads[-1, :, 0]).all()
    with pytest.raises(cmixlib.InputError, match="final_rows"):
        cmixlib.context_mixing(model, None, {"input_ids": ids}, "alti", final_rows=[99])
