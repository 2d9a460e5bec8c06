"""cmixlib.experiments.rollout_depth and the experiment vz-rollout-depth (chapter 11, "Rollout on a small
model"), against slow obvious references and against vz-faithfulness on tiny random models; the
sentences of cmixlib.book.depth_verdicts on hand-made tables."""
import numpy as np
import pandas as pd
import pytest
import torch

import cmixlib
from cmixlib import experiments as X
from cmixlib.experiments.rollout_depth import AGGREGATIONS, depth_rows, offset_profile, row_entropy
from cmixlib.validation import InputError
from tolerances import rounding_atol

from test_cli import FakeSources  # noqa: F401  (tiny random models, fake BLiMP examples)


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "cache"))


def _random_maps(L=3, n=6, seed=0):
    return np.random.default_rng(seed).uniform(0.01, 1.0, size=(L, n, n))


# ---- depth_rows ----------------------------------------------------------------------------
def _slow_rollout_row(maps, t, identity, normalise):
    """Row t of the product, one layer and one entry at a time."""
    L, n, _ = maps.shape
    out, prod = [], np.eye(n)
    for layer in range(L):
        m = np.array(maps[layer], dtype=float)
        if normalise or identity:
            m = np.array([[m[i, j] / sum(m[i]) for j in range(n)] for i in range(n)])
        if identity:
            m = np.array([[0.5 * m[i, j] + 0.5 * (i == j) for j in range(n)] for i in range(n)])
        prod = np.array([[sum(m[i, k] * prod[k, j] for k in range(n)) for j in range(n)]
                         for i in range(n)])
        row = prod[t]
        out.append(row / row.sum() if not normalise else row)
    return np.array(out)


def test_depth_rows_match_slow_products():
    maps = _random_maps()
    got = depth_rows(maps, 2)
    assert list(got) == list(AGGREGATIONS)
    single = np.array([maps[layer, 2] / maps[layer, 2].sum() for layer in range(3)])
    # float64 against float64 over chains of at most L n + n roundings of terms <= 1 (rule 1)
    tol = rounding_atol(3 * 6 + 6, 1.0, torch.float64)
    np.testing.assert_allclose(got["single"], single, rtol=0, atol=tol)
    np.testing.assert_allclose(got["rollout"], _slow_rollout_row(maps, 2, False, True), atol=tol)
    np.testing.assert_allclose(got["rollout+I"], _slow_rollout_row(maps, 2, True, True), atol=tol)
    np.testing.assert_allclose(got["raw product"], _slow_rollout_row(maps, 2, False, False),
                               atol=tol)
    # a row of rows that sum to 1 sums to 1 at every depth
    for agg in AGGREGATIONS:
        np.testing.assert_allclose(got[agg].sum(-1), 1.0, atol=tol)


def test_depth_rows_of_a_model_equal_the_library_rollouts():
    model = cmixlib.random_model("bert", layers=3, seed=4)
    ids = {"input_ids": torch.tensor([[1, 7, 8, 9, 10, 2]])}
    raw = cmixlib.context_mixing(model, None, ids, methods=["attention", "value_zeroing"],
                                 normalize=False)
    lib = cmixlib.context_mixing(model, None, ids, methods=["attention_rollout",
                                                            "value_zeroing_rollout"])
    t = 3
    # float32 rollouts of the library against float64 products of the same float32 maps:
    # chains of L n + n roundings of terms <= 1, one computation in float32 (rule 1)
    tol = rounding_atol(3 * 6 + 6, 1.0, torch.float32)
    np.testing.assert_allclose(depth_rows(raw["attention"], t)["rollout+I"],
                               lib["attention_rollout"][:, t], rtol=0, atol=tol)
    np.testing.assert_allclose(depth_rows(raw["value_zeroing"], t)["rollout"],
                               lib["value_zeroing_rollout"][:, t], rtol=0, atol=tol)


def test_depth_rows_bad_input():
    with pytest.raises(InputError, match="shape"):
        depth_rows(np.ones((3, 4)), 0)
    with pytest.raises(InputError, match="non-negative"):
        depth_rows(-_random_maps(), 0)
    with pytest.raises(InputError, match="outside"):
        depth_rows(_random_maps(), 6)


# ---- offset_profile, row_entropy -------------------------------------------------------------
def test_offset_profile_matches_a_loop():
    maps = _random_maps(L=2, n=7, seed=1)
    for rows in (None, [0, 3, 6], [3]):
        S, N = offset_profile(maps, rows, max_offset=2)
        R = range(7) if rows is None else rows
        for k in range(-2, 3):
            cnt = sum(1 for i in R if 0 <= i + k < 7)
            assert N[k + 2] == cnt
            for layer in range(2):
                want = sum(maps[layer, i, i + k] / maps[layer, i].sum() for i in R
                           if 0 <= i + k < 7)
                assert S[layer, k + 2] == pytest.approx(want, abs=rounding_atol(14, 1.0,
                                                                                torch.float64))


def test_offset_profile_of_a_shift_and_of_the_identity():
    n = 5
    shift = np.stack([np.eye(n, k=-1) + np.eye(n, k=0) * 1e-12])      # each token reads i - 1
    S, N = offset_profile(shift, np.arange(1, n), max_offset=1)
    np.testing.assert_allclose(S[0] / N, [1.0, 0.0, 0.0], atol=1e-9)
    S, N = offset_profile(np.eye(n)[None], None, max_offset=2)
    np.testing.assert_allclose(S[0] / N, [0, 0, 1, 0, 0])
    with pytest.raises(InputError, match="outside"):
        offset_profile(np.eye(n)[None], [n])


def test_row_entropy():
    from scipy.stats import entropy

    rows = np.random.default_rng(2).uniform(0, 1, size=(4, 6))
    np.testing.assert_allclose(row_entropy(rows), entropy(rows, axis=-1) / np.log(6),
                               atol=rounding_atol(12, 1.0, torch.float64))
    assert row_entropy(np.ones(5)) == pytest.approx(1.0)
    assert row_entropy(np.eye(4)[1]) == pytest.approx(0.0)
    with pytest.raises(InputError):
        row_entropy(np.array([1.0, -1.0]))


# ---- the experiment ----------------------------------------------------------------------------
def test_rollout_depth_on_fakes_agrees_with_vz_faithfulness():
    fakes = FakeSources()
    r = X.run_experiment("vz-rollout-depth", model="fake", limit=4, progress=False, sources=fakes)
    res = r.result
    L = 2
    assert set(res.aggregation) == set(AGGREGATIONS) | {"control"}
    assert set(res.layer) == set(range(L + 1))
    assert set(res.replacement) == {"unk", "mask"}
    f = X.run_experiment("vz-faithfulness", model="fake", limit=4, progress=False, sources=fakes,
                         settings={"ig_steps": 2})
    fm = f.result.set_index("method")["mean"]
    d = res[(res.replacement == "unk") & (res.exclude == "special+target")]
    last = d[d.layer.isin([0, L])].set_index(["method", "aggregation"])["mean"]
    # the same examples, blank-out and seeds: the controls are the same numbers; the rollouts are
    # the same scores up to float32 rounding (float32 maps rolled out in float64 here, float32
    # there), far below the gaps between the scores of these random models, so the ranks and the
    # means are equal
    pairs = {("random", "control"): "random", ("nearness", "control"): "nearness",
             ("value_zeroing", "rollout"): "value_zeroing_rollout",
             ("attention", "rollout+I"): "attention_rollout", ("alti_layer", "rollout"): "alti",
             ("globenc_layer", "rollout"): "globenc"}
    for key, name in pairs.items():
        assert last[key] == pytest.approx(fm[name], abs=1e-9), (key, name)
    prof = r.frames["profile"]
    assert set(prof.rows) == {"context", "mask"} and set(prof.offset) == set(range(-3, 4))
    assert ((prof.weight >= 0) & (prof.weight <= 1 + 1e-9)).all()     # means of normalised rows
    # Spearman is symmetric: blank-out against nearness (frame "nearness") is nearness against
    # blank-out (frame "result"), the same per-example values in another order of arguments
    near = r.frames["nearness"].set_index(["method", "aggregation"])["mean"]
    assert near[("blank-out", "unk")] == pytest.approx(last[("nearness", "control")], abs=1e-12)
    assert len(r.frames["nearness"]) == 7 * len(AGGREGATIONS) * L + 2
    rp = r.frames["row_profile"]
    single = rp[(rp.method == "attention") & (rp.aggregation == "single")]
    w = single.weight.dropna()                 # offset -3 of the fakes is [CLS]: no word there
    assert len(w) and ((w >= 0) & (w <= 1)).all()
    ent = r.frames["entropy"]
    assert ((ent.entropy >= 0) & (ent.entropy <= 1 + 1e-12)).all()


# ---- the sentences of cmixlib.book.depth_verdicts, on hand-made frames -------------------------------
def depth_frames(single=(0.1, 0.3, 0.2), rollout=(0.1, 0.0, -0.1), plus=(0.1, 0.2, 0.15),
                 nearness=0.25, self_weight=0.02, neighbour=0.4, drift=(0.5, 0.1, -0.3),
                 blank_near=0.2, std=0.3, n=400, alt=None):
    """Frames of a vz-rollout-depth run for Value Zeroing (3 layers) with the given means:
    single-layer maps, rollout, rollout+I per layer; nearness control; the layer maps' weight at
    offset 0 and +-1; the rollout's Spearman with nearness per layer and blank-out's. ``alt``:
    the layer-3 rollout in the variants other than the pinned one (default: the pinned value)."""
    rows = []
    for rep in ("unk", "mask"):
        for exc in ("special+target", "target"):
            pinned = (rep, exc) == ("unk", "special+target")
            for agg, vals in (("single", single), ("rollout", rollout), ("rollout+I", plus),
                              ("raw product", rollout)):
                for layer, v in enumerate(vals, 1):
                    if not pinned and alt is not None and layer == 3 and agg != "single":
                        v = alt
                    rows.append(("value_zeroing", agg, layer, rep, exc, v))
            rows += [("nearness", "control", 0, rep, exc, nearness),
                     ("random", "control", 0, rep, exc, 0.0)]
    result = pd.DataFrame(rows, columns=["method", "aggregation", "layer", "replacement",
                                         "exclude", "mean"]).assign(std=std, n=n, condition="x")
    prof = [(where, "value_zeroing", layer, k, w) for where in ("context", "mask")
            for layer in (1, 2, 3)
            for k, w in ((-1, neighbour), (0, self_weight), (1, neighbour / 2))]
    profile = pd.DataFrame(prof, columns=["rows", "method", "layer", "offset", "weight"])
    near = [("value_zeroing", "rollout", layer, v) for layer, v in enumerate(drift, 1)]
    near.append(("blank-out", "unk", 0, blank_near))
    nearness = pd.DataFrame(near, columns=["method", "aggregation", "layer", "mean"]).assign(
        std=std, n=n)
    return {"result": result, "profile": profile, "nearness": nearness}


def test_clear_difference_rule():
    from cmixlib.book.depth_verdicts import SE_FACTOR, clear_difference

    a = pd.Series({"mean": 0.1, "std": 0.5, "n": 100})
    se = np.sqrt(2 * 0.5 ** 2 / 100)                      # the combined standard error
    above = a.copy()
    above["mean"] = 0.1 + SE_FACTOR * se + 1e-6
    level = a.copy()
    level["mean"] = 0.1 + SE_FACTOR * se - 1e-6
    assert clear_difference(above, a) and not clear_difference(level, a)
    assert not clear_difference(a, above)


def test_table3_reason_clauses_follow_the_numbers():
    from cmixlib.book.depth_verdicts import table3_reason

    text = table3_reason(depth_frames())
    assert text.startswith("Value Zeroing's single-layer maps reach +0.30 (layer 2) but its "
                           "rollout gives -0.10 at layer 3")
    assert "give the [MASK] itself 0.02 on average" in text and "in 3 of 3 layers" in text
    assert "moves the [MASK] row away" in text and "-0.30 at layer 3" in text
    assert "adding 0.5 I lifts it to +0.15" in text
    assert "no replacement/position/normalisation variant" in text
    # the other branches: the token outweighs its neighbours, no drift, the identity does not
    # help, and variants that beat nearness
    other = table3_reason(depth_frames(self_weight=0.8, drift=(0.5, 0.3, 0.2), plus=(0.1, 0.0,
                                       -0.09), alt=0.6))
    assert "outweighs" not in other and "is not clearly further from the [MASK] than blank-out" in other
    assert "adding 0.5 I does not clearly lift it (-0.09)" in other
    assert "6 of 8 evaluation variants put it clearly above nearness" in other   # 3 x 2 + 0


def test_describe_depth_and_identity_and_sensitivity():
    from cmixlib.book.depth_verdicts import (describe_depth_faithfulness, describe_drift,
                                             describe_identity_effect, describe_offset_profile,
                                             describe_sensitivity)

    f = depth_frames()
    s = describe_depth_faithfulness(f["result"])
    assert "+0.10 to +0.30 over layers 1-3" in s and "falls with depth" in s
    assert "below the nearness control (+0.25)" in s
    s = describe_identity_effect(f["result"], ["value_zeroing"])
    assert "-0.10 -> +0.15 (lifts; not above nearness)" in s
    s = describe_sensitivity(f["result"])
    assert "8 variants" in s and "clearly above the nearness control in 0 of 8" in s
    s = describe_offset_profile(f["profile"], ["value_zeroing"])
    assert "self 0.02, nearest neighbour 0.40" in s and "3 of 3 layers" in s
    s = describe_drift(f, ["value_zeroing"])
    assert "+0.50 -> -0.30 (moves away from the [MASK])" in s
    flat = depth_frames(rollout=(0.1, 0.1, 0.1))
    assert "has no clear trend" in describe_depth_faithfulness(flat["result"])
