"""Every decoder family of cmixlib.models.arch.DECODER_FAMILIES, exact against brute force; every other
model_type refused before a forward pass; the capture's identity checks fire on a wrong
declaration.

Each family is a tiny random float64 model built here with its own ``transformers`` config class
(eager attention, 2 layers, 4 query heads, 2 key-value heads where the family has them, biases
and multipliers switched on, norm gains and biases randomised by this file). The references know
each family from the test's own spec (:data:`SPEC`, written from transformers' modeling files,
not from cmixlib): the value module, W_O and b_O, the residual multiplier r, the norm formula and
the logit divisor. References:

- the decomposition: F_ij = sum_h alpha^h_ij r v^g(h)_j W_O^h by loops over (i, j, h), v the
  value projection's real output (clamped for OLMo), and the identity x_i + sum_j F_ij + r b_O
  = m_i (the real input of the second norm); N, N-Res and ALTI by loops from F;
- Value Zeroing: the model re-run with a forward hook on the value projection that zeroes token
  t's value rows in layer l, 1 - cos of that layer's real output;
- ALTI-Logit: the per-source terms by loops with the final norm linearised by the spec's formula,
  and the reconstruction against the model's own logit difference.

Tolerances: HF computes several norms (Gemma's and OLMo's always) in float32 even in a float64
model; inside :func:`float64_norms` each norm's forward is the spec's float64 formula (checked
first against the real module to float32 precision), so both sides are float64 computations
that differ in the order of operations only (rule 1, as tests/test_decoder.py). A separate test
keeps the real modules: the capture's identity checks pass and Value Zeroing is no worse than the
model's own forward pass (rule 2).
"""
from __future__ import annotations

import types
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers

import cmixlib
from cmixlib.models import arch
from cmixlib.methods import decoder as dm
from cmixlib.methods import value_zeroing_decoder as vzd
from cmixlib.forward.decoder import run_decoder
from cmixlib.forward.decoder_checks import DecompositionError
from tolerances import U64, assert_no_worse_than_baseline

N, V, D, H, KV, DH = 6, 61, 32, 4, 2, 8
RTOL, ATOL = 1e-9, 1e-11                 # rule 1, float64
VZ_RTOL, VZ_ATOL = 1e-7, 1e-12           # 1 - cos: cancellation on distances >= ~1e-9

_SIZES = dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=H, num_key_value_heads=KV,
              intermediate_size=48, vocab_size=V, max_position_embeddings=64, head_dim=DH,
              initializer_range=0.1)
#: family -> (config class, config values, norm kind, gain rule, eps override)
SPEC = {
    "llama": ("LlamaConfig", dict(attention_bias=True, mlp_bias=True), "rms", "w"),
    "mistral": ("MistralConfig", {}, "rms", "w"),
    "qwen2": ("Qwen2Config", {}, "rms", "w"),
    "qwen3": ("Qwen3Config", dict(attention_bias=True), "rms", "w"),
    "gemma": ("GemmaConfig", dict(attention_bias=True), "rms", "1+w"),
    "granite": ("GraniteConfig", dict(attention_bias=True, mlp_bias=True,
                                      embedding_multiplier=2.0, residual_multiplier=0.6,
                                      attention_multiplier=0.3, logits_scaling=3.0), "rms", "w"),
    "stablelm": ("StableLmConfig", dict(use_qkv_bias=True, qk_layernorm=True), "ln", "w"),
    "starcoder2": ("Starcoder2Config", dict(use_bias=True), "ln", "w"),
    "olmo": ("OlmoConfig", dict(attention_bias=True, clip_qkv=0.3), "ln", "none"),
}
FAMILIES = list(SPEC)


def build(family, seed=0):
    cls, extra, *_ = SPEC[family]
    cfg = getattr(transformers, cls)(**{**_SIZES, **extra})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    ids = torch.randint(0, V, (N,), generator=torch.Generator().manual_seed(seed + 7))
    return model.double().eval(), ids


# ------------------------------------------------------------------ the test's family spec
def layer_of(model, k):
    return model.model.layers[k]


def r_of(model):
    return float(getattr(model.config, "residual_multiplier", 1.0))


def norm_f64(family, mod, h):
    """The family's norm in float64, from the spec (not from cmixlib)."""
    kind, gain_rule = SPEC[family][2], SPEC[family][3]
    if kind == "ln":
        h = h - h.mean(-1, keepdim=True)
    eps = 1e-5 if gain_rule == "none" else getattr(mod, "variance_epsilon",
                                                    getattr(mod, "eps", None))
    out = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if gain_rule == "none":
        return out
    out = out * (mod.weight if gain_rule == "w" else 1.0 + mod.weight)
    return out + mod.bias if kind == "ln" and mod.bias is not None else out


def norms_of(model):
    mods = [model.model.norm]
    for lay in model.model.layers:
        mods += [lay.input_layernorm, lay.post_attention_layernorm]
    return mods


@contextmanager
def float64_norms(model, family):
    """Each layer norm and the final norm computes the spec's float64 formula while inside,
    after checking that the formula is the module's (to float32 precision)."""
    h = torch.randn(3, D, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    mods = norms_of(model)
    for m in mods:
        with torch.no_grad():
            want, got = norm_f64(family, m, h), m(h)
        assert float((want - got).abs().max()) < 1e-5 * float(want.abs().max()), \
            f"{family}: the spec's norm formula is not the module's"
        m.forward = types.MethodType(lambda self, x: norm_f64(family, self, x), m)
    try:
        yield
    finally:
        for m in mods:
            del m.forward


@torch.no_grad()
def hooked(model, ids, layer=None, zero=None):
    """A plain forward with hooks: per layer the input x, the value projection's output (a
    copy, clamped as OLMo clamps it), m (the second norm's input), the layer output; the
    attention weights, the final norm input and the logits. Optionally token ``zero``'s value
    rows zeroed (every key-value head) in layer ``layer`` by a hook on the value projection."""
    L = model.config.num_hidden_layers
    rec = {"x": {}, "v": {}, "m": {}, "out": {}}
    clip = getattr(model.config, "clip_qkv", None)
    hs = []
    for k in range(L):
        lay = layer_of(model, k)

        def keep_v(mod, a, o, k=k):
            v = o[0].clone()
            rec["v"][k] = v if clip is None else v.clamp(-clip, clip)
        hs.append(lay.self_attn.v_proj.register_forward_hook(keep_v))
        hs.append(lay.post_attention_layernorm.register_forward_pre_hook(
            lambda m, a, k=k: rec["m"].__setitem__(k, a[0][0])))
        hs.append(lay.register_forward_hook(lambda m, a, o, k=k: rec["out"].__setitem__(
            k, (o[0] if isinstance(o, tuple) else o)[0])))
        hs.append(lay.register_forward_pre_hook(
            lambda m, a, kw, k=k: rec["x"].__setitem__(k, (a[0] if a else kw["hidden_states"])[0]),
            with_kwargs=True))
        if k == layer:
            def zero_value(mod, a, o):
                o = o.clone()
                o[:, zero, :] = 0.0
                return o
            hs.append(lay.self_attn.v_proj.register_forward_hook(zero_value))
    hs.append(model.model.norm.register_forward_pre_hook(
        lambda m, a: rec.__setitem__("fin", a[0][0])))
    try:
        res = model(input_ids=ids[None], output_attentions=True, use_cache=False)
    finally:
        for h in hs:
            h.remove()
    rec["alpha"] = [a[0] for a in res.attentions]
    rec["logits"] = res.logits[0]
    return rec


@torch.no_grad()
def reference(model, ids):
    """Per layer, by loops: F_ij (r included), z_ij = F_ij + delta_ij x_i, N, N-Res, ALTI."""
    rec = hooked(model, ids)
    r = r_of(model)
    out = []
    for k in range(model.config.num_hidden_layers):
        o = layer_of(model, k).self_attn.o_proj
        Wo, bo = o.weight.T, o.bias
        v, x, alpha, m = rec["v"][k], rec["x"][k], rec["alpha"][k], rec["m"][k]
        Fv = torch.zeros(N, N, D, dtype=torch.float64)
        for i in range(N):
            for j in range(i + 1):
                for h in range(H):
                    g = h // (H // KV)
                    Fv[i, j] += r * alpha[h, i, j] * (v[j, g * DH:(g + 1) * DH]
                                                      @ Wo[h * DH:(h + 1) * DH])
        z = Fv.clone()
        alti = torch.zeros(N, N, dtype=torch.float64)
        for i in range(N):
            z[i, i] += x[i]
            for j in range(i + 1):
                alti[i, j] = max(0.0, float(m[i].abs().sum() - (m[i] - z[i, j]).abs().sum()))
        rbo = torch.zeros(D, dtype=torch.float64) if bo is None else r * bo
        out.append(dict(F=Fv, x=x, m=m, rbo=rbo, N=Fv.norm(dim=-1), NRes=z.norm(dim=-1),
                        alti=alti))
    return rec, out


def close(got, want, rtol=RTOL, atol=ATOL, err_msg=""):
    got, want = (a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
                 for a in (got, want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=err_msg)


def rownorm(a):
    s = a.sum(-1, keepdims=True)
    return a / np.where(s == 0, 1, s)


# ------------------------------------------------------------------ exact on every family
def test_every_listed_family_is_covered_here():
    assert set(arch.DECODER_FAMILIES) == set(SPEC) | {"gpt2"}    # gpt2: tests/test_decoder.py


@pytest.mark.parametrize("family", FAMILIES)
def test_decomposition_n_and_alti_against_loops(family):
    model, ids = build(family)
    assert arch.decoder_family_of(model).name == family
    with float64_norms(model, family):
        _, ref = reference(model, ids)
        res = cmixlib.context_mixing(model, None, {"input_ids": ids}, normalize=False,
                                     methods=["attn_norm", "attn_norm_res", "alti_layer"])
    for k, r in enumerate(ref):
        close(r["x"] + r["F"].sum(1) + r["rbo"], r["m"], err_msg=f"{family} m = x + sum F + rb")
        close(res["attn_norm"][k], r["N"], err_msg=f"{family} N {k}")
        close(res["attn_norm_res"][k], r["NRes"], err_msg=f"{family} N-Res {k}")
        close(res["alti_layer"][k], r["alti"], err_msg=f"{family} ALTI {k}")


@torch.no_grad()
def vz_by_hooked_forward(model, ids):
    base = hooked(model, ids)
    L = model.config.num_hidden_layers
    ref = np.zeros((L, N, N))
    for layer in range(L):
        orig = base["out"][layer]
        for t in range(N):
            pert = hooked(model, ids, layer=layer, zero=t)["out"][layer]
            assert torch.equal(pert[:t], orig[:t]), "zeroing token t changed an earlier row"
            ref[layer, t:, t] = (1 - F.cosine_similarity(pert[t:], orig[t:], dim=-1)).numpy()
    return ref


@pytest.mark.parametrize("family", FAMILIES)
def test_value_zeroing_against_a_hook_on_the_value_projection(family):
    model, ids = build(family, seed=1)
    with float64_norms(model, family):
        ref = vz_by_hooked_forward(model, ids)
        cap = run_decoder(model, ids)
        for method in ("batched", "factored"):
            got = torch.stack([vzd.value_zeroing_layer(st, method=method) for st in cap.layers])
            close(got, ref, rtol=VZ_RTOL, atol=VZ_ATOL, err_msg=f"{family} {method}")
        api = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods="value_zeroing",
                                     normalize=False)["value_zeroing"]
    close(api, ref, rtol=VZ_RTOL, atol=VZ_ATOL, err_msg=f"{family} API")
    assert np.all(np.diagonal(ref, axis1=1, axis2=2) > 0)


@pytest.mark.parametrize("family", FAMILIES)
@torch.no_grad()
def test_alti_logit_sources_and_reconstruction(family):
    model, ids = build(family, seed=2)
    target, foil = 5, 11
    s = float(getattr(model.config, "logits_scaling", 1.0))
    with float64_norms(model, family):
        rec, ref = reference(model, ids)
        res = dm.alti_logit(run_decoder(model, ids), model, target=target, foil=foil)
        logits = model(input_ids=ids[None]).logits[0].detach()
    u = (model.lm_head.weight[target] - model.lm_head.weight[foil]).detach() / s
    fin, norm = rec["fin"], model.model.norm
    L = len(ref)
    sources = np.zeros((L, N, N))
    for i in range(N):
        # the final norm linearised at row i: its real scale held fixed (the spec's formula)
        scale = fin[i] / norm_f64(family, norm, fin[i][None])[0] if SPEC[family][2] == "rms" \
            else None
        for k, r in enumerate(ref):
            for j in range(i + 1):
                f = r["F"][i, j]
                if SPEC[family][2] == "ln":
                    c = fin[i] - fin[i].mean()
                    sd = torch.sqrt(c.pow(2).mean() + (1e-5 if SPEC[family][3] == "none"
                                                       else norm.eps))
                    gain = 1.0 if SPEC[family][3] == "none" else norm.weight
                    lin = gain * (f - f.mean()) / sd
                else:
                    lin = f / scale
                sources[k, i, j] = float(u @ lin)
    close(res.sources, sources, err_msg=f"{family} sources")
    tracked = sources.copy()
    roll = rownorm(ref[0]["alti"].numpy())
    for k in range(1, L):
        tracked[k] = sources[k] @ roll
        roll = rownorm(ref[k]["alti"].numpy()) @ roll
    close(res.tracked, tracked, err_msg=f"{family} tracked")
    want = (logits[:, target] - logits[:, foil]).numpy()
    close(res.logit, want, err_msg=f"{family} logit")
    close(res.reconstruction(), want, err_msg=f"{family} reconstruction")


@pytest.mark.parametrize("family", ["gemma", "olmo", "granite", "stablelm"])
def test_real_modules_pass_the_checks_and_value_zeroing_is_no_worse_than_the_model(family):
    """Rule 2 with the model's own norms (float32 inside for Gemma and OLMo): truth = the
    hooked forward with float64 norms, baseline = the hooked forward with the real modules."""
    model, ids = build(family, seed=3)
    with float64_norms(model, family):
        truth = vz_by_hooked_forward(model, ids)
    baseline = vz_by_hooked_forward(model, ids)
    got = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods="value_zeroing",
                                 normalize=False)["value_zeroing"]
    assert_no_worse_than_baseline(got, truth, baseline, dtype=torch.float64, err_msg=family)


# ------------------------------------------------------------------ refusals
def _forbid_forward(model):
    def boom(*a, **k):
        raise AssertionError("a forward pass ran before the refusal")
    model.register_forward_pre_hook(boom)
    return model


def _tiny(cls, model_cls=None, **extra):
    cfg = getattr(transformers, cls)(**extra)
    if model_cls is not None:
        return _forbid_forward(getattr(transformers, model_cls)(cfg).eval())
    return _forbid_forward(transformers.AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager").eval())


REFUSED = {
    "gemma2": lambda: _tiny("Gemma2Config", **_SIZES),
    "gemma3_text": lambda: _tiny("Gemma3TextConfig", **_SIZES),
    "olmo2": lambda: _tiny("Olmo2Config", **_SIZES),
    "imagegpt": lambda: _tiny("ImageGPTConfig", "ImageGPTForCausalImageModeling", n_embd=D, n_layer=1, n_head=H, vocab_size=V,
                              n_positions=16),
    "gpt_bigcode": lambda: _tiny("GPTBigCodeConfig", n_embd=D, n_layer=1, n_head=H,
                                 vocab_size=V, n_positions=16),
    "gpt_neox": lambda: _tiny("GPTNeoXConfig", hidden_size=D, num_hidden_layers=1,
                              num_attention_heads=H, intermediate_size=48, vocab_size=V),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unlisted_families_are_refused_before_any_forward(name):
    model = REFUSED[name]()
    assert model.config.model_type == name
    with pytest.raises(cmixlib.UnsupportedModelError, match=name):
        cmixlib.context_mixing(model, None, {"input_ids": torch.tensor([1, 2, 3])})
    with pytest.raises(cmixlib.UnsupportedModelError, match=name):
        run_decoder(model, torch.tensor([1, 2, 3]))


def test_an_unknown_model_type_with_llama_modules_is_refused():
    model, ids = build("llama")
    model.config.model_type = "my_llama"          # Llama's module names, an unknown family
    _forbid_forward(model)
    assert arch.decoder_family_of(model) is None and arch.is_decoder_lm(model)
    with pytest.raises(cmixlib.UnsupportedModelError, match="not declared"):
        cmixlib.context_mixing(model, None, {"input_ids": ids})


def test_parallel_residual_stablelm_is_refused():
    cls, extra, *_ = SPEC["stablelm"]
    model = _tiny(cls, **{**_SIZES, **extra, "use_parallel_residual": True})
    with pytest.raises(cmixlib.UnsupportedModelError, match="use_parallel_residual"):
        cmixlib.context_mixing(model, None, {"input_ids": torch.tensor([1, 2, 3])})


@pytest.mark.parametrize("wrong", ["gemma gain w", "granite r ignored", "olmo eps",
                                   "granite logits unscaled"])
def test_a_wrong_declaration_is_caught_at_run_time(wrong, monkeypatch):
    """The capture's identity checks name the model when a declaration is wrong."""
    import dataclasses
    family = wrong.split()[0]
    fam = arch.DECODER_FAMILIES[family]
    change = {"gemma gain w": dict(norm_gain="w"), "granite r ignored":
              dict(residual_multiplier_key=None), "olmo eps": dict(norm_eps=1e-1),
              "granite logits unscaled": dict(logits_divisor_key=None)}[wrong]
    monkeypatch.setitem(arch.DECODER_FAMILIES, family, dataclasses.replace(fam, **change))
    model, ids = build(family)
    with pytest.raises(DecompositionError, match=f"model_type='{family}'"):
        run_decoder(model, ids)


def test_random_decoder_builds_every_family():
    from cmixlib.forward.decoder import random_decoder
    for family in arch.DECODER_FAMILIES:
        model = random_decoder(family, hidden=32, heads=4, layers=1, intermediate=48, vocab=61)
        run_decoder(model, torch.arange(5))          # the run-time checks pass in float32
        assert arch.decoder_family_of(model).name == family
    assert U64 < 1e-15


@pytest.mark.parametrize(("wrong", "test"), [
    ("gemma gain w", "alti_logit"), ("gemma gain w", "value_zeroing"),
    ("granite r ignored", "decomposition"), ("olmo eps", "alti_logit"),
    ("olmo eps", "value_zeroing")])
def test_the_references_catch_wrong_declarations_without_the_run_time_check(
        wrong, test, monkeypatch):
    """With the capture's identity checks switched off, the brute-force tests still fail."""
    import dataclasses

    from cmixlib.forward import decoder as dec
    family = wrong.split()[0]
    change = {"gemma gain w": dict(norm_gain="w"), "granite r ignored":
              dict(residual_multiplier_key=None), "olmo eps": dict(norm_eps=1e-1)}[wrong]
    monkeypatch.setitem(arch.DECODER_FAMILIES, family,
                        dataclasses.replace(arch.DECODER_FAMILIES[family], **change))
    from cmixlib.methods import alti_logit as decoder_logit
    monkeypatch.setattr(dec, "check_capture", lambda cap, model: None)
    monkeypatch.setattr(decoder_logit, "_check_reconstruction", lambda *a: None)
    run = {"alti_logit": test_alti_logit_sources_and_reconstruction,
           "value_zeroing": test_value_zeroing_against_a_hook_on_the_value_projection,
           "decomposition": test_decomposition_n_and_alti_against_loops}[test]
    with pytest.raises(AssertionError):
        run(family)
