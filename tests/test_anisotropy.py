"""Anisotropy (ALTI Figure 3): the closed form against explicit loops over pairs, the three sets
of vectors against a slow reference built from hooks and module weights (float64, several
families), clear errors, and the experiment `alti-fig3-anisotropy` through the Sources seam."""
import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import cmixlib
from cmixlib import experiments as X
from cmixlib.data import paper_numbers as pn
from cmixlib.metrics.anisotropy import (mean_pairwise_cosine, sentence_anisotropy, token_anisotropy,
                                        transformed_anisotropy)
from cmixlib.forward.encoder import encoder_layers, layer_states, run_and_capture
from cmixlib.book.claims.rules_alti import FIG3_ISOTROPY_THRESHOLD, fig3_claims
from cmixlib.experiments.alti_anisotropy import fig3_repo_frame
from cmixlib.book.verdicts import claims_verdict
from fakes import FakeBundle
from tolerances import assert_no_worse_than_baseline, rounding_atol

REPO = Path("/work/.mirror/mt-upc+transformer-contributions/repo")


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "cache"))


def pair_mean(vectors) -> float:
    """Slow and obvious: the cosine of every ordered pair of distinct vectors, averaged."""
    v = torch.as_tensor(vectors, dtype=torch.float64)
    n = v.shape[0]
    cos = [F.cosine_similarity(v[j], v[k], dim=0).item() for j in range(n) for k in range(n) if j != k]
    return float(np.mean(cos))


# ---------------------------------------------------------------------------------------------
# The closed form
# ---------------------------------------------------------------------------------------------
def test_closed_form_equals_the_mean_over_pairs():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(3, 4, 6, 5, generator=g) + torch.tensor([1.0, 0, 0, 0, 0])
    got = mean_pairwise_cosine(v)
    assert got.shape == (3, 4) and got.dtype == torch.float64
    for a in range(3):
        for b in range(4):
            assert got[a, b].item() == pytest.approx(pair_mean(v[a, b]), abs=1e-12)
    # bounds: identical directions give 1; a vector and its opposite give -1; scale does not matter
    same = torch.ones(5, 3) * torch.arange(1, 6)[:, None]
    assert mean_pairwise_cosine(same).item() == pytest.approx(1.0)
    assert mean_pairwise_cosine(torch.tensor([[1.0, 2.0], [-3.0, -6.0]])).item() == pytest.approx(-1.0)
    # orthonormal vectors: exactly 0
    assert mean_pairwise_cosine(torch.eye(4)).item() == pytest.approx(0.0, abs=1e-15)


def test_clear_errors():
    with pytest.raises(ValueError, match="at least 2 vectors"):
        mean_pairwise_cosine(torch.randn(3, 1, 4))
    with pytest.raises(ValueError, match="zero vector"):
        mean_pairwise_cosine(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match=r"\(\.\.\., N, d\)"):
        mean_pairwise_cosine(torch.randn(4))
    with pytest.raises(ValueError, match="NaN"):
        mean_pairwise_cosine(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))
    model = cmixlib.random_model("bert", seed=0)
    with pytest.raises(ValueError, match="one sentence"):
        sentence_anisotropy(model, torch.randint(5, 100, (2, 5)))
    with pytest.raises(ValueError, match="at least 2 vectors"):      # 3 tokens minus [CLS]/[SEP]
        sentence_anisotropy(model, torch.tensor([[1, 7, 2]]), include_special=False)
    cap = run_and_capture(model, torch.tensor([[1, 7, 8, 9, 2]]))
    st = layer_states(cap, encoder_layers(model), 0, torch.arange(5))[0]
    with pytest.raises(ValueError, match="rows"):
        transformed_anisotropy(st, include_special=False)


# ---------------------------------------------------------------------------------------------
# The three sets of vectors against a slow reference (hooks + weights sliced by hand)
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def reference(model, ids, drop_special=False):
    """Per layer, by explicit loops: value vectors and LN1 input/output captured with hooks from one
    ordinary forward, z_ij = sum_h alpha^h_ij (v^h_j W_O^h) + [i=j] x_i summed head by head,
    T_i(x_j) = gamma1 (z_ij - mean z_ij) / s1_i, then the mean cosine over pairs."""
    mods = encoder_layers(model)
    rec = {"v": {}, "ln_in": {}, "ln_out": {}}
    handles = []
    for k, m in enumerate(mods):
        def keep_value(mod, inp, out, k=k):
            rec["v"][k] = out[0]

        def keep_ln1(mod, inp, out, k=k):
            rec["ln_in"][k], rec["ln_out"][k] = inp[0][0], out[0]
        handles += [m.value.register_forward_hook(keep_value), m.ln1.register_forward_hook(keep_ln1)]
    try:
        out = model(input_ids=ids, output_hidden_states=True, output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    n = ids.shape[1]
    pos = list(range(1, n - 1)) if drop_special else list(range(n))
    hidden = [pair_mean(h[0][pos]) for h in out.hidden_states]
    transformed, attn_out = [], []
    for k, m in enumerate(mods):
        x, a, v = out.hidden_states[k][0], out.attentions[k][0], rec["v"][k]
        H = a.shape[0]
        dh = v.shape[-1] // H
        p = rec["ln_in"][k]
        s1 = torch.sqrt(p.var(-1, unbiased=False) + m.ln1.eps)
        per_query = []
        for i in pos:
            T = []
            for j in pos:
                z = x[i].clone() if i == j else torch.zeros_like(x[i])
                for h in range(H):
                    sl = slice(h * dh, (h + 1) * dh)
                    z += a[h, i, j] * (v[j, sl] @ m.out.weight[:, sl].T)
                T.append(m.ln1.weight * (z - z.mean()) / s1[i])
            per_query.append(pair_mean(torch.stack(T)))
        transformed.append(per_query)
        attn_out.append(pair_mean(rec["ln_out"][k][pos]))
    return hidden, attn_out, transformed


@pytest.mark.parametrize("arch", ["bert", "distilbert", "roberta"])
@pytest.mark.parametrize("drop_special", [False, True])
def test_anisotropies_match_a_slow_reference(arch, drop_special):
    model = cmixlib.random_model(arch, layers=2, seed=3, dtype=torch.float64)
    ids = torch.tensor([[0 if arch == "roberta" else 1, 11, 42, 7, 99, 13, 2]])
    hidden, attn_out, transformed = reference(model, ids, drop_special)
    got = sentence_anisotropy(model, ids, include_special=not drop_special, per_query=True)
    np.testing.assert_allclose(got["hidden"].numpy(), hidden, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["attn_output"].numpy(), attn_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["transformed"].numpy(), np.array(transformed), rtol=1e-10, atol=1e-12)
    mean = sentence_anisotropy(model, ids, include_special=not drop_special)["transformed"]
    np.testing.assert_allclose(mean.numpy(), np.mean(transformed, axis=1), rtol=1e-10)
    # the hidden states of the model's own output, through token_anisotropy
    hs = torch.stack(model(input_ids=ids, output_hidden_states=True).hidden_states)[:, 0]
    np.testing.assert_allclose(token_anisotropy(hs.detach(), include_special=not drop_special).numpy(), hidden,
                               rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# The experiment through the Sources seam, its comparison and its claims
# ---------------------------------------------------------------------------------------------
class TinySources(X.Sources):
    """A tiny classifier (condition "finetuned"), a tiny encoder of another family
    ("pretrained") and SST-2 stand-ins of mixed lengths (padded batches)."""

    def __init__(self):
        self.cls = FakeBundle(cmixlib.random_model("bert", task="sequence-classification", layers=3,
                                                   num_labels=2, seed=4))
        self.enc = FakeBundle(cmixlib.random_model("distilbert", layers=2, seed=5))

    def classifier(self, task):
        return self.cls, {"accuracy": 0.5}

    def base(self):
        return self.enc, None

    def sst2(self, bundle, limit):
        rng = np.random.default_rng(0)
        lengths = [3, 7, 5, 9, 4, 6][: limit or 6]
        return [{"input_ids": [1] + rng.integers(5, 100, n - 2).tolist() + [2], "label": 0, "target_index": 0}
                for n in lengths]

    sst2_test = sst2      # ALTI's experiments read the test split


def test_fig3_experiment_on_tiny_models():
    src = TinySources()
    r = X.run_experiment("alti-fig3-anisotropy", model="fake", progress=False, sources=src)
    res = r.result.set_index(["kind", "layer"])
    assert list(r.result.columns) == ["layer", "kind", "mean", "std", "n"]
    assert sorted(res.loc["hidden"].index) == [0, 1, 2, 3] and sorted(res.loc["transformed"].index) == [1, 2, 3]
    examples = src.sst2(None, None)
    # every sentence of the padded float32 batches against its own unpadded run: the same weights in
    # float64 are the truth, the unpadded float32 run the baseline (rule 2; per sentence and layer)
    model64 = cmixlib.random_model("bert", task="sequence-classification", layers=3, num_labels=2, seed=4,
                                   dtype=torch.float64)
    single = [sentence_anisotropy(src.cls.model, torch.tensor([ex["input_ids"]]), per_query=True) for ex in examples]
    exact = [sentence_anisotropy(model64, torch.tensor([ex["input_ids"]]), per_query=True) for ex in examples]
    per = r.frames["per_sentence"].set_index(["example", "kind", "layer"])["value"]
    for kind, layers in (("hidden", range(4)), ("attn_output", (1, 2, 3)), ("transformed", (1, 2, 3))):
        first = 0 if kind == "hidden" else 1

        def values(runs):
            return [[float(s[kind][layer - first].mean()) for layer in layers] for s in runs]

        got = [[per[(k, kind, layer)] for layer in layers] for k in range(len(examples))]
        assert_no_worse_than_baseline(got, values(exact), values(single), err_msg=f"padded batch, {kind}")
    # the pooling, in float64 from the experiment's own per-sentence values: the sentences' means
    # (hidden), and the queries' mean = the mean of the sentences' means weighted by their lengths
    n_tok = np.array([len(ex["input_ids"]) for ex in examples], dtype=float)
    for layer in range(4):
        vals = np.array([per[(k, "hidden", layer)] for k in range(len(examples))])
        # float64 rule 1: a mean of 6 terms of magnitude <= 1, computed twice
        assert res.loc[("hidden", layer), "mean"] == pytest.approx(vals.mean(), rel=0,
                                                                   abs=rounding_atol(8, 1.0, torch.float64))
    for layer in (1, 2, 3):
        vals = np.array([per[(k, "transformed", layer)] for k in range(len(examples))])
        # float64 rule 1, |cosine| <= 1: the mean of the 34 pooled queries (35 roundings) against the
        # length-weighted mean of the per-sentence means (<= 9 + 1, x n, 6 terms, divide: 18)
        assert res.loc[("transformed", layer), "mean"] == pytest.approx(
            (n_tok * vals).sum() / n_tok.sum(), rel=0, abs=rounding_atol(52, 1.0, torch.float64))
        assert res.loc[("transformed", layer), "n"] == sum(len(ex["input_ids"]) for ex in examples)
        assert res.loc[("attn_output", layer), "n"] == len(examples)
    # pooling by sentence: the mean over sentences of the per-sentence means
    r2 = X.run_experiment("alti-fig3-anisotropy", model="fake", progress=False, sources=src,
                          settings={"pool": "sentences"})
    t2 = r2.result.set_index(["kind", "layer"]).loc[("transformed", 2), "mean"]
    # same float32 computation as r's (same batches, bitwise), pooled in float64: rule 1, 6 + 2 terms
    assert t2 == pytest.approx(np.mean([per[(k, "transformed", 2)] for k in range(len(examples))]), rel=0,
                               abs=rounding_atol(8, 1.0, torch.float64))
    # without [CLS]/[SEP], the 3-token sentence is skipped with a note; "pretrained" reads the encoder
    r3 = X.run_experiment("alti-fig3-anisotropy", model="fake", progress=False, sources=src,
                          settings={"include_special": False, "condition": "pretrained"})
    assert "distilbert" in r3.meta["model"] and any("skipped" in n for n in r3.meta["notes"])
    assert set(r3.frames["per_sentence"]["example"]) == {1, 2, 3, 4, 5}
    with pytest.raises(ValueError, match="pool"):
        X.run_experiment("alti-fig3-anisotropy", model="fake", progress=False, sources=src, settings={"pool": "x"})
    # comparison: 3 layers against the repository's 12, so no row holds both
    comp = r.comparison()
    assert comp[["ours", "paper"]].notna().all(axis=1).sum() == 0
    assert comp.dropna(subset=["paper"]).shape[0] == 25 and comp["depth"].between(0, 1).all()
    claims = fig3_claims(r.result)
    assert claims.dtype == bool and len(claims) == 3
    assert claims_verdict(claims)[0] in {"claims hold", "most claims hold", "differs"}


def test_fig3_compare_pairs_layers_only_at_equal_depth():
    paper = pn.alti_repo_anisotropy()
    repo = fig3_repo_frame(paper)
    ours = repo.drop(columns="paper_model").assign(std=0.0, n=500)
    comp = X.REGISTRY["alti-fig3-anisotropy"].compare({"result": ours}, paper)
    assert len(comp) == 25 and (comp["ours"] == comp["paper"]).all()


def test_fig3_claims_rules():
    repo = fig3_repo_frame(pn.alti_repo_anisotropy())
    claims = fig3_claims(repo)
    assert len(claims) == 2 and claims.all()                 # the repository's BERT: both hold
    # a frame where the transformed vectors are as anisotropic as the tokens: both fail
    bad = pd.DataFrame({"layer": [0, 1, 2, 3, 1, 2, 3], "kind": ["hidden"] * 4 + ["transformed"] * 3,
                        "mean": [0.2, 0.3, 0.3, 0.3, 0.3, 0.1, 0.05]})
    claims = fig3_claims(bad)
    assert not claims.any() and "below 0.1" in claims.index[1]
    ok = bad.assign(mean=[0.2, 0.3, 0.3, 0.3, FIG3_ISOTROPY_THRESHOLD - 0.01, 0.1, 0.05])
    assert list(fig3_claims(ok)) == [True, True]
    assert claims_verdict(fig3_claims(bad))[0] == "differs"


@pytest.mark.skipif(not REPO.exists(), reason="the ALTI repository snapshot is not on this machine")
def test_repo_numbers_are_the_json_rounded():
    raw = json.loads(subprocess.run(["git", "-C", str(REPO), "show", "HEAD:cos_results/bert_sst2_cos_results.json"],
                                    capture_output=True, text=True, check=True).stdout)
    repo = fig3_repo_frame(pn.alti_repo_anisotropy()).set_index(["kind", "layer"])["mean"]
    for k, v in raw["mean cosine similarity transformed vectors"].items():
        assert repo[("transformed", int(k.split("_")[1]) + 1)] == round(float(v), 3)
    for k, v in raw["mean cosine similarity embeddings"].items():
        assert repo[("hidden", int(k.split("_")[1]))] == round(float(v), 3)
