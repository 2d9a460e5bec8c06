"""The factored Value Zeroing form (first FFN matmul per head) against the batched reference form
and against the slow per-token hook loop of tests/test_core.py (re-run the model with token t's
value vector zeroed), on random BERT, RoBERTa, ELECTRA and DistilBERT models."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

import cmixlib
from cmixlib.forward.encoder import encoder_layers, iter_sentences, layer_states, run_and_capture
import cmixlib.methods.value_zeroing as vz_module
from cmixlib.methods.value_zeroing import factored_is_cheaper, value_zeroing_layer, w1_head_map
from test_core import hooked_forward
from tolerances import assert_no_worse_than_baseline

ARCHS = ["bert", "roberta", "electra", "distilbert"]
DISTANCES = ["cosine", "euclidean", "spearman"]
LENGTHS = (9, 5, 7)


def padded_batch(model, seed=0, lengths=LENGTHS):
    """Token ids of sentences of different lengths, right-padded, with their attention mask."""
    g = torch.Generator().manual_seed(seed)
    pad = model.config.pad_token_id or 0
    ids = torch.full((len(lengths), max(lengths)), pad)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n], mask[b, :n] = torch.randint(5, 100, (n,), generator=g), 1
    return ids, mask


def vz(model, ids, mask=None, method="factored", rows=None, distance="cosine", standardize=None, chunk=None):
    """Raw VZ maps (L, r, n) of every sentence of the batch, computed with ``method``."""
    cap = run_and_capture(model, ids, mask)
    mods = encoder_layers(model)
    kw = {} if chunk is None else {"chunk_elements": chunk}
    out = []
    for b, keep in enumerate(iter_sentences(cap)):
        r = None if rows is None else torch.as_tensor(rows[b])
        states = layer_states(cap, mods, b, keep, rows=r)
        out.append(torch.stack([value_zeroing_layer(st, distance, standardize, method=method, **kw)
                                for st in states]).double().numpy())
    return out


def hook_loop(model, ids, distance="cosine", standardize=False):
    """VZ maps (L, n, n) of one unpadded sentence from n re-runs per layer with a zeroing hook."""
    base = hooked_forward(model, ids)
    L, n = len(encoder_layers(model)), ids.shape[1]
    ref = np.zeros((L, n, n))
    for layer in range(L):
        orig = base["out"][layer][0].double()
        mu, sd = orig.mean(0), orig.std(0, unbiased=False)
        for t in range(n):
            pert = hooked_forward(model, ids, layer=layer, zero_token=t)["out"][layer][0].double()
            a, b = ((pert - mu) / sd, (orig - mu) / sd) if standardize else (pert, orig)
            if distance == "cosine":
                ref[layer, :, t] = (1 - F.cosine_similarity(a, b, dim=-1)).numpy()
            elif distance == "euclidean":
                ref[layer, :, t] = torch.linalg.vector_norm(a - b, dim=-1).numpy()
            else:
                ref[layer, :, t] = [1 - spearmanr(a[i].numpy(), b[i].numpy()).statistic for i in range(n)]
    return ref


def close(got, want, atol=1e-10, rtol=1e-8):
    """float64 against float64 (rule 1 of tests/tolerances.py): a few hundred roundings of
    u = 1.1e-16 on values <= ~10 stay below 1e-12; 1e-10 / 1e-8 leave two orders of margin."""
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("arch", ARCHS)
def test_factored_equals_batched_float64_padded_all_distances(arch):
    model = cmixlib.random_model(arch, dtype=torch.float64, seed=2)
    ids, mask = padded_batch(model)
    for distance in DISTANCES:
        # a small chunk forces several chunks of rows per layer
        fac = vz(model, ids, mask, "factored", distance=distance, chunk=2000)
        ref = vz(model, ids, mask, "batched", distance=distance)
        for got, want in zip(fac, ref):
            close(got, want)
    for std in (True, (torch.zeros(32, dtype=torch.float64), torch.full((32,), 0.5, dtype=torch.float64))):
        for got, want in zip(vz(model, ids, mask, "factored", standardize=std),
                             vz(model, ids, mask, "batched", standardize=std)):
            close(got, want)


@pytest.mark.parametrize("arch", ARCHS)
def test_factored_padded_batch_against_hook_loop(arch):
    """Each sentence of a padded batch (factored form) against the hook loop on that sentence alone."""
    model = cmixlib.random_model(arch, dtype=torch.float64, seed=1)
    ids, mask = padded_batch(model, seed=4)
    for b, got in enumerate(vz(model, ids, mask, "factored")):
        single = ids[b: b + 1, : LENGTHS[b]]
        close(got, hook_loop(model, single))
    assert np.all(np.diagonal(got, axis1=1, axis2=2) > 0), "diagonal must be kept"


@pytest.mark.parametrize("arch", ARCHS)
def test_factored_rows_per_sentence(arch):
    model = cmixlib.random_model(arch, dtype=torch.float64, seed=5)
    ids, mask = padded_batch(model, seed=6)
    rows = [[0, 4, 8], [2], [6, 1]]
    full = vz(model, ids, mask, "factored")
    for method in ("factored", "batched", "auto"):
        for got, want, r in zip(vz(model, ids, mask, method, rows=rows), full, rows):
            close(got, want[:, r])
    # through the public API (method "auto"), rows and padding together
    res = cmixlib.context_mixing(model, None, {"input_ids": ids, "attention_mask": mask},
                                 methods=["value_zeroing"], normalize=False, rows=rows)
    for got, want, r in zip(res, full, rows):
        close(got["value_zeroing"][:, r], want[:, r])


@pytest.mark.parametrize("distance", ["euclidean", "spearman"])
def test_factored_other_distances_against_hook_loop(distance):
    model = cmixlib.random_model("bert", dtype=torch.float64, seed=0)
    ids = torch.randint(5, 100, (1, 8), generator=torch.Generator().manual_seed(3))
    close(vz(model, ids, distance=distance)[0], hook_loop(model, ids, distance=distance))


def test_factored_standardized_against_hook_loop():
    model = cmixlib.random_model("roberta", dtype=torch.float64, seed=0)
    ids = torch.randint(5, 100, (1, 8), generator=torch.Generator().manual_seed(3))
    close(vz(model, ids, standardize=True)[0], hook_loop(model, ids, standardize=True))


def check_float32(arch, seed=7):
    """Rule 2 of tests/tolerances.py: the factored form in float32 against the float64 truth may be
    at most BASELINE_FACTOR times worse than the batched form in float32 (the baseline: the same
    float32 model and inputs, another order of operations), raw and row-normalised."""
    m32 = cmixlib.random_model(arch, dtype=torch.float32, seed=seed)
    m64 = cmixlib.random_model(arch, dtype=torch.float64, seed=seed)
    ids, mask = padded_batch(m32, seed=8)
    for distance in DISTANCES:
        for got, base, want in zip(vz(m32, ids, mask, "factored", distance=distance),
                                   vz(m32, ids, mask, "batched", distance=distance),
                                   vz(m64, ids, mask, "batched", distance=distance)):
            assert_no_worse_than_baseline(got, want, base, err_msg=f"{arch} {distance}")
    # row-normalised maps of the public API (factored for these full maps); cosine distances of
    # ~1e-5 carry relative errors of ~1e-4 in float32, which normalising turns into ~1e-5 absolute
    batch = {"input_ids": ids, "attention_mask": mask}
    a = cmixlib.context_mixing(m32, None, batch, methods=["value_zeroing"])
    b = cmixlib.context_mixing(m64, None, batch, methods=["value_zeroing"])
    for x, y, base in zip(a, b, vz(m32, ids, mask, "batched")):
        assert_no_worse_than_baseline(x["value_zeroing"], y["value_zeroing"],
                                      base / base.sum(-1, keepdims=True), err_msg=f"{arch} API")


@pytest.mark.parametrize("arch", ARCHS)
def test_factored_float32_close_to_float64(arch):
    check_float32(arch)


def _head_dropped(real):
    def wrong(st, rows, step):                       # alpha of head 0 left out of the factored sums
        alpha = st.alpha.clone()
        alpha[0] = 0.0
        return real(dataclasses.replace(st, alpha=alpha, _cache={}), rows, step)
    return wrong


@pytest.mark.parametrize("plant", ["head 0 dropped", "LN input not centred"])
def test_float32_check_catches_a_planted_bug(plant, monkeypatch):
    """The float32 bound is tight enough to fail for a wrong factored form."""
    if plant == "head 0 dropped":
        monkeypatch.setattr(vz_module, "_factored_outputs", _head_dropped(vz_module._factored_outputs))
    else:
        monkeypatch.setattr(vz_module, "_centre", lambda v: v)
    with pytest.raises(AssertionError, match="exceeds"):
        check_float32("electra")


def test_auto_picks_the_cheaper_form_and_unknown_method_fails():
    # bert-base shape: factored from 2 rows and 3 tokens on, one row always batched
    assert factored_is_cheaper(64, 64, 768, 12) and factored_is_cheaper(3, 3, 768, 12)
    assert factored_is_cheaper(2, 64, 768, 12)
    assert not factored_is_cheaper(2, 2, 768, 12) and not factored_is_cheaper(1, 512, 768, 12)
    model = cmixlib.random_model("bert", dtype=torch.float64)
    ids = torch.randint(5, 100, (1, 6))
    st = layer_states(run_and_capture(model, ids), encoder_layers(model), 0, torch.arange(6))[0]
    with pytest.raises(ValueError, match="method"):
        value_zeroing_layer(st, method="fast")


def test_cached_head_map_follows_weight_updates():
    """The cached W1 head map is recomputed after an in-place weight update (e.g. an optimizer step)."""
    model = cmixlib.random_model("electra", dtype=torch.float64, seed=9)
    ids = torch.randint(5, 100, (1, 7), generator=torch.Generator().manual_seed(9))
    before = vz(model, ids)[0]
    mods = encoder_layers(model)
    assert w1_head_map(mods[0]) is w1_head_map(mods[0])
    with torch.no_grad():
        for m in mods:
            m.ffn_in.weight.mul_(1.5)
            m.ln1.weight.add_(0.1)
            m.out.weight.mul_(0.7)
    after = vz(model, ids)[0]
    assert np.abs(after - before).max() > 1e-3 * np.abs(before).max()
    close(after, vz(model, ids, method="batched")[0])


# --------------------------------------------------------------------------------------------
# Several distances from one set of perturbed outputs (the distance ablation's fast path)
# --------------------------------------------------------------------------------------------
def corpus_stats(model, seed=5):
    g = torch.Generator().manual_seed(seed)
    d = model.config.hidden_size
    return torch.randn(d, generator=g, dtype=torch.float64), 0.5 + torch.rand(d, generator=g, dtype=torch.float64)


def variants_of(model):
    return [("cosine", None), ("euclidean", False), ("spearman", None), ("cosine", True),
            ("euclidean", corpus_stats(model))]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method", ["factored", "batched"])
def test_layer_variants_equal_one_call_per_variant(arch, method):
    """Entry v of value_zeroing_layer_variants is value_zeroing_layer with variant v, exactly
    (the same operations on the same perturbed outputs), in float32 with chunks of 2 rows."""
    model = cmixlib.random_model(arch, seed=4)
    ids, mask = padded_batch(model, seed=4)
    cap, mods = run_and_capture(model, ids, mask), encoder_layers(model)
    variants = variants_of(model)
    for b, keep in enumerate(iter_sentences(cap)):
        for st in layer_states(cap, mods, b, keep, rows=torch.tensor([0, 2, 3])):
            got = vz_module.value_zeroing_layer_variants(st, variants, chunk_elements=1,
                                                         method=method)
            assert got.shape == (len(variants), 3, len(keep))
            for v, (dist, std) in enumerate(variants):
                want = value_zeroing_layer(st, dist, std, chunk_elements=1, method=method)
                assert torch.equal(got[v], want), (arch, method, dist, std)


@pytest.mark.parametrize("arch", ARCHS)
def test_variant_maps_equal_context_mixing_per_variant(arch):
    """value_zeroing_variant_maps (one forward for all variants) against one context_mixing call
    per variant: identical rows, for per-sentence rows and for every row, with padding."""
    model = cmixlib.random_model(arch, seed=6)
    ids, mask = padded_batch(model, seed=6)
    variants = variants_of(model)
    for rows in ([[4], [0, 3], None], None):
        got = vz_module.value_zeroing_variant_maps(model, ids, mask, rows, variants=variants)
        for v, (dist, std) in enumerate(variants):
            want = cmixlib.context_mixing(model, None, {"input_ids": ids, "attention_mask": mask},
                                          cmixlib.ValueZeroing(distance=dist,
                                                               standardize=std), rows=rows)
            for b, n in enumerate(LENGTHS):
                sel = np.arange(n) if rows is None or rows[b] is None else np.array(rows[b])
                assert got[b].shape == (len(variants), len(encoder_layers(model)), len(sel), n)
                np.testing.assert_array_equal(got[b][v], want[b]["value_zeroing"][:, sel])


def test_variant_maps_bad_input():
    model = cmixlib.random_model("bert", seed=6)
    ids, mask = padded_batch(model, seed=6)
    with pytest.raises(cmixlib.InputError, match="variants is empty"):
        vz_module.value_zeroing_variant_maps(model, ids, mask, variants=[])
    with pytest.raises(cmixlib.InputError, match="Value Zeroing distance"):
        vz_module.value_zeroing_variant_maps(model, ids, mask, variants=[("cos", None)])
    with pytest.raises(cmixlib.InputError, match="hidden size"):
        vz_module.value_zeroing_variant_maps(model, ids, mask,
                                             variants=[("cosine", (np.zeros(3), np.ones(3)))])
    with pytest.raises(ValueError, match="variants is empty"):
        vz_module.value_zeroing_layer_variants(None, [])
