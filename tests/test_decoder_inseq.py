"""cmixlib's ``vz_convention="inseq"`` against inseq 0.7.1's own outputs.

The references in tests/data/inseq/<family>/ were produced by tools/make_inseq_reference.py
(inseq 0.7.1, transformers 4.53.3, torch 2.13.0+cpu, float64 models): the model's constructor
arguments, its weights, and the (L, n - 1, n - 1) scores inseq's ValueZeroing returned for each
token sequence (NaN above the diagonal written as -1). Here the same weights are loaded under
the project's transformers and computed with cmixlib.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch

from cmixlib.decoder_methods import decoder_context_mixing
from cmixlib.decoder_vz import INSEQ_MIN_SCORE
from cmixlib.validation import InputError

DATA = pathlib.Path(__file__).parent / "data" / "inseq"
FAMILIES = sorted(p.name for p in DATA.iterdir() if (p / "reference.json").exists())
# inseq takes 1 - cos in float32 (its states are cast with .float()): with unit roundoff
# u = 2^-24 a cosine over d components carries an error below delta = 2 (d + 2) u (the dot
# product's and the two norms' roundings). A normalised score p_ij = d_ij / S_i then differs by
# at most (|dd_ij| + p_ij sum_k |dd_ik|) / S_i <= 2 (i + 1) delta / S_i; the float64 side's own
# rounding is far below that. The bar is 1e-5 for every entry.
TOL = 1e-5
U32 = 2.0 ** -24


def delta(model) -> float:
    return 2 * (model.config.hidden_size + 2) * U32


def load(family: str):
    import safetensors.torch
    import transformers

    kw = json.loads((DATA / family / "config.json").read_text())
    cfg = transformers.AutoConfig.for_model(kw.pop("model_type"), **kw)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.to(torch.float64).eval()
    state = safetensors.torch.load_file(str(DATA / family / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all(k == "lm_head.weight" or k.endswith(".attn.bias") for k in missing), missing
    ref = json.loads((DATA / family / "reference.json").read_text())
    return model, ref


@pytest.fixture(scope="module", params=FAMILIES)
def family_case(request):
    return request.param, *load(request.param)


def reference(case) -> np.ndarray:
    full = np.array(case["full_scores"], dtype=np.float64)
    upper = np.triu(np.ones(full.shape[-2:], dtype=bool), 1)
    assert np.all(full[:, upper] == -1.0)              # inseq's NaN above the diagonal
    full[:, upper] = 0.0
    return full


def vz(model, ids, convention, **kw):
    return decoder_context_mixing(model, None, {"input_ids": torch.tensor(ids)},
                                  ["value_zeroing"], vz_convention=convention,
                                  **kw)["value_zeroing"]


def test_references_exist():
    assert set(FAMILIES) >= {"llama", "qwen2", "gpt2"}, FAMILIES
    total = sum(p.stat().st_size for p in DATA.rglob("*") if p.is_file())
    assert total < 1_000_000, total


def test_inseq_convention_equals_inseq(family_case):
    family, model, ref = family_case
    assert ref["meta"]["inseq"] == "0.7.1"
    worst = 0.0
    for case in ref["cases"]:
        ids = case["input_ids"][:-1]        # inseq's map covers the n - 1 prediction positions
        want = reference(case)
        dist = vz(model, ids, "default", normalize=False)      # float64 distances, last
        assert not (np.abs(dist[:-1] - INSEQ_MIN_SCORE) < delta(model)).any(), \
            "a distance sits on inseq's threshold within float32 rounding: ill-posed case"
        raw = vz(model, ids, "inseq", normalize=False)         # thresholded, final norm
        assert not (np.abs(np.where(raw > 0, raw, 1.0) - INSEQ_MIN_SCORE)
                    < delta(model)).any()
        got = vz(model, ids, "inseq")
        assert got.shape == want.shape
        err = np.abs(got - want)
        total = raw.sum(-1, keepdims=True)
        rows = np.arange(len(ids))[None, :, None]
        bound = np.where(total > 0, 2 * (rows + 1) * delta(model) / np.where(
            total > 0, total, 1.0), 0.0)
        assert (err <= bound + 1e-12).all(), (family, float((err - bound).max()))
        worst = max(worst, float(err.max()))
        # the public output (target_attributions) holds the same numbers
        ta = np.array(case["target_attributions"])[:, :, :-1]
        ta[ta == -1.0] = 0.0
        np.testing.assert_array_equal(ta, want)
    assert worst <= TOL, (family, worst)


def test_reference_exercises_the_conventions(family_case):
    """The committed cases contain what tells the conventions apart: an all-zero row (layer 1's
    values are scaled down) and final-norm effects at the last layer."""
    family, model, ref = family_case
    zero_rows = sum(int((reference(c).sum(-1) == 0).sum()) for c in ref["cases"])
    assert zero_rows > 0, family


def test_default_convention_differs_where_documented(family_case):
    family, model, ref = family_case
    for case in ref["cases"]:
        ids = case["input_ids"][:-1]
        want = reference(case)
        default = vz(model, ids, "default")
        inseq = vz(model, ids, "inseq")
        L = want.shape[0]
        zero = want.sum(-1) == 0                                      # (L, n) rows
        # where inseq's rows are zero, the default normalises sub-threshold distances: sum 1
        np.testing.assert_allclose(default.sum(-1)[zero], 1.0, atol=1e-12)
        # away from the last layer and from thresholded entries, the two conventions agree
        raw = vz(model, ids, "default", normalize=False)
        keep = (raw[:-1] >= INSEQ_MIN_SCORE).all(-1) & ~zero[:-1]
        np.testing.assert_allclose(default[:-1][keep], inseq[:-1][keep], atol=1e-12)
        # at the last layer the final norm changes the map
        assert np.abs(default[L - 1] - want[L - 1]).max() > 100 * TOL, family


def test_inseq_convention_refuses_what_inseq_does_not_compute(family_case):
    family, model, ref = family_case
    ids = ref["cases"][0]["input_ids"]
    for kw in (dict(vz_distance="euclidean"), dict(vz_standardize=True)):
        with pytest.raises(InputError, match="inseq"):
            vz(model, ids, "inseq", **kw)
    with pytest.raises(InputError, match="inseq"):
        decoder_context_mixing(model, None, {"input_ids": torch.tensor(ids)},
                               ["value_zeroing_rollout"], vz_convention="inseq")
    with pytest.raises(InputError):
        vz(model, ids, "captum")
