"""Tests for cmixlib.gradients on tiny random models (float64, so tolerances can be tight)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib import gradients as G

ARCHS = ("bert", "roberta", "electra", "distilbert")
# Ids 5..20 are ordinary tokens in every tiny config; 2 / 3 play [CLS] / [SEP] (first/last position).
IDS = torch.tensor([[2, 11, 5, 17, 8, 9, 14, 3]])
POS = 3
TGT, FOIL = 10, 12
BASE_ID = 4  # stands in for [MASK] in IG / DeepLift baselines
UNK_ID = 6   # stands in for [UNK] in blank-out


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


_cache: dict = {}


def model(arch: str, task: str = "mlm"):
    key = (arch, task)
    if key not in _cache:
        _cache[key] = cmixlib.random_model(arch, task=task, dtype=torch.float64, seed=1)
    return _cache[key]


def mlm_target(score="auto"):
    return G.MLMTarget(POS, TGT, FOIL, score=score)


def layer_blocks(m):
    return cmixlib.models.arch.layer_list(m)


def hand_input_grad(m, ids, target, mask=None):
    """Gradient of f w.r.t. the word embeddings via inputs_embeds (no captum, no hooks)."""
    x = m.get_input_embeddings()(ids).detach().requires_grad_(True)
    out = m(inputs_embeds=x, attention_mask=mask)
    f = G.target_score(out.logits, target)[0]
    (g,) = torch.autograd.grad(f, x)
    return x.detach()[0], g[0]


def plain_score(m, ids, target, mask=None):
    with torch.no_grad():
        return float(G.target_score(m(input_ids=ids, attention_mask=mask).logits, target)[0])


def baseline_ids(ids):
    b = ids.clone()
    b[0, 1:-1] = BASE_ID
    return b


# ---------------------------------------------------------------------------------------------
# The hooks leave the forward unchanged
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("task", ["mlm", "sequence-classification"])
def test_word_embedding_hook_keeps_forward(arch, task):
    m = model(arch, task)
    with torch.no_grad():
        plain = m(input_ids=IDS).logits
        own = m.get_input_embeddings()(IDS)
        with G.substitute_word_embeddings(m, own.clone()):
            hooked = m(input_ids=IDS).logits
        noise = torch.randn(own.shape, generator=torch.Generator().manual_seed(0), dtype=own.dtype)
        with G.substitute_word_embeddings(m, own + 0.5 * noise):  # (a constant shift would vanish in LayerNorm)
            moved = m(input_ids=IDS).logits
    torch.testing.assert_close(hooked, plain, rtol=0, atol=1e-12)
    assert not torch.allclose(moved, plain), "the substitution hook had no effect"
    # the hook is removed afterwards
    with torch.no_grad():
        torch.testing.assert_close(m(input_ids=IDS).logits, plain, rtol=0, atol=0)
    # the scored function used by captum is the plain model's score
    target = mlm_target() if task == "mlm" else G.ClassTarget(1, score="prob")
    f = G.ScoreModule(m, [target])(IDS, torch.ones_like(IDS), *G.target_tensors([target], IDS.device))
    assert f.shape == (1,)
    assert f.item() == pytest.approx(plain_score(m, IDS, target), abs=1e-12)


def test_target_scores_match_definitions():
    m = model("bert")
    with torch.no_grad():
        z = m(input_ids=IDS).logits[0, POS]
    zt, zf = z[TGT].item(), z[FOIL].item()
    assert plain_score(m, IDS, G.MLMTarget(POS, TGT)) == pytest.approx(zt)
    assert plain_score(m, IDS, mlm_target()) == pytest.approx(zt - zf)
    p = np.exp(zt) / (np.exp(zt) + np.exp(zf))
    assert plain_score(m, IDS, mlm_target("prob")) == pytest.approx(p)
    assert plain_score(m, IDS, G.MLMTarget(POS, TGT, score="prob")) == pytest.approx(
        torch.softmax(z, -1)[TGT].item())
    c = model("bert", "sequence-classification")
    with torch.no_grad():
        zc = c(input_ids=IDS).logits[0]
    assert plain_score(c, IDS, G.ClassTarget(1)) == pytest.approx(zc[1].item())
    assert plain_score(c, IDS, G.ClassTarget(1, score="prob")) == pytest.approx(torch.softmax(zc, -1)[1].item())
    resolved = G.resolve_target(c, IDS, G.ClassTarget())
    assert resolved.class_index == int(zc.argmax())


# ---------------------------------------------------------------------------------------------
# Input-level gradients against a hand autograd computation
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_input_gradients_match_autograd(arch):
    m = model(arch)
    t = mlm_target()
    x, g = hand_input_grad(m, IDS, t)
    np.testing.assert_allclose(G.grad_l2(m, IDS, t), g.norm(dim=-1).numpy(), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(G.grad_x_input_l2(m, IDS, t), (g * x).norm(dim=-1).numpy(), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(G.grad_x_input_abs(m, IDS, t), (g * x).sum(-1).abs().numpy(), rtol=1e-8, atol=1e-12)
    # the two G×I aggregations really differ (a swapped implementation would fail above)
    assert not np.allclose(G.grad_x_input_l2(m, IDS, t), G.grad_x_input_abs(m, IDS, t))


def test_classifier_gradients_match_autograd():
    c = model("bert", "sequence-classification")
    t = G.ClassTarget(0, score="prob")
    x, g = hand_input_grad(c, IDS, t)
    out = G.attribute(c, IDS, t, method="grad_x_input_abs")
    np.testing.assert_allclose(out, (g * x).sum(-1).abs().numpy(), rtol=1e-8, atol=1e-14)
    assert out.shape == (IDS.shape[1],) and out.dtype == np.float64


def test_attention_mask_padding():
    m = model("bert")
    t = mlm_target()
    padded = torch.cat([IDS, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones_like(IDS), torch.zeros(1, 3, dtype=torch.long)], 1)
    ref = G.grad_l2(m, IDS, t)
    got = G.grad_l2(m, padded, t, attention_mask=mask)
    np.testing.assert_allclose(got[: IDS.shape[1]], ref, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(got[IDS.shape[1]:], 0.0, atol=1e-12)
    bo = G.blank_out(m, padded, t, attention_mask=mask, replacement=UNK_ID)
    np.testing.assert_allclose(bo[: IDS.shape[1]], G.blank_out(m, IDS, t, replacement=UNK_ID), atol=1e-12)
    assert np.all(bo[IDS.shape[1]:] == 0)


# ---------------------------------------------------------------------------------------------
# Layer-wise gradients against autograd w.r.t. hidden states captured by a hook
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_layerwise_gradients_match_autograd(arch):
    m = model(arch)
    t = mlm_target()
    captured: list[torch.Tensor] = []

    def pre_hook(module, args, kwargs):
        captured.append(args[0] if args else kwargs["hidden_states"])

    hooks = [blk.register_forward_pre_hook(pre_hook, with_kwargs=True) for blk in layer_blocks(m)]
    try:
        out = m(input_ids=IDS, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    L = len(captured)
    for ell in range(L):  # captured inputs are hidden_states[0..L-1]
        torch.testing.assert_close(captured[ell], out.hidden_states[ell])
    f = G.target_score(out.logits, t)[0]
    grads = torch.autograd.grad(f, captured)
    g = torch.stack([gr[0] for gr in grads]).detach()
    h = torch.stack([c[0] for c in captured]).detach()

    gl2 = G.attribute(m, IDS, t, method="grad_l2", level="layers")
    assert gl2.shape == (L, IDS.shape[1])
    np.testing.assert_allclose(gl2, g.norm(dim=-1).numpy(), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(G.grad_x_input_l2(m, IDS, t, level="layers"), (g * h).norm(dim=-1).numpy(),
                               rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(G.grad_x_input_abs(m, IDS, t, level="layers"), (g * h).sum(-1).abs().numpy(),
                               rtol=1e-8, atol=1e-12)
    # rows differ between layers (a method returning one row L times would fail)
    assert not np.allclose(gl2[0], gl2[-1])


# ---------------------------------------------------------------------------------------------
# Integrated gradients: completeness; DeepLift: documented behaviour
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_integrated_gradients_completeness(arch):
    m = model(arch)
    t = mlm_target()
    expected = plain_score(m, IDS, t) - plain_score(m, baseline_ids(IDS), t)
    assert abs(expected) > 1e-3
    attr, delta = G.integrated_gradients(m, IDS, t, baseline=BASE_ID, n_steps=64, return_delta=True)
    assert attr.shape == (IDS.shape[1],)
    # float64: the bound is for the 64-point Gauss-Legendre quadrature error, rounding is ~1e-14
    assert attr.sum() == pytest.approx(expected, abs=1e-5 * max(1, abs(expected)))
    assert abs(delta[0]) < 1e-5
    # special tokens keep their ids in the baseline, so their attribution is exactly 0
    assert attr[0] == 0 and attr[-1] == 0
    layers, ldelta = G.integrated_gradients(m, IDS, t, baseline=BASE_ID, n_steps=64, level="layers",
                                            return_delta=True)
    assert layers.shape == (len(layer_blocks(m)), IDS.shape[1])
    np.testing.assert_allclose(layers.sum(-1), expected, atol=1e-5 * max(1, abs(expected)))
    assert np.all(np.abs(ldelta) < 1e-5)


def test_integrated_gradients_options():
    m = model("bert")
    t = mlm_target()
    signed = G.integrated_gradients(m, IDS, t, baseline=BASE_ID, n_steps=16)
    np.testing.assert_allclose(G.integrated_gradients(m, IDS, t, baseline=BASE_ID, n_steps=16, aggregate="abs"),
                               np.abs(signed), rtol=1e-10)
    l2 = G.integrated_gradients(m, IDS, t, baseline=BASE_ID, n_steps=16, aggregate="l2")
    assert np.all(l2 >= np.abs(signed) / np.sqrt(32) - 1e-12) and np.all(l2 >= 0)
    # a full baseline id tensor equals the token form
    np.testing.assert_allclose(G.integrated_gradients(m, IDS, t, baseline=baseline_ids(IDS), n_steps=16), signed)
    # a two-step Riemann sum is not complete: the completeness test could fail
    coarse, d = G.integrated_gradients(m, IDS, t, baseline=BASE_ID, n_steps=2, method="riemann_right",
                                       return_delta=True)
    assert abs(d[0]) > 1e-4


@pytest.mark.parametrize("arch", ARCHS)
def test_deeplift_plain_captum_equals_gradient_times_delta(arch):
    """Out of the box, captum's DeepLift does not override HF's GELUActivation or the functional
    softmax, so on these MLMs it reduces to sum_d (x - x') * df/dx at the input (as documented).
    With the activation rule (default) the FFN GELUs get the rescale rule and the result differs."""
    m = model(arch)
    t = mlm_target()
    x, g = hand_input_grad(m, IDS, t)
    xb = m.get_input_embeddings()(baseline_ids(IDS)).detach()[0]
    plain = G.deeplift(m, IDS, t, baseline=BASE_ID, rescale_activations=False)
    np.testing.assert_allclose(plain, ((x - xb) * g).sum(-1).numpy(), rtol=1e-7, atol=1e-12)
    rescaled = G.deeplift(m, IDS, t, baseline=BASE_ID)
    assert not np.allclose(rescaled, plain, rtol=1e-6, atol=0)
    layers = G.deeplift(m, IDS, t, baseline=BASE_ID, level="layers")
    assert layers.shape == (len(layer_blocks(m)), IDS.shape[1]) and np.all(np.isfinite(layers))


def _one_gelu_net(seed=0):
    """Linear(5, 7) -> GELUActivation -> Linear(7, 1); hidden unit 0 reads x_0 only."""
    from transformers.activations import GELUActivation

    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(5, 7), GELUActivation(), torch.nn.Linear(7, 1)).double()
    with torch.no_grad():
        net[0].weight[0] = torch.tensor([1.3, 0, 0, 0, 0], dtype=torch.float64)
    return net


@pytest.mark.filterwarnings("ignore:.*(require gradients|non-linear|hooks).*:UserWarning")
def test_deeplift_rescale_rule_matches_a_hand_computation():
    """DeepLift multipliers of Linear -> GELU -> Linear, two rows, computed by hand:
    m_i = sum_k W1[k, i] r_k W2[k] with r_k = (gelu(z_k) - gelu(z'_k)) / (z_k - z'_k), and
    r_k = gelu'(z_k) where z_k = z'_k (unit 0: x_0 = x'_0, captum's eps branch)."""
    import math

    from captum.attr import DeepLift

    net = _one_gelu_net()
    g = torch.Generator().manual_seed(1)
    x, xb = (torch.randn(2, 5, generator=g, dtype=torch.float64) for _ in range(2))
    xb[:, 0] = x[:, 0]
    with G.deeplift_rescale(net):
        mult = DeepLift(net, multiply_by_inputs=False).attribute(x, xb, target=0).detach().numpy()
        attr, delta = DeepLift(net).attribute(x, xb, target=0, return_convergence_delta=True)
    plain = DeepLift(net, multiply_by_inputs=False).attribute(x, xb, target=0).detach().numpy()

    W1, b1, W2 = (p.detach().numpy() for p in (net[0].weight, net[0].bias, net[2].weight[0]))
    gelu = np.vectorize(lambda u: 0.5 * u * (1 + math.erf(u / math.sqrt(2))))
    dgelu = np.vectorize(lambda u: 0.5 * (1 + math.erf(u / math.sqrt(2)))
                         + u * math.exp(-u * u / 2) / math.sqrt(2 * math.pi))
    z, zb = x.numpy() @ W1.T + b1, xb.numpy() @ W1.T + b1
    assert np.all(z[:, 0] == zb[:, 0]) and np.all(np.abs(z[:, 1:] - zb[:, 1:]) > 1e-3)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(z == zb, dgelu(z), (gelu(z) - gelu(zb)) / (z - zb))
    want = (r * W2) @ W1
    np.testing.assert_allclose(mult, want, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(attr.detach().numpy(), (x - xb).numpy() * want, rtol=1e-10, atol=1e-14)
    assert np.all(np.abs(delta.detach().numpy()) < 1e-12)          # summation-to-delta, exact here
    assert abs(want[:, 0]).min() > 1e-3                              # the eps branch is visible in m_0
    assert not np.allclose(plain, want, rtol=1e-4, atol=0)           # the hooks are gone afterwards


@pytest.mark.filterwarnings("ignore:.*(require gradients|non-linear|hooks).*:UserWarning")
def test_deeplift_rescale_equals_captums_own_rule_and_leaves_captum_alone():
    """A Tanh that captum does not recognise, under deeplift_rescale, gets exactly the multipliers
    captum's built-in rule gives nn.Tanh; captum's module table is neither edited nor needed."""
    from captum.attr import DeepLift
    from captum.attr._core import deep_lift as dl   # read only: to check that nothing edits it

    class OwnTanh(torch.nn.Module):
        def forward(self, z):
            return torch.tanh(z)

    torch.manual_seed(2)
    native = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()
    own = torch.nn.Sequential(native[0], OwnTanh(), native[2])
    with torch.no_grad():
        native[0].weight[0] = torch.tensor([0.7, 0, 0, 0, 0], dtype=torch.float64)
    x, xb = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    xb[:2, 0] = x[:2, 0]                                             # eps branch in two rows
    before = dict(dl.SUPPORTED_NON_LINEAR)
    want = DeepLift(native, multiply_by_inputs=False).attribute(x, xb, target=1)
    untreated = DeepLift(own, multiply_by_inputs=False).attribute(x, xb, target=1)
    seen = []
    with G.deeplift_rescale(own, types=(OwnTanh,)):
        own[1].register_forward_hook(lambda *a: seen.append(dict(dl.SUPPORTED_NON_LINEAR)))
        got = DeepLift(own, multiply_by_inputs=False).attribute(x, xb, target=1)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-15)
    assert not torch.allclose(untreated, want, rtol=1e-4, atol=0)
    assert seen and all(t == before for t in seen) and dl.SUPPORTED_NON_LINEAR == before
    # the default types are ones captum does not treat itself (else both rules would apply)
    assert not set(G.rescaled_activation_types()) & set(dl.SUPPORTED_NON_LINEAR)
    with G.deeplift_rescale(_one_gelu_net()):
        assert dl.SUPPORTED_NON_LINEAR == before


@pytest.mark.filterwarnings("ignore:.*(require gradients|non-linear).*:UserWarning")
def test_deeplift_rescale_sums_to_delta_on_a_one_nonlinearity_net():
    """For Linear -> GELUActivation -> Linear, DeepLift's rescale rule sums exactly to
    f(x) - f(x'); with plain gradients through the GELU it does not."""
    from captum.attr import DeepLift

    net = _one_gelu_net()
    x, xb = torch.randn(1, 5, dtype=torch.float64), torch.zeros(1, 5, dtype=torch.float64)
    with G.deeplift_rescale(net):
        _, d_rule = DeepLift(net).attribute(x, xb, target=0, return_convergence_delta=True)
    with G.deeplift_rescale(net, enabled=False):
        _, d_off = DeepLift(net).attribute(x, xb, target=0, return_convergence_delta=True)
    _, d_plain = DeepLift(net).attribute(x, xb, target=0, return_convergence_delta=True)
    assert abs(d_rule.item()) < 1e-10
    assert abs(d_plain.item()) > 1e-4 and d_off.item() == d_plain.item()


def test_deeplift_classifier_uses_rescale_rule():
    c = model("bert", "sequence-classification")  # the pooler's nn.Tanh gets the rescale rule
    t = G.ClassTarget(0)
    x, g = hand_input_grad(c, IDS, t)
    xb = c.get_input_embeddings()(baseline_ids(IDS)).detach()[0]
    dl, delta = G.deeplift(c, IDS, t, baseline=BASE_ID, return_delta=True)
    assert not np.allclose(dl, ((x - xb) * g).sum(-1).numpy(), rtol=1e-6, atol=0)
    assert delta.shape == (1,)


# ---------------------------------------------------------------------------------------------
# Blank-out against a manual re-run
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHS)
def test_blank_out_matches_manual_rerun(arch):
    m = model(arch)
    t = mlm_target()
    n = IDS.shape[1]

    def p(ids):
        with torch.no_grad():
            z = m(input_ids=ids).logits[0, POS]
        return torch.softmax(z[[TGT, FOIL]], -1)[0].item()

    manual = []
    for j in range(n):
        ids = IDS.clone()
        ids[0, j] = UNK_ID
        manual.append(p(IDS) - p(ids))
    manual = np.array(manual)
    full = G.blank_out(m, IDS, t, replacement=UNK_ID, skip_special=False)
    np.testing.assert_allclose(full, manual, rtol=1e-8, atol=1e-12)
    assert np.any(np.abs(full) > 1e-6)
    skipped = G.blank_out(m, IDS, t, replacement=UNK_ID)
    zero = [0, POS, n - 1]
    assert np.all(skipped[zero] == 0)
    keep = [j for j in range(n) if j not in zero]
    np.testing.assert_allclose(skipped[keep], manual[keep], rtol=1e-8, atol=1e-12)
    chunked = G.blank_out(m, IDS, t, replacement=UNK_ID, skip_special=False, batch_size=3)
    np.testing.assert_allclose(chunked, full, rtol=1e-8, atol=1e-12)
    # blank-out ignores the gradient score choice: always the probability
    np.testing.assert_allclose(G.blank_out(m, IDS, mlm_target("logit"), replacement=UNK_ID, skip_special=False),
                               full, rtol=1e-10)


def test_blank_out_classifier_and_tokenizer():
    c = model("bert", "sequence-classification")
    t = G.ClassTarget(1)

    class Tok:  # minimal stand-in for a Hugging Face tokenizer
        cls_token_id, sep_token_id, pad_token_id, unk_token_id, mask_token_id = 2, 3, 0, UNK_ID, BASE_ID
        bos_token_id = eos_token_id = None

    with torch.no_grad():
        p0 = torch.softmax(c(input_ids=IDS).logits[0], -1)[1].item()
        ids = IDS.clone()
        ids[0, 4] = UNK_ID
        p4 = torch.softmax(c(input_ids=ids).logits[0], -1)[1].item()
    bo = G.attribute(c, IDS, t, method="blank_out", tokenizer=Tok())
    assert bo[4] == pytest.approx(p0 - p4, abs=1e-12)
    assert bo[0] == 0 and bo[-1] == 0
    np.testing.assert_array_equal(G.special_positions(IDS, None, Tok()), [1, 0, 0, 0, 0, 0, 0, 1])
    # [MASK] baseline resolved through the tokenizer
    np.testing.assert_allclose(G.integrated_gradients(c, IDS, t, tokenizer=Tok(), n_steps=8),
                               G.integrated_gradients(c, IDS, t, baseline=BASE_ID, n_steps=8))


# ---------------------------------------------------------------------------------------------
# Random baseline, dispatch, errors
# ---------------------------------------------------------------------------------------------
def test_random_scores():
    a = G.random_scores(8, seed=3)
    assert a.shape == (8,) and np.all((a >= 0) & (a < 1))
    np.testing.assert_array_equal(a, G.random_scores(8, seed=3))
    assert not np.array_equal(a, G.random_scores(8, seed=4))
    m = model("bert")
    r = G.attribute(m, IDS, mlm_target(), method="random", level="layers", seed=3)
    assert r.shape == (2, IDS.shape[1])


def test_dispatch_matches_functions():
    m = model("distilbert")
    t = mlm_target()
    np.testing.assert_array_equal(G.attribute(m, IDS, t, method="grad_l2"), G.grad_l2(m, IDS, t))
    np.testing.assert_array_equal(G.attribute(m, IDS[0], t, method="grad_l2"), G.grad_l2(m, IDS, t))
    assert set(G.METHODS) == {"grad_l2", "grad_x_input_l2", "grad_x_input_abs", "integrated_gradients",
                              "deeplift", "blank_out", "random"}


@pytest.mark.parametrize("call, message", [
    (lambda m, c, b: G.attribute(m, IDS, mlm_target(), method="saliency"), "Unknown method"),
    (lambda m, c, b: G.attribute(m, IDS, mlm_target(), level="heads"), "Unknown level"),
    (lambda m, c, b: G.grad_l2(m, IDS, G.MLMTarget(8, TGT)), "out of range"),
    (lambda m, c, b: G.grad_l2(m, IDS, G.MLMTarget(-1, TGT)), "out of range"),
    (lambda m, c, b: G.grad_l2(m, IDS, G.MLMTarget(POS, 10_000)), "outside the vocabulary"),
    (lambda m, c, b: G.grad_l2(m, IDS, G.MLMTarget(POS, TGT, score="logit_diff")), "foil"),
    (lambda m, c, b: G.grad_l2(m, IDS, G.MLMTarget(POS, TGT, score="loss")), "Unknown MLM score"),
    (lambda m, c, b: G.grad_l2(b, IDS, mlm_target()), "no head"),
    (lambda m, c, b: G.grad_l2(c, IDS, mlm_target()), "masked-LM"),
    (lambda m, c, b: G.grad_l2(m, IDS, G.ClassTarget(0)), "sequence classifier"),
    (lambda m, c, b: G.grad_l2(c, IDS, G.ClassTarget(5)), "out of range"),
    (lambda m, c, b: G.grad_l2(m, IDS, 3), "MLMTarget or a ClassTarget"),
    (lambda m, c, b: G.grad_l2(m, IDS.float(), mlm_target()), "integer"),
    (lambda m, c, b: G.grad_l2(m, torch.cat([IDS, IDS]), mlm_target()), "shape"),
    (lambda m, c, b: G.blank_out(m, IDS, mlm_target()), "pass tokenizer"),
    (lambda m, c, b: G.integrated_gradients(m, IDS, mlm_target()), "pass tokenizer"),
    (lambda m, c, b: G.integrated_gradients(m, IDS, mlm_target(), baseline="cls"), "Unknown baseline token"),
    (lambda m, c, b: G.integrated_gradients(m, IDS, mlm_target(), baseline=BASE_ID, aggregate="max"),
     "Unknown aggregate"),
    (lambda m, c, b: G.integrated_gradients(m, IDS, mlm_target(), baseline=BASE_ID, n_steps=1), "n_steps"),
    (lambda m, c, b: G.attribute(m, IDS, mlm_target(), method="grad_l2", n_steps=5), "does not take"),
    (lambda m, c, b: G.attribute(m, IDS, mlm_target(), method="blank_out", level="layers", replacement=UNK_ID),
     "only defined at level='input'"),
])
def test_errors(call, message):
    m, c = model("bert"), model("bert", "sequence-classification")
    b = model("bert", "base")
    with pytest.raises(G.GradientAttributionError, match=message):
        call(m, c, b)


# ---------------------------------------------------------------------------------------------
# Batched attribution: the fast layer-wise path against captum's Layer* classes on the full model,
# and a padded batch against one sequence at a time
# ---------------------------------------------------------------------------------------------
class _LogitScore(torch.nn.Module):
    """``f(input_ids)``: the target's score from the model's full logits (the references' f)."""

    def __init__(self, m, target):
        super().__init__()
        self.m, self.target = m, target

    def forward(self, input_ids):
        return G.target_score(self.m(input_ids=input_ids).logits, self.target)


def _captum_layer_reference(m, ids, target, which, n_steps=12):
    """Slow, obvious reference: captum's LayerIntegratedGradients / LayerDeepLift on the whole
    model (every step re-runs every layer), one hooked layer at a time, plain logits scoring."""
    from captum.attr import LayerDeepLift, LayerIntegratedGradients

    rows = []
    for layer in G.attribution_layers(m, "layers"):
        if which == "ig":
            a = LayerIntegratedGradients(_LogitScore(m, target), layer).attribute(ids, baselines=baseline_ids(ids), n_steps=n_steps)
        else:
            with G.deeplift_rescale(m):
                a = LayerDeepLift(_LogitScore(m, target), layer).attribute(ids, baselines=baseline_ids(ids))
        rows.append(a[0].sum(-1).detach())
    return torch.stack(rows).numpy()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("task", ["mlm", "sequence-classification"])
def test_layerwise_ig_and_deeplift_match_captum_layer_classes(arch, task):
    m = model(arch, task)
    t = mlm_target() if task == "mlm" else G.ClassTarget(1)
    for which, method, opts in (("ig", "integrated_gradients", {"n_steps": 12}), ("dl", "deeplift", {})):
        want = _captum_layer_reference(m, IDS, t, which, **opts)
        got = G.batch_attribute(m, IDS, [t], [method], "layers", baseline=BASE_ID, **opts)[method][0]
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)
        assert np.abs(want).max() > 1e-6  # far above the tolerance: a wrong path would fail


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("arch", ARCHS)
def test_padded_batch_equals_one_sequence_at_a_time(arch):
    m = model(arch)
    seqs = [IDS[0], torch.tensor([2, 7, 5, 9, 3]), torch.tensor([2, 13, 16, 5, 19, 11, 3])]
    targets = [mlm_target(), G.MLMTarget(2, TGT, FOIL), G.MLMTarget(4, 15, FOIL)]
    n = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), n, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, s in enumerate(seqs):
        ids[b, :len(s)], mask[b, :len(s)] = s, 1
    for level in G.LEVELS:
        got = G.batch_attribute(m, ids, targets, G.GRADIENT_METHODS, level, attention_mask=mask, baseline=BASE_ID,
                                n_steps=8, return_delta=True)
        for b, (s, t) in enumerate(zip(seqs, targets)):
            one = G.batch_attribute(m, s[None], [t], G.GRADIENT_METHODS, level, baseline=BASE_ID, n_steps=8,
                                    return_delta=True)
            for meth in G.GRADIENT_METHODS:
                np.testing.assert_allclose(got[meth][b][..., :len(s)], one[meth][0], rtol=1e-9, atol=1e-12,
                                           err_msg=f"{meth} {level} row {b}")          # float64
                assert np.all(got[meth][b][..., len(s):] == 0)
            for meth in ("integrated_gradients_delta", "deeplift_delta"):
                np.testing.assert_allclose(got[meth][b], one[meth][0], rtol=1e-9, atol=1e-12)   # float64


def test_batch_attribute_checks_the_head():
    """The layer-wise path scores z_t = transform(h) . W_t + b_t from the decoder's weights; a head
    whose decoder computes something else must be detected, not silently mis-scored."""
    m = cmixlib.random_model("bert", task="mlm", dtype=torch.float64, seed=1)
    _, decoder = cmixlib.models.arch.mlm_head(m)
    linear = type(decoder).forward
    decoder.forward = lambda h: linear(decoder, h) * 1.01      # logits no longer h W^T + b
    with pytest.raises(G.GradientAttributionError, match="does not reproduce"):
        G.batch_attribute(m, IDS, [mlm_target()], ["integrated_gradients"], "layers", baseline=BASE_ID, n_steps=4)


def test_public_names():
    assert set(G.__all__) <= set(dir(G))
    assert G.mlm_head is cmixlib.models.arch.mlm_head                  # re-exported for older callers
    for name in ("batch_attribute", "blank_out", "random_scores", "deeplift_rescale", "ScoreModule"):
        assert name in G.__all__


def test_batch_attribute_errors():
    m = model("bert")
    with pytest.raises(G.GradientAttributionError, match="one per row"):
        G.batch_attribute(m, torch.cat([IDS, IDS]), [mlm_target()])
    with pytest.raises(G.GradientAttributionError, match="one type and score"):
        G.batch_attribute(m, torch.cat([IDS, IDS]), [mlm_target(), mlm_target("prob")])
    with pytest.raises(G.GradientAttributionError, match="Unknown gradient method"):
        G.batch_attribute(m, IDS, [mlm_target()], ["blank_out"])


# ---------------------------------------------------------------------------------------------
# The last block's FFN at the scored row only (ScoreModule / MLMTail), against the full forward
# ---------------------------------------------------------------------------------------------
def _input_level_reference(m, ids, target, which, n_steps=8):
    """Slow, obvious reference: captum's LayerIntegratedGradients / LayerDeepLift on the word
    embeddings of the whole, unchanged model, scored from its full logits; ``(n,)``."""
    from captum.attr import LayerDeepLift, LayerIntegratedGradients

    emb = m.get_input_embeddings()
    if which == "ig":
        a = LayerIntegratedGradients(_LogitScore(m, target), emb).attribute(ids, baselines=baseline_ids(ids),
                                                             n_steps=n_steps)
    else:
        with G.deeplift_rescale(m):
            a = LayerDeepLift(_LogitScore(m, target), emb).attribute(ids, baselines=baseline_ids(ids))
    return a[0].sum(-1).detach().numpy()


def _ffn_input_rows(m):
    """Record the sequence length of every input the last block's FFN input layer computes on."""
    seen: list[int] = []
    ffn = cmixlib.models.arch.layer_parts(m)[-1].ffn_in
    handle = ffn.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].shape[1]))
    return seen, handle


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("arch", ARCHS + ("mpnet",))
@pytest.mark.parametrize("task", ["mlm", "sequence-classification"])
def test_target_row_ffn_equals_the_full_model(arch, task):
    """Every gradient method runs the last block's FFN at the scored row only (the MLM target, a
    classifier's first token) and still equals the full model's numbers: plain gradients against
    autograd through ``inputs_embeds``, IG and DeepLift against captum's Layer* classes."""
    m = model(arch, task)
    t = mlm_target() if task == "mlm" else G.ClassTarget(1, score="prob")
    seen, handle = _ffn_input_rows(m)
    try:
        got = G.batch_attribute(m, IDS, [t], G.GRADIENT_METHODS, "input", baseline=BASE_ID, n_steps=8)
    finally:
        handle.remove()
    # the fast path really ran: G×I, IG and DeepLift at one row; in full only the classifier's
    # first-row check
    assert seen.count(1) >= 3 and seen.count(IDS.shape[1]) == int(task != "mlm")
    x, g = hand_input_grad(m, IDS, t)
    np.testing.assert_allclose(got["grad_l2"][0], g.norm(dim=-1).numpy(), rtol=1e-8, atol=1e-13)
    np.testing.assert_allclose(got["grad_x_input_abs"][0], (g * x).sum(-1).abs().numpy(),
                               rtol=1e-8, atol=1e-13)
    for which, meth in (("ig", "integrated_gradients"), ("dl", "deeplift")):
        want = _input_level_reference(m, IDS, t, which)
        np.testing.assert_allclose(got[meth][0], want, rtol=1e-7, atol=1e-12, err_msg=meth)
        assert np.abs(want).max() > 1e-6


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_classifier_head_reading_every_token_runs_in_full():
    """A classifier head that reads more than the first token fails the first-row check: the
    FFN then runs on every row and the numbers stay the full model's."""
    m = cmixlib.random_model("bert", task="sequence-classification", dtype=torch.float64, seed=1)
    pooler = m.bert.pooler
    pooler.forward = lambda h: pooler.activation(pooler.dense(h.mean(dim=1)))   # mean pooling
    t = G.ClassTarget(1, score="prob")
    assert not G.target_rows.first_row_head(m, IDS, torch.ones_like(IDS), [t])
    seen, handle = _ffn_input_rows(m)
    try:
        got = G.batch_attribute(m, IDS, [t], ["grad_l2", "integrated_gradients"], "input",
                                baseline=BASE_ID, n_steps=8)
    finally:
        handle.remove()
    assert seen.count(1) == 1 and len(seen) > 3      # one row only in the check itself
    _, g = hand_input_grad(m, IDS, t)
    np.testing.assert_allclose(got["grad_l2"][0], g.norm(dim=-1).numpy(), rtol=1e-8, atol=1e-13)
    np.testing.assert_allclose(got["integrated_gradients"][0],
                               _input_level_reference(m, IDS, t, "ig"), rtol=1e-7, atol=1e-12)
