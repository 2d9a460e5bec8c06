"""The user's model and process state are left as they were: a model loaded with SDPA attention
stays SDPA after context_mixing / capture (eager attention only for the captured pass), and
load_model leaves the process's default socket timeout alone."""
from __future__ import annotations

import socket

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib.models import hub as models


def _sdpa_model():
    model = cmixlib.random_model("bert", layers=2)
    model.set_attn_implementation("sdpa")
    assert model.config._attn_implementation == "sdpa"
    return model


def test_context_mixing_leaves_an_sdpa_model_sdpa():
    model = _sdpa_model()
    ids = {"input_ids": torch.tensor([[1, 5, 6, 7, 2]])}
    eager = cmixlib.random_model("bert", layers=2)          # the same weights (seed 0), eager
    want = cmixlib.context_mixing(eager, None, ids, ["attention", "alti"])
    got = cmixlib.context_mixing(model, None, ids, ["attention", "alti"])
    assert model.config._attn_implementation == "sdpa"
    for m in want:
        np.testing.assert_allclose(got[m], want[m], atol=1e-6)
    cmixlib.capture(model, ids)
    cmixlib.context_mixing_ratio(model, None, ids)
    assert model.config._attn_implementation == "sdpa"


def test_eager_attention_restores_after_an_error():
    from cmixlib.forward.encoder import eager_attention

    model = _sdpa_model()
    with pytest.raises(RuntimeError):
        with eager_attention(model):
            assert model.config._attn_implementation == "eager"
            raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("before", [None, 7.5])
def test_hub_check_restores_the_default_socket_timeout(monkeypatch, before):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(before)
    try:
        assert models.hub_reachable() is False
        assert socket.getdefaulttimeout() == before
    finally:
        socket.setdefaulttimeout(old)


def test_load_model_leaves_the_default_socket_timeout(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(3.0)
    try:
        with pytest.raises(cmixlib.ModelLoadError):
            cmixlib.load_model("no-such-org/no-such-model", allow_fallback=False)
        assert socket.getdefaulttimeout() == 3.0
    finally:
        socket.setdefaulttimeout(old)
