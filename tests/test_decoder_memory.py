"""Streaming the decoder methods (cmixlib.methods.decoder_maps.vector_maps): N, N-Res and ALTI are
computed from blocks of rows of the per-source vectors, one layer at a time, and equal the
previous implementation (the full (n, n, d) tensor of every layer, kept) to 1e-12 relative in
float64; a block of a single row (the most blocks) is tested too. The previous implementation is
restated here from the formulas it computed."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib.methods import decoder_maps as dm
from cmixlib.forward.decoder import random_decoder, run_decoder


def previous(st):
    """The former per-layer code: F = st.attn_vectors (n, n, d) at once."""
    F = st.attn_vectors
    n = st.n
    mask = torch.ones(n, n, dtype=F.dtype).tril_()
    z = F.clone()
    idx = torch.arange(n)
    z[idx, idx] += st.resid_in
    y = st.resid_mid
    dist = torch.linalg.vector_norm(y[:, None, :] - z, ord=1, dim=-1)
    alti = torch.clamp(torch.linalg.vector_norm(y, ord=1, dim=-1)[:, None] - dist, min=0.0)
    return {"attn_norm": torch.linalg.vector_norm(F, dim=-1) * mask,
            "attn_norm_res": torch.linalg.vector_norm(z, dim=-1) * mask,
            "alti_layer": alti * mask}


@pytest.mark.parametrize("arch", ["llama", "gpt2", "granite"])
@pytest.mark.parametrize("block", ["default", "one row", "three rows"])
@torch.no_grad()
def test_streamed_maps_equal_the_previous_implementation(arch, block, monkeypatch):
    model = random_decoder(arch, dtype=torch.float64, seed=4)
    n = 9
    ids = torch.randint(0, 101, (n,), generator=torch.Generator().manual_seed(1))
    d = model.get_input_embeddings().embedding_dim
    if block != "default":
        monkeypatch.setattr(dm, "VECTOR_CHUNK_ELEMENTS", (1 if block == "one row" else 3) * n * d)
    cap = run_decoder(model, ids)
    for k, st in enumerate(cap.layers):
        got = dm.vector_maps(st)
        want = previous(st)
        for name in dm.VECTOR_METHODS:
            g, w = got[name].detach().numpy(), want[name].detach().numpy()
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12 * np.abs(w).max(),
                                       err_msg=f"{arch} {name} layer {k} ({block})")
    # through the entry point (the layer loop and the release of each layer's tensors)
    maps = cmixlib.context_mixing(model, None, {"input_ids": ids}, list(dm.VECTOR_METHODS)
                                  + ["n_fixedres", "alti"], normalize=False)
    for k, st in enumerate(cap.layers):
        want = previous(st)
        for name in dm.VECTOR_METHODS:
            np.testing.assert_allclose(maps[name][k], want[name].detach().numpy(), rtol=1e-12,
                                       atol=1e-12 * float(want[name].abs().max()))


def test_layers_are_released_after_use():
    model = random_decoder("llama", dtype=torch.float64, seed=5)
    cap = run_decoder(model, torch.arange(6))
    assert all("head_out" not in st.__dict__ and "attn_vectors" not in st.__dict__
               for st in cap.layers)
    st = cap.layers[0]
    dm.vector_maps(st)
    st.release()
    assert not {"values", "head_out", "attn_vectors"} & set(st.__dict__)
