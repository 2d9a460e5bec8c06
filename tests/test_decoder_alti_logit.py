"""ALTI-Logit as its authors evaluate it (cmixlib.methods.alti_logit): the explanation with the
embedding term at the explained token, per-head terms, the unattributed remainder, the
reconstruction checked at run time. References by loops on small random float64 models with the
norms computed in float64 (tests/test_decoder.py's helpers; rule 1)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib.methods import alti_logit as dl
from cmixlib.forward.decoder import run_decoder
from cmixlib.forward.decoder_checks import DecompositionError
from test_decoder import close, float64_norms, heads, hooked, make, parts_by_hand


@torch.no_grad()
def head_terms_by_loops(model, arch, ids, target, foil):
    """(L, H, n, n): alpha^h_ik u~_i . (v^g(h)_k W_O^h), u~_i the final norm linearised by hand
    at row i (float64 norms: RMSNorm for Llama, LayerNorm for GPT-2)."""
    rec = hooked(model, arch, ids)
    H, KV = heads(model, arch)
    n, L = len(ids), model.config.num_hidden_layers
    u = model.lm_head.weight[target] - model.lm_head.weight[foil]
    norm = model.model.norm if arch == "llama" else model.transformer.ln_f
    out = np.zeros((L, H, n, n))
    for k in range(L):
        _, _, _, _, Wv, bv, Wo, _ = parts_by_hand(model, arch, k)
        dh = Wo.shape[0] // H
        for i in range(n):
            fin = rec["fin"][i]
            if arch == "llama":
                ut = norm.weight * u / torch.sqrt(fin.pow(2).mean() + norm.variance_epsilon)
            else:
                g = norm.weight * u
                ut = (g - g.mean()) / torch.sqrt(fin.var(unbiased=False) + norm.eps)
            for j in range(i + 1):
                for h in range(H):
                    gk = h // (H // KV)
                    v = rec["ln1"][k][j] @ Wv[:, gk * dh:(gk + 1) * dh] + bv[gk * dh:(gk + 1) * dh]
                    out[k, h, i, j] = float(rec["alpha"][k][h, i, j]
                                            * (ut @ (v @ Wo[h * dh:(h + 1) * dh])))
    return out


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_per_head_terms_embedding_and_remainder(arch):
    model, ids = make(arch, seed=8)
    with float64_norms(model):
        res = dl.alti_logit(run_decoder(model, ids), model, target=5, foil=11, heads=True)
        want = head_terms_by_loops(model, arch, ids, 5, 11)
    close(res.head_sources, want, err_msg="per-head terms")
    close(res.head_sources.sum(1), res.sources, err_msg="heads sum to the layer's terms")
    close(res.head_tracked().sum(1), res.tracked, err_msg="tracked heads sum to tracked")
    # the authors' explanation: tracked attention terms + the embedding term at the row itself
    n = len(ids)
    expl = res.tracked.sum(0)
    expl[np.arange(n), np.arange(n)] += res.embedding
    np.testing.assert_array_equal(res.explanation, expl)
    np.testing.assert_array_equal(res.explain(embedding=False), res.tracked.sum(0))
    # what no token receives: MLPs and biases; with the explanation it is the whole logit
    close(res.remainder, res.mlp.sum(0) + res.attn_bias.sum(0) + res.final_bias)
    close(res.explanation.sum(-1) + res.remainder, res.logit, err_msg="explanation + remainder")
    s = res.summary()
    assert s["logit"] == pytest.approx(s["tokens"] + s["remainder"], rel=1e-9, abs=1e-12)
    assert s["remainder"] == pytest.approx(s["mlp"] + s["biases"], rel=1e-9, abs=1e-12)
    assert 0 <= s["remainder_share"] <= 1


def test_explain_logit_is_alti_logit_per_sentence_with_targets_per_prompt():
    model, _ = make("llama", seed=9)
    batch = {"input_ids": torch.tensor([[1, 5, 9, 4], [2, 7, 4, 3]])}
    got = dl.explain_logit(model, None, batch, target=[11, 22], foil=3)
    for b, t in enumerate((11, 22)):
        want = dl.alti_logit(run_decoder(model, batch["input_ids"][b]), model, t, 3)
        np.testing.assert_array_equal(got[b].explanation, want.explanation)
        assert (got[b].target == t).all() and (got[b].foil == 3).all()
    one = dl.explain_logit(model, None, {"input_ids": batch["input_ids"][0]}, target=11)
    assert isinstance(one, dl.AltiLogit) and one.foil is None
    with pytest.raises(ValueError, match="heads=True"):
        one.head_tracked()


def test_the_reconstruction_is_checked_at_run_time(monkeypatch):
    """A wrong logit scale in ALTI-Logit alone (the capture's own checks untouched) is refused."""
    model, ids = make("llama", seed=10)
    monkeypatch.setattr(dl, "decoder_logits_divisor", lambda m: 2.0)
    with pytest.raises(DecompositionError, match="do not add up to the logit"):
        dl.alti_logit(run_decoder(model, ids), model, target=5, foil=11)
    with pytest.raises(DecompositionError, match="LlamaForCausalLM"):
        cmixlib.context_mixing(model, None, {"input_ids": ids}, cmixlib.AltiLogit(target=5))
