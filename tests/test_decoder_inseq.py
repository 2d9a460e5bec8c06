"""cmixlib's ``vz_convention="inseq"`` against inseq 0.7.1's own outputs.

The references in tests/data/inseq/<family>/ were produced by tools/make_inseq_reference.py
(inseq 0.7.1, transformers 4.53.3, torch 2.13.0+cpu, float64 models): the model's constructor
arguments, its weights, and the (L, n - 1, n - 1) scores inseq's ValueZeroing returned for each
token sequence (NaN above the diagonal written as -1). Here the same weights are loaded under
the project's transformers and computed with cmixlib.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest
import torch

from cmixlib.models import offline as om
from cmixlib.models import smollm2 as sm
import cmixlib
from cmixlib.methods.value_zeroing_decoder import INSEQ_MIN_SCORE
from cmixlib.validation import InputError

DATA = pathlib.Path(__file__).parent / "data" / "inseq"
FAMILIES = sorted(p.name for p in DATA.iterdir() if (p / "config.json").exists())
# The inseq convention takes inseq's own float32 steps (tests/data/inseq was written with the
# same torch, 2.13.0+cpu), so on this CPU the maps agree to inseq's float32 storage and
# normalisation: |dp| <= (n + 3) u with u = 2^-24 (each score rounded, an n-term float32 sum,
# a division); measured <= 1.2e-7. A CPU whose float32 reductions run in another order moves
# each 1 - cos by up to DELTA(d) (a reordered d-term float32 dot product and norms, taken as
# 16 sqrt(d) u), so p_ij = d_ij / S_i by up to 2 (i + 1) DELTA / S_i, and a distance within
# DELTA of the 1e-5 threshold may fall on the other side (a change of up to
# 2 (1e-5 + DELTA) / S_i in its row). Every entry is held to that bound and to the bar,
# 1e-5 (100 times the error measured here; a reordering's typical sqrt(d) u / S_i is ~1e-6).
TOL = 1e-5
U32 = 2.0 ** -24


def check_against(got, raw, want, hidden: int) -> float:
    """Assert the bounds above; return the largest error."""
    n = got.shape[-1]
    delta = 16 * np.sqrt(hidden) * U32
    total = raw.sum(-1, keepdims=True)
    safe_total = np.where(total > 0, total, 1.0)
    rows = np.arange(n)[None, :, None]
    near = ((np.abs(raw - INSEQ_MIN_SCORE) < delta) & np.tril(np.ones((n, n), bool))
            ).any(-1, keepdims=True)
    bound = (n + 3) * U32 + np.where(total > 0, 2 * (rows + 1) * delta / safe_total, 0.0) \
        + np.where(near, 2 * (INSEQ_MIN_SCORE + delta) / safe_total, 0.0)
    err = np.abs(got - want)
    assert (err <= bound).all(), float((err - bound).max())
    assert err.max() <= TOL, float(err.max())
    return float(err.max())


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


def vz(model, ids, convention, normalize=True, **kw):
    return cmixlib.context_mixing(model, None, {"input_ids": torch.tensor(ids)},
                                  [cmixlib.ValueZeroing(convention=convention, **kw)],
                                  normalize=normalize)["value_zeroing"]


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
        raw = vz(model, ids, "inseq", normalize=False)
        got = vz(model, ids, "inseq")
        assert got.shape == want.shape
        err = check_against(got, raw, want, model.config.hidden_size)
        worst = max(worst, err)
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
        # (up to the float32 cosine inseq takes: 2 (i + 1) DELTA / S_i, as in check_against)
        n = len(ids)
        tril = np.tril(np.ones((n, n), bool))
        keep = ((raw[:-1] >= INSEQ_MIN_SCORE) | ~tril).all(-1) & ~zero[:-1]
        delta = 16 * np.sqrt(model.config.hidden_size) * U32
        total = raw[:-1].sum(-1)
        bound = 2 * (np.arange(n)[None, :] + 1) * delta / np.where(total > 0, total, 1.0)
        gap = np.abs(default[:-1] - inseq[:-1]).max(-1)
        assert keep.any() and (gap[keep] <= bound[keep] + (n + 3) * U32).all()
        # at the last layer the final norm changes the map
        assert np.abs(default[L - 1] - want[L - 1]).max() > 100 * TOL, family


def test_inseq_convention_refuses_what_inseq_does_not_compute(family_case):
    family, model, ref = family_case
    ids = ref["cases"][0]["input_ids"]
    for kw in (dict(distance="euclidean"), dict(standardize=True)):
        with pytest.raises(InputError, match="inseq"):
            vz(model, ids, "inseq", **kw)
    with pytest.raises(InputError, match="inseq"):
        cmixlib.ValueZeroing("value_zeroing_rollout", convention="inseq")
    with pytest.raises(InputError, match="inseq"):     # the rollout beside it: refused too
        cmixlib.context_mixing(model, None, {"input_ids": torch.tensor(ids)},
                               [cmixlib.ValueZeroing(convention="inseq"),
                                "value_zeroing_rollout"])
    with pytest.raises(InputError):
        vz(model, ids, "captum")


_GGUF_DEPS = all(importlib.util.find_spec(m) is not None for m in ("gguf", "accelerate"))


@pytest.mark.skipif(sm.smollm2_gguf_path() is None or not _GGUF_DEPS,
                    reason=f"SmolLM2's GGUF or its readers are not installed "
                           f"({om.INSTALL_HINTS['smollm2']})")
def test_smollm2_inseq_convention_equals_inseq():
    """The real model: inseq 0.7.1's scores on SmolLM2-135M-Instruct (float64, all 30 layers;
    tests/data/inseq/smollm2) against cmixlib's on the same ids (inseq's own BOS, id 1,
    first)."""
    import copy

    import cmixlib

    ref = json.loads((DATA / "smollm2" / "reference.json").read_text())
    case = ref["cases"][0]
    bundle = cmixlib.load_model("smollm2", device="cpu")
    model = copy.deepcopy(bundle.model).to(torch.float64).eval()
    ids = case["input_ids"][:-1]
    want = reference(case)
    raw = vz(model, ids, "inseq", normalize=False)
    got = vz(model, ids, "inseq")
    check_against(got, raw, want, model.config.hidden_size)
    default = vz(model, ids, "default")
    assert np.abs(default[-1] - want[-1]).max() > 100 * TOL     # the final norm matters
