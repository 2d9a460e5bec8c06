"""One method, one function (issue 41): where the math of a method is the same for a post-LN
encoder and a pre-LN decoder, both routes of :func:`cmixlib.context_mixing` run the same
function object. Each shared function is replaced, in the module that owns it, by a wrapper that
counts its calls; the claim fails if either route computes the method without calling it (e.g.
with a copy of the formula of its own). The same mistakes also raise the same error type on both.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib.forward import decomposition
from cmixlib.forward.decoder import random_decoder, run_decoder
from cmixlib.forward.encoder import encoder_layers, iter_sentences, layer_states, run_and_capture
from cmixlib.methods import aggregation, layer_math, vz_distances
from cmixlib.methods.value_zeroing import value_zeroing_layer as encoder_vz_layer
from cmixlib.methods.value_zeroing_decoder import value_zeroing_layer as decoder_vz_layer

#: (module, function name, methods that must call it on both families)
SHARED = [
    (layer_math, "attention_map", ["attention"]),
    (decomposition, "attention_vectors", ["attn_norm", "attn_norm_res", "alti_layer"]),
    (layer_math, "vector_norms", ["attn_norm", "attn_norm_res"]),
    (layer_math, "alti_contributions", ["alti_layer"]),
    (layer_math, "fixed_residual", ["w_fixedres", "n_fixedres"]),
    (vz_distances, "distance_function", ["value_zeroing"]),
    (vz_distances, "standardizer", ["value_zeroing"]),
    (vz_distances, "standardized", ["value_zeroing"]),
    (aggregation, "rollout", ["attention_rollout", "alti", "value_zeroing_rollout"]),
    (aggregation, "attention_flow", ["attention_flow"]),
]


@pytest.fixture(scope="module")
def models():
    return {"encoder": cmixlib.random_model("bert", layers=2),
            "decoder": random_decoder("llama", layers=2)}


INPUTS = {"encoder": {"input_ids": torch.tensor([[1, 5, 6, 7, 8, 2]])},
          "decoder": {"input_ids": torch.arange(6)}}


def _counting(monkeypatch, module, name) -> list[int]:
    real = getattr(module, name)
    calls = [0]

    def wrapper(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("module, name, methods", SHARED,
                         ids=[f"{m.__name__.rsplit('.', 1)[-1]}.{n}" for m, n, _ in SHARED])
@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_both_families_call_the_shared_function(module, name, methods, kind, models,
                                                monkeypatch):
    for method in methods:
        calls = _counting(monkeypatch, module, name)
        asked = cmixlib.ValueZeroing(method, standardize=True) \
            if method.startswith("value_zeroing") else method
        cmixlib.context_mixing(models[kind], None, INPUTS[kind], [asked])
        assert calls[0] > 0, f"the {kind} route computes {method} without {name}"
        monkeypatch.undo()


def test_a_copied_formula_would_fail_the_claim(models, monkeypatch):
    """The check can fail: a route with its own copy of the formula never calls the wrapper."""
    calls = _counting(monkeypatch, layer_math, "alti_contributions")
    monkeypatch.setattr(cmixlib.methods.norms, "alti_layer", lambda st: torch.zeros(st.n, st.n))
    monkeypatch.setitem(cmixlib.methods.encoder_maps.LAYER_FUNCTIONS, "alti_layer",
                        cmixlib.methods.norms.alti_layer)
    cmixlib.context_mixing(models["encoder"], None, INPUTS["encoder"], ["alti_layer"],
                           normalize=False)
    assert calls[0] == 0


def test_the_distance_is_looked_up_in_one_table(models, monkeypatch):
    """Both Value Zeroing routes score with the functions of vz_distances.DISTANCE_FUNCTIONS."""
    for kind in ("encoder", "decoder"):
        calls = [0]
        real = vz_distances.DISTANCE_FUNCTIONS["euclidean"]

        def counting(a, b, real=real):
            calls[0] += 1
            return real(a, b)

        monkeypatch.setitem(vz_distances.DISTANCE_FUNCTIONS, "euclidean", counting)
        cmixlib.context_mixing(models[kind], None, INPUTS[kind],
                               [cmixlib.ValueZeroing(distance="euclidean")])
        assert calls[0] > 0, kind
        monkeypatch.undo()


def _layer_states(models):
    enc = models["encoder"]
    cap = run_and_capture(enc, INPUTS["encoder"]["input_ids"])
    st_enc = layer_states(cap, encoder_layers(enc), 0, iter_sentences(cap)[0])[0]
    st_dec = run_decoder(models["decoder"], INPUTS["decoder"]["input_ids"]).layers[0]
    return st_enc, st_dec


@pytest.mark.parametrize("kwargs", [dict(distance="manhattan"), dict(method="quick")],
                         ids=["distance", "method"])
def test_the_same_mistake_gives_the_same_error(kwargs, models):
    st_enc, st_dec = _layer_states(models)
    for layer, st in ((encoder_vz_layer, st_enc), (decoder_vz_layer, st_dec)):
        with pytest.raises(cmixlib.InputError, match="Unknown Value Zeroing"):
            layer(st, **kwargs)
    with pytest.raises(cmixlib.InputError, match="Unknown Value Zeroing"):
        cmixlib.ValueZeroing(**{"implementation" if k == "method" else k: v
                                for k, v in kwargs.items()})


MISTAKES = {      # what a user gets wrong in a call: the same error on either family
    "an old keyword": dict(methods=["value_zeroing"], vz_distance="euclidean"),
    "one method twice": dict(methods=["alti", cmixlib.MixingMethod("alti")]),
    "two Value Zeroing settings": dict(methods=[
        "value_zeroing", cmixlib.ValueZeroing("value_zeroing_rollout", standardize=True)]),
    "standardize of the wrong size": dict(methods=[
        cmixlib.ValueZeroing(standardize=(np.zeros(3), np.ones(3)))]),
    "standardize a string": dict(methods=[cmixlib.ValueZeroing(standardize="yes")]),
    "normalize a string": dict(methods=["alti"], normalize="yes"),
    "heads an int": dict(methods=["alti_layer"], heads=1),
    "a method with no per-head form": dict(methods=["alti"], heads=True),
    "a negative row": dict(methods=["alti"], rows=[-1]),
    "an unknown method": dict(methods=["alti_flow"]),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_call_mistake_gives_the_same_error_on_both_families(mistake, models):
    """The same wrong call gives the same error type and message on an encoder and a decoder
    (the hidden size, which the message names, aside)."""
    got = []
    for kind in ("encoder", "decoder"):
        with pytest.raises((TypeError, ValueError)) as info:
            cmixlib.context_mixing(models[kind], None, INPUTS[kind], **MISTAKES[mistake])
        d = models[kind].get_input_embeddings().embedding_dim
        got.append((type(info.value), str(info.value).replace(str(d), "<d>")))
    assert got[0] == got[1]


def test_a_model_in_training_mode_is_refused_alike(models):
    for kind in ("encoder", "decoder"):
        model = models[kind].train()
        try:
            with pytest.raises(cmixlib.InputError, match="training mode"):
                cmixlib.context_mixing(model, None, INPUTS[kind], ["attention"])
            with pytest.raises(cmixlib.InputError, match="training mode"):
                cmixlib.capture(model, INPUTS[kind])
        finally:
            model.eval()


def test_alti_logit_is_a_registered_decoder_only_method(models):
    """``alti_logit`` is in the registry (kind "logit"), accepted by check_methods, computed for
    a decoder and refused for an encoder with the same error type as any other mistake."""
    from cmixlib.methods.dispatch import DECODER_ONLY_METHODS
    from cmixlib.methods.registry import ALL_METHODS

    assert cmixlib.check_methods("alti_logit") == ["alti_logit"]
    assert DECODER_ONLY_METHODS["alti_logit"] is ALL_METHODS["alti_logit"]
    assert "alti_logit" not in cmixlib.METHODS          # METHODS: what every model computes
    maps = cmixlib.context_mixing(models["decoder"], None, INPUTS["decoder"],
                                  [cmixlib.AltiLogit(target=3)])
    assert maps["alti_logit"].shape == (2, 6, 6)
    with pytest.raises(cmixlib.InputError, match="need a decoder LM"):
        cmixlib.context_mixing(models["encoder"], None, INPUTS["encoder"], ["alti_logit"])
