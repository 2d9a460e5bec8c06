"""Hand-computed cases for cmixlib.metrics.evaluation and cmixlib.metrics.statistics."""
import math

import numpy as np
import pandas as pd
import pytest

from cmixlib.metrics import evaluation as ev
from cmixlib.metrics import statistics as st


def test_normalize_scores_clips_and_handles_zero_rows():
    out = ev.normalize_scores(np.array([[1.0, -1.0, 3.0], [0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(out[0], [0.25, 0.0, 0.75])
    np.testing.assert_allclose(out[1], [1 / 3] * 3)


def test_dot_product_is_cue_mass_after_normalisation():
    r = ev.cue_alignment([2.0, 1.0, 1.0, 0.0], [1, 3])
    assert r["dot"] == pytest.approx(0.25)


def test_ap_perfect_and_worst():
    # cues ranked first: AP = 1
    assert ev.cue_alignment([0.1, 0.5, 0.4, 0.0], [1, 2])["ap"] == pytest.approx(1.0)
    # single cue ranked last of 4: precision at its recall level = 1/4
    assert ev.cue_alignment([0.4, 0.3, 0.2, 0.1], [3])["ap"] == pytest.approx(0.25)
    # two cues ranked last of 4: (1/3 + 2/4) / 2
    assert ev.cue_alignment([0.4, 0.3, 0.2, 0.1], [2, 3])["ap"] == pytest.approx((1 / 3 + 0.5) / 2)


def test_ap_undefined_without_cues():
    assert math.isnan(ev.average_precision([0.2, 0.8], [0, 0]))


def test_probes_needed_basic_and_ties():
    s = [0.5, 0.2, 0.2, 0.1]
    assert ev.cue_alignment(s, [0])["probes_needed"] == 0
    assert ev.cue_alignment(s, [3])["probes_needed"] == 3
    # cue at index 2 tied with non-cue index 1: one token strictly higher (index 0)
    assert ev.cue_alignment(s, [2])["probes_needed"] == 1
    assert ev.probes_needed(ev.normalize_scores(s), ev.cue_vector(4, [2]), ties="pessimistic") == 2
    # best of several cues counts
    assert ev.cue_alignment(s, [1, 3])["probes_needed"] == 1


def test_ap_with_ties_groups_tied_scores():
    # cue tied with one non-cue at the top: one threshold with precision 1/2, recall 1
    assert ev.cue_alignment([0.4, 0.4, 0.2], [1])["ap"] == pytest.approx(0.5)


def test_exclusion_renormalises():
    # exclude position 0 (e.g. [CLS]); remaining [1, 1, 2] -> cue index 3 has mass 0.5
    r = ev.cue_alignment([6.0, 1.0, 1.0, 2.0], [3], exclude=[0])
    assert r["dot"] == pytest.approx(0.5)
    assert r["probes_needed"] == 0
    # negative index works (last token)
    r = ev.cue_alignment([1.0, 1.0, 2.0, 6.0], [2], exclude=[-1])
    assert r["dot"] == pytest.approx(0.5)


def test_alignment_rows_and_aggregate():
    maps = {"m": np.array([[[0.0, 1.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]],
                           [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]])}
    rows = ev.alignment_rows(maps, [0], example_id=7, row=1)
    assert [r["layer"] for r in rows] == [0, 1]
    assert rows[0]["dot"] == pytest.approx(0.5) and rows[1]["dot"] == pytest.approx(0.0)
    rows += ev.alignment_rows({"m": np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])}, [0], example_id=8)
    agg = ev.aggregate_alignment(rows)
    dot = agg[(agg.metric == "dot")].set_index("layer")
    assert dot.loc[0, "mean"] == pytest.approx(0.75)
    assert dot.loc[1, "mean"] == pytest.approx(0.5)
    assert dot.loc[1, "std"] == pytest.approx(0.5)
    assert set(agg.columns) >= {"method", "layer", "metric", "mean", "std", "n"}


def test_spearman_constant_vector_is_nan_and_mean_std_skips_it():
    assert math.isnan(st.spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(st.spearman([1], [1]))
    assert st.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert st.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    rhos = st.per_example_spearman([[1, 2, 3], [1, 1, 1], [1, 2, 3]], [[1, 2, 3], [1, 2, 3], [3, 2, 1]])
    stats = st.mean_std(rhos)
    assert stats == {"mean": 0.0, "std": 1.0, "n": 2, "n_nan": 1}


def test_per_example_spearman_exclude_special():
    # with [CLS]/[SEP] the ranks disagree, without them they agree perfectly
    x = [9.0, 1.0, 2.0, 3.0, 0.0]
    y = [0.0, 1.0, 2.0, 3.0, 9.0]
    assert st.per_example_spearman([x], [y])[0] < 0
    assert st.per_example_spearman([x], [y], exclude=[0, -1])[0] == pytest.approx(1.0)


def test_correlation_table():
    t = st.correlation_table({"a": [0.5, 0.5], "b": [np.nan, 1.0]}, task="x")
    assert isinstance(t, pd.DataFrame)
    assert t.set_index("method").loc["b", "n_nan"] == 1
    assert (t.task == "x").all()


def test_normalized_ranks_and_special_tokens():
    np.testing.assert_allclose(ev.normalized_ranks([0.1, 0.3, 0.2, 0.4]), [0.25, 0.75, 0.5, 1.0])
    np.testing.assert_allclose(ev.normalized_ranks([0.1, 0.3, 0.2, 0.4], "minmax"), [0, 2 / 3, 1 / 3, 1])
    np.testing.assert_allclose(ev.normalized_ranks([0.2, 0.2, 0.5]), [1 / 3, 1 / 3, 2 / 3])
    toks = ["[CLS]", "good", "film", ".", "[SEP]"]
    s = [0.5, 0.2, 0.1, 0.05, 0.15]
    # dense ranks: [5, 4, 2, 1, 3] / 5 -> specials [CLS]=1.0, .=0.2, [SEP]=0.6
    assert ev.special_token_rank(s, toks) == pytest.approx((1.0 + 0.2 + 0.6) / 3)
    assert math.isnan(ev.special_token_rank(s, ["a"] * 5))


def test_average_precision_equals_scikit_learn_with_ties():
    from sklearn.metrics import average_precision_score

    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(2, 25))
        y = rng.integers(0, 2, n)
        if y.sum() in (0, n):
            continue
        s = rng.integers(0, 4, n).astype(float) if trial % 2 else rng.normal(size=n)   # many ties / none
        assert ev.average_precision(s, y) == pytest.approx(average_precision_score(y, s), abs=1e-12)


def test_mlm_accuracy_sentence_follows_its_rule():
    from cmixlib.metrics.evaluation import describe_mlm_accuracy, mlm_accuracy_table

    good = {"agreement_accuracy_test": 0.85, "n_agreement_test": 100,
            "agreement_by_subset": {"ana": 0.9, "darn": 0.7},
            "masked_word_accuracy_eltec": 0.4, "masked_word_accuracy_wikitext2": 0.35}
    assert describe_mlm_accuracy("pre-trained", good).endswith("meets the targets.")
    bad = {**good, "agreement_by_subset": {"ana": 0.9, "darn": 0.6},
           "masked_word_accuracy_eltec": 0.2}
    text = describe_mlm_accuracy("pre-trained", bad)
    assert "misses the targets" in text and "darn" in text and "masked-word below" in text
    table = mlm_accuracy_table({"pre-trained": good, "fine-tuned": good})
    assert table.loc["paper's BERT: agreement", "fine-tuned"] == 0.99
    assert table.loc["agreement: darn", "pre-trained"] == 0.7


def test_spearman_rows_equals_scipy_one_pair_at_a_time():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    for n in (2, 3, 7, 20):
        x = np.where(rng.random((5, n)) < 0.3, 1.0, rng.normal(size=(5, n)))   # with ties
        y = rng.integers(0, 3, n).astype(float)                                 # heavy ties
        if np.ptp(y) == 0:
            y[0] += 1
        got = st.spearman_rows(x, y)
        want = [spearmanr(r, y).statistic if np.ptp(r) > 0 else np.nan for r in x]
        np.testing.assert_allclose(got, want, atol=1e-12)
    # NaN rules of st.spearman: constant, non-finite, too short
    assert np.isnan(st.spearman_rows([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    assert np.isnan(st.spearman_rows([1.0, np.nan, 3.0], [1.0, 2.0, 3.0]))
    assert np.isnan(st.spearman_rows([1.0], [2.0]))
    # spearman_to: named rows, positions excluded from both sides
    ref = np.array([0.0, 3.0, 1.0, 2.0, 9.0])
    scores = {"a": np.array([5.0, 1.0, 2.0, 3.0, 0.0]), "b": -ref}
    got = st.spearman_to(ref, scores, exclude=[0, -1])
    assert got["b"] == pytest.approx(-1.0)
    assert got["a"] == pytest.approx(spearmanr([1.0, 2.0, 3.0], [3.0, 1.0, 2.0]).statistic)
    with pytest.raises(ValueError, match="length mismatch"):
        st.spearman_to(ref, {"a": np.ones(3)})


def test_pearson_rows_equals_one_pair_at_a_time():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(4, 7)), rng.normal(size=7)
    want = [np.corrcoef(row, y)[0, 1] for row in x]
    np.testing.assert_allclose(st.pearson_rows(x, y), want, rtol=0, atol=1e-12)
    x[1] = 2.0                       # constant row
    x[2, 3] = np.nan                 # non-finite entry
    got = st.pearson_rows(x, y)
    assert np.isnan(got[1]) and np.isnan(got[2]) and np.isfinite(got[[0, 3]]).all()
    assert np.isnan(st.pearson_rows([[1.0]], [2.0])).all()
