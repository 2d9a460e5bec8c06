"""The rules that explain a "differs" (cmixlib.book.differences), ALTI Figures 8-10's homogeneity
measures and claims, and the example items' status rows, on hand-made tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cmixlib.book import differences as D
from cmixlib.book.claims.rules_alti import FIGS8_10_HEADLINE, figs8_10_claims
from cmixlib.experiments.alti_layers import homogeneity, special_mass


def _alignment(values: dict[str, list[float]], std: float = 0.1, n: int = 100) -> pd.DataFrame:
    rows = [{"method": m, "layer": layer, "metric": "dot", "mean": v, "std": std, "n": n}
            for m, vs in values.items() for layer, v in enumerate(vs)]
    return pd.DataFrame(rows)


def test_alignment_why_locates_the_failing_layers_and_tests_noise():
    r = _alignment({"value_zeroing": [0.1, 0.3, 0.3], "deeplift": [0.5, 0.2, 0.1],
                    "attention": [0.05, 0.1, 0.299]})
    text, ev = D.alignment_why(r, context_mixing=["attention"])
    assert "layer(s) 1 of 3" in text and "DeepLift" in text
    assert ev.loc[1, "gap"] == pytest.approx(0.4)
    assert ev.loc[1, "z"] == pytest.approx(0.4 / np.sqrt(2 * 0.01 / 100))
    assert "far outside sampling noise" in text
    assert "best-aligned in 3 of 3 layers" in text
    # a gap inside the noise is called so
    r = _alignment({"value_zeroing": [0.30], "attention": [0.301]}, std=0.1, n=10)
    text, _ = D.alignment_why(r)
    assert "within sampling noise" in text and "within noise (a tie) in layer(s) 1" in text
    # nothing fails
    text, _ = D.alignment_why(_alignment({"value_zeroing": [0.3, 0.4], "attention": [0.1, 0.2]}))
    assert text == "Value Zeroing is above every other method in every layer."
    # ahead everywhere, but within noise in one layer: said to be a tie there
    text, _ = D.alignment_why(_alignment({"value_zeroing": [0.3, 0.4], "attention": [0.1, 0.39]},
                                         std=0.1, n=10))
    assert "but within sampling noise of the next in layer(s) 2" in text
    assert "smallest lead 0.010 over Attention in layer 2" in text and "a tie there" in text


def test_probes_vs_n_why_names_the_layers_where_n_ties_or_beats():
    rows = [{"method": m, "layer": k, "metric": "probes_needed", "mean": v}
            for m, vals in {"value_zeroing": [2.0, 1.0, 3.0], "attn_norm": [2.0, 2.0, 1.0],
                            "deeplift": [0.5, 0.5, 0.5]}.items() for k, v in enumerate(vals)]
    text, ev = D.probes_vs_n_why({"pre-trained": pd.DataFrame(rows)})
    assert "in 2 of 3 layers (1 and 3; e.g. layer 1: 2.00 vs 2.00)" in text
    assert "Alternative cause: the gradient methods" in text and len(ev) == 3


def test_mixing_alignment_why_uses_both_metrics_and_only_the_named_methods():
    r = pd.concat([_alignment({"value_zeroing": [0.1, 0.3], "attention": [0.05, 0.1],
                               "random": [0.2, 0.1], "deeplift": [0.9, 0.9]}),
                   _alignment({"value_zeroing": [0.5, 0.3], "attention": [0.4, 0.6],
                               "random": [0.1, 0.1], "deeplift": [0.9, 0.9]}
                              ).assign(metric="ap")])
    text, ev = D.mixing_alignment_why(r, ["attention"])
    assert "DeepLift" not in text                        # not a context-mixing method
    assert "dot: Value Zeroing is above every other method" in text
    assert "at or below Random in layer(s) 1" in text
    assert "ap: Attention score(s) higher than Value Zeroing beyond noise in layer(s) 2" in text
    assert "Value Zeroing minus Attention -0.300 in layer 2, z = -" in text  # one sign: VZ - other
    assert "Alternative cause: sampling noise" in text and set(ev["metric"]) == {"dot", "ap"}


def test_globenc_table2_why_names_the_cell_furthest_from_the_paper():
    from cmixlib.data import paper_numbers as pn

    methods = ("attn_norm", "attn_norm_res", "globenc_layer")
    paper = pn.globenc_table2()
    p12 = paper[paper.condition == "L12"].assign(
        aggr=lambda d: d.metric.str.rsplit("_", n=1).str[-1])
    rows = [{"task": "SST-2", "method": m, "aggregation": a, "layer": 6,
             "mean": float(p12[(p12.cmix_method == m) & (p12["aggr"] == a)]["value"].iloc[0])
             + (0.3 if (m, a) == ("attn_norm", "individual") else 0.02)}
            for m in methods for a in ("individual", "rollout")]
    text, ev = D.globenc_table2_why(pd.DataFrame(rows), paper, methods)
    assert "furthest from the paper's layer 12 is N individual" in text
    assert "the outlier is the single layer" in text and len(ev) == 6


def test_consistency_why_reports_paired_ci():
    res = pd.DataFrame({"method": ["alti", "grad_l2"], "mean": [0.6, 0.7]})
    vs = pd.DataFrame({"method": ["grad_l2"], "mean_diff": [0.1], "ci_low": [-0.01],
                       "ci_high": [0.2], "n": [50]})
    text, _ = D.consistency_why(res, vs)
    assert "including 0" in text and "50 sentences" in text
    vs["ci_low"] = 0.05
    assert "excluding 0" in D.consistency_why(res, vs)[0]


def test_rollout_vs_single_why_over_tasks_and_variants():
    rows = []
    for task in ("A", "B"):
        for var in ("raw", "row-normalised"):
            for m, (roll, ind) in {"attn_norm": (0.1, 0.5),
                                   "globenc_layer": (0.8 if var == "raw" else 0.2, 0.5)}.items():
                rows += [{"task": task, "rollout": var, "method": m, "layer": 2,
                          "aggregation": "rollout", "mean": roll},
                         {"task": task, "rollout": var, "method": m, "layer": 2,
                          "aggregation": "individual", "mean": ind},
                         {"task": task, "rollout": var, "method": m, "layer": 1,
                          "aggregation": "rollout", "mean": 9.0}]
    text, ev = D.rollout_vs_single_why(pd.DataFrame(rows), ["attn_norm", "globenc_layer"])
    assert "below the single layer for N on every task" in text
    assert "above it on 2 of 2 tasks with the raw rollout and on 0 of 2" in text
    assert ev.shape == (2, 4)


def test_homogeneity_and_special_mass():
    n = 5
    same = np.tile(np.arange(1.0, n + 1), (n, 1))
    assert homogeneity(same) == pytest.approx(1.0)
    assert homogeneity(np.eye(n)) == pytest.approx(1.0 / n)          # TV(e_i, 1/n) = (n-1)/n
    assert homogeneity(np.stack([same, np.eye(n)])) == pytest.approx([1.0, 1.0 / n])
    assert special_mass(np.eye(n)) == pytest.approx(2.0 / n)
    with pytest.raises(ValueError):
        homogeneity(np.zeros((3, 3)))


def test_figs8_10_claims_from_a_result_frame():
    rows = []
    for m, (h1, hL, sL) in {"attention_rollout": (0.5, 0.9, 0.6), "alti": (0.2, 0.7, 0.1),
                            "rollout:attn_norm_res_ln": (0.4, 0.9, 0.1)}.items():
        rows += [{"method": m, "layer": 1, "homogeneity": h1, "special_mass": 0.1},
                 {"method": m, "layer": 6, "homogeneity": hL, "special_mass": sL}]
    claims = figs8_10_claims(pd.DataFrame(rows))
    assert claims.all() and claims.index[0] == FIGS8_10_HEADLINE
    rows[3]["homogeneity"] = 0.95                       # ALTI above rollout at the last layer
    assert not figs8_10_claims(pd.DataFrame(rows))[FIGS8_10_HEADLINE]


def test_row_spread_against_a_loop():
    from cmixlib import row_spread

    rng = np.random.default_rng(0)
    m = rng.random((3, 5, 5))
    loop = [np.mean([0.5 * np.abs(a[i] - a[k]).sum() for i in range(5) for k in range(5)])
            for a in m]
    assert row_spread(m) == pytest.approx(loop, rel=1e-12)
    assert row_spread(np.eye(4)) == pytest.approx(3 / 4)
    assert row_spread(np.ones((3, 3))) == 0.0
    with pytest.raises(Exception):
        row_spread(np.ones((2, 3)))


def test_example_claims_read_the_named_row_or_the_headline(monkeypatch):
    """A paper-example claim (cmixlib.book.claims.rules): the row named by the claim, else the item's
    headline; every other row for the "all" test; a missing row is "not tested", never a
    guess."""
    import types

    from cmixlib.book.claims import rules

    frame = pd.DataFrame([
        {"item": "VZ Table 1", "claim": "head", "value": 5, "op": "==", "expected": 5,
         "evidence": "e1", "headline": True},
        {"item": "VZ Table 1", "claim": "other", "value": "hospitals", "op": "==",
         "expected": "white hospitals", "evidence": "e2", "headline": False},
        {"item": "VZ Figure 4", "claim": "head", "value": 0.998, "op": ">", "expected": 0.5,
         "evidence": "e3", "headline": True},
    ])
    monkeypatch.setattr(rules, "run", lambda name: types.SimpleNamespace(result=frame))
    assert rules.TESTS["example_item"]("VZ Table 1").outcome == "holds"
    o = rules.TESTS["example_item"]("VZ Table 1", claim="other")
    assert o.outcome == "fails" and "e2" in o.ours
    o = rules.TESTS["example_all"]("VZ Table 1")
    assert o.outcome == "fails" and "0 of 1 hold" in o.ours
    assert rules.TESTS["example_item"]("VZ Figure 4", claim="nope").outcome == "not tested"


def test_example_claims_are_decided_by_the_rule_from_the_runs_measurements():
    """The paper-examples run measures (value, op, expected); the status page's rule decides,
    alike for the run's own values and for those read back from its CSV."""
    from cmixlib.book.claims.rules import example_holds

    rows = [({"value": "pictures", "op": "==", "expected": "pictures"}, True),
            ({"value": "hat", "op": "==", "expected": "pictures"}, False),
            ({"value": 0.998, "op": ">", "expected": 0.5}, True),
            ({"value": "0.351", "op": ">", "expected": "0.5"}, False),     # read from CSV
            ({"value": 5, "op": "==", "expected": "5"}, True),
            ({"value": 3.0, "op": "==", "expected": 3}, True),
            ({"value": float("nan"), "op": "==", "expected": "white hospitals"}, False)]
    for row, want in rows:
        assert example_holds(row) is want, row
    with pytest.raises(ValueError):
        example_holds({"value": 1, "op": "<", "expected": 2})
