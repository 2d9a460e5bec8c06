"""The verdict rules (cmixlib.book.verdicts, cmixlib.book.reproduction) on small hand-made tables."""
from itertools import permutations
from math import factorial
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from cmixlib.book import reproduction as R
from cmixlib.book.claims.rules_vz import ALIGNMENT_HEADLINE, alignment_claims
from cmixlib.book.verdicts import (VERDICTS, claims_verdict, holds_every_layer, permutation_p,
                                   ranking_verdict, with_model_condition)

FOUR = {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0}


def _brute_p(ours: list[float], paper: list[float]) -> float:
    """P(rho_perm >= rho_obs) by counting every order of our values (scipy's Spearman)."""
    from scipy.stats import spearmanr

    obs = spearmanr(ours, paper).statistic
    hits = sum(spearmanr(list(q), paper).statistic >= obs - 1e-9 for q in permutations(ours))
    return hits / factorial(len(ours))


# ---- the permutation p-value ------------------------------------------------------------------
def test_exact_p_of_a_perfect_order_of_four_is_one_in_24():
    rho, p, how, p_min = permutation_p([4, 3, 2, 1], [4, 3, 2, 1])
    assert rho == pytest.approx(1.0) and p == pytest.approx(1 / 24) and how == "exact"
    assert p_min == pytest.approx(1 / 24)


@pytest.mark.parametrize("ours, paper", [([2, 4, 3, 1], [4, 3, 2, 1]),
                                         ([0.3, 0.1, 0.5, 0.2, 0.9], [1, 2, 3, 4, 5]),
                                         ([1, 1, 2, 3, 5, 4], [1, 2, 3, 4, 5, 6])])
def test_exact_p_matches_a_brute_force_count(ours, paper):
    assert permutation_p(ours, paper)[1] == pytest.approx(_brute_p(ours, paper))


def test_three_methods_can_never_be_significant():
    rho, p, _, p_min = permutation_p([3, 2, 1], [3, 2, 1])
    assert rho == pytest.approx(1.0) and p == pytest.approx(1 / 6) and p_min == pytest.approx(1 / 6)


def test_monte_carlo_above_eight_methods_is_seeded_and_close():
    x = np.arange(10.0)
    rho, p, how, _ = permutation_p(x, x)
    assert "Monte-Carlo" in how and p < 0.001 and rho == pytest.approx(1.0)
    assert permutation_p(x[::-1], x)[1] > 0.99
    assert permutation_p(x, x)[1] == p                        # the same seed, the same p


# ---- ranking_verdict ------------------------------------------------------------------------
def test_a_perfect_order_of_four_is_the_same_ranking_with_rho_and_p_in_the_detail():
    v, detail = ranking_verdict({"a": 0.9, "b": 0.7, "c": 0.5, "d": 0.1}, FOUR, same_model=True)
    assert v == "same ranking"
    assert "Spearman +1.00 (p = 0.0417, exact, 4 methods)" in detail


def test_a_random_order_is_neither_same_ranking_nor_same_direction():
    # rho = 0.4 over 4 methods: a random order reaches it with chance 9/24
    v, detail = ranking_verdict({"a": 2, "b": 4, "c": 3, "d": 1}, FOUR, same_model=True)
    assert "Spearman +0.40 (p = 0.375" in detail and v == "differs"
    # rho = 0.8 over 4 methods (one swap): p = 4/24, not significant
    v, detail = ranking_verdict({"a": 4, "b": 3, "c": 1, "d": 2}, FOUR, same_model=True)
    assert "Spearman +0.80 (p = 0.167" in detail and v == "differs"


def test_same_direction_needs_a_significant_positive_rho():
    paper = {k: float(v) for k, v in zip("abcdefg", range(7, 0, -1))}
    # the top two and the bottom two swapped: rho = 0.93, significant, but another best method
    ours = {"a": 6.0, "b": 7, "c": 5, "d": 4, "e": 3, "f": 1, "g": 2}
    v, detail = ranking_verdict(ours, paper, same_model=True)
    assert v == "same direction" and "Spearman +0.93" in detail and "7 methods" in detail
    # the best method last in ours, the rest in order: rho = +0.25 > 0 but p = 0.3: differs
    ours = {"a": 0.0, "b": 6, "c": 5, "d": 4, "e": 3, "f": 2, "g": 1}
    v, detail = ranking_verdict(ours, paper, same_model=True)
    assert v == "differs" and "Spearman +0.25" in detail
    flipped = {k: -x for k, x in paper.items()}
    assert ranking_verdict(flipped, paper, same_model=True)[0] == "differs"


def test_ties_for_best_are_shown_and_not_broken_by_name():
    paper = {"b": 0.90, "a": 0.90, "c": 0.5, "d": 0.3, "e": 0.1}
    ours = {"b": 0.80, "a": 0.85, "c": 0.5, "d": 0.3, "e": 0.1}
    v, detail = ranking_verdict(ours, paper, same_model=False)
    assert "paper b = a (tie)" in detail and "ours a," in detail
    assert v == "same ranking (other model)"                  # a is among the paper's best
    # ours ties b with c, the paper's best is a alone: no shared best, not the same ranking
    v, detail = ranking_verdict({"a": 0.5, "b": 0.9, "c": 0.9, "d": 0.1},
                                {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.1}, same_model=True)
    assert "ours b = c (tie)" in detail and v != "same ranking"


def test_too_few_methods_and_other_model_and_reproduced():
    paper = {"a": 0.5, "b": 0.3, "c": 0.1}
    assert ranking_verdict({"a": 0.52, "b": 0.29, "c": 0.12}, paper, same_model=True)[0] == \
        "reproduced"
    v, detail = ranking_verdict({"a": 0.9, "b": 0.6, "c": 0.1}, paper, same_model=True)
    assert v == "too few methods" and "no order of 3 methods" in detail
    assert "Spearman" not in detail                  # an untested ranking prints no rho
    assert ranking_verdict({"a": 0.52, "b": 0.29, "c": 0.12}, paper, same_model=False)[0] == \
        "too few methods (other model)"
    assert ranking_verdict({"a": 0.1}, paper, same_model=False)[0] == "not run"
    low = ranking_verdict({"a": 1, "b": 2, "c": 3, "d": 4}, {"a": 5, "b": 6, "c": 7, "d": 8},
                          same_model=False, higher_is_better=False)
    assert low[0] == "same ranking (other model)" and "best: ours a, paper a" in low[1]
    assert all(w in VERDICTS for w in ("same ranking (other model)", "too few methods",
                                       "differs (other model)"))
    assert with_model_condition("not run", False) == "not run"
    flat = ranking_verdict({"a": 1, "b": 1, "c": 1, "d": 1}, FOUR, same_model=True)
    assert flat[0] == "differs" and "Spearman +nan" in flat[1]


# ---- claims ---------------------------------------------------------------------------------
def test_a_failed_headline_is_differs_even_if_the_others_hold():
    claims = pd.Series({"H": False, "a": True, "b": True, "c": True, "d": True, "e": False})
    v, detail = claims_verdict(claims, headline="H")
    assert v == "differs" and "headline fails: H" in detail
    assert claims_verdict(claims)[0] == "most claims hold"    # the fallback without a headline
    ok = claims.copy()
    ok["H"] = True
    assert claims_verdict(ok, headline="H")[0] == "headline holds"     # 4 of 5 others
    ok[["a", "b", "c"]] = False
    assert claims_verdict(ok, headline="H")[0] == "differs"            # 1 of 5 others
    assert claims_verdict(ok.astype(bool) | True, headline="H")[0] == "claims hold"
    # a figure ranks nothing: no claims verdict is ever a ranking word
    for case in (claims, ok, ok.astype(bool) | True):
        assert "ranking" not in claims_verdict(case, headline="H")[0]
        assert "direction" not in claims_verdict(case)[0]
    with pytest.raises(KeyError):
        claims_verdict(claims, headline="not a claim")


def test_every_layer_claims_are_tested_per_layer_not_on_the_mean():
    # Value Zeroing has the best mean but loses layer 2 to N: the headline fails
    cols = ["random", "attention", "attn_norm", "attn_norm_res_ln", "globenc_layer",
            "alti_layer", "value_zeroing", "deeplift"]
    t = pd.DataFrame([[0.2, 0.1, 0.3, 0.2, 0.2, 0.2, 0.9, 0.5],
                      [0.2, 0.1, 0.45, 0.2, 0.2, 0.2, 0.4, 0.45],
                      [0.2, 0.1, 0.3, 0.2, 0.2, 0.2, 0.9, 0.1]], columns=cols)
    assert t.mean().idxmax() == "value_zeroing"
    c = alignment_claims(t, ["deeplift"])
    assert not c[ALIGNMENT_HEADLINE] and c.drop(ALIGNMENT_HEADLINE).all()
    assert claims_verdict(c, headline=ALIGNMENT_HEADLINE)[0] == "differs"
    t.loc[1, "attn_norm"] = 0.35
    assert alignment_claims(t, ["deeplift"])[ALIGNMENT_HEADLINE]
    t.loc[1, "deeplift"] = 0.95        # a gradient method is not a context-mixing method
    assert alignment_claims(t, ["deeplift"])[ALIGNMENT_HEADLINE]
    t.loc[1, "attention"] = 0.25       # raw attention above random in one layer only
    assert t["attention"].mean() < t["random"].mean()
    assert not alignment_claims(t, ["deeplift"])[
        "raw attention is below the random baseline in every layer"]
    s = pd.Series({1: -0.2, 2: -0.1, 3: 0.05})                  # a sign claim, per layer
    assert not holds_every_layer(s, lambda x: x < 0) and s.mean() < 0
    assert holds_every_layer(s.iloc[:2], lambda x: x < 0)
    assert not holds_every_layer(pd.Series(dtype=float), lambda x: True)


# ---- exact model identity -------------------------------------------------------------------
def _res(model: str):
    return SimpleNamespace(meta={"model": model})


def test_model_identity_is_exact_not_a_substring():
    assert not R.same_model_id("distilbert-base-uncased", "bert-base-uncased")
    assert R.same_model_id("google-bert/bert-base-uncased", "bert-base-uncased")
    assert R.same_model_id("distilbert/distilbert-base-uncased", "distilbert-base-uncased")
    assert not R.same_model_id("textattack/bert-base-uncased", "bert-base-uncased")
    assert not R._same_model(_res("distilbert-base-uncased (distilbert, 6 layers, hidden 768)"))
    assert R._same_model(_res("google-bert/bert-base-uncased (bert, 12 layers, hidden 768)"))
    assert R._same_model(_res("sst2: bert-base-uncased (bert, 12 layers, hidden 768): "
                              "fine-tuned on sst2 | sva: bert-base-uncased (bert, 12 layers)"))
    assert not R._same_model(_res("sst2: bert-base-uncased (bert) | sva: distilbert-base-uncased"
                                  " (distilbert)"))
    assert not R._same_model(_res("all-MiniLM-L6-v2 (bert, 6 layers, hidden 384) -- offline "
                                  "fallback for 'bert-base-uncased'"))
    fig7 = _res("A: bert-base-uncased (bert, 12 layers) | B: distilbert-base-uncased (x)")
    assert R._same_model(fig7, (R.MAIN_MODEL, "distilbert-base-uncased"))
    assert not R._same_model(fig7)


def test_verdict_counts_know_every_verdict_word():
    t = pd.DataFrame({"verdict": ["same ranking (other model)", "differs", "no claim to test",
                                  "too few methods (other model)"]})
    counts = R.verdict_counts(t)
    assert counts.sum() == 4 and counts["same ranking (other model)"] == 1


def _globenc_frame(rollout: dict, individual: dict) -> pd.DataFrame:
    """A hand-made globenc-correlations result: {method: [value per layer]} per aggregation."""
    rows = [{"task": "SST-2", "rollout": "raw", "method": m, "aggregation": agg, "layer": k + 1,
             "mean": v}
            for agg, table in (("rollout", rollout), ("individual", individual))
            for m, vals in table.items() for k, v in enumerate(vals)]
    return pd.DataFrame(rows)


def test_globenc_fig3_and_table2_claims_follow_their_rules():
    from cmixlib.book.reproduction import (GLOBENC_FIG3_HEADLINE, GLOBENC_TABLE2_HEADLINE,
                                           almost_every_layer, globenc_fig3_claims,
                                           globenc_table2_claims)

    assert almost_every_layer(pd.Series([False, True, True, True]))
    assert not almost_every_layer(pd.Series([False, False, True, True]))
    assert not almost_every_layer(pd.Series([], dtype=bool))
    low = [-0.5, -0.4, -0.3, -0.2]
    roll = {"attention": low, "w_res": low, "attn_norm": [-0.4, 0.1, 0.3, 0.35],
            "attn_norm_res": [-0.4, 0.2, 0.5, 0.55], "globenc_layer": [-0.45, 0.5, 0.6, 0.65]}
    ind = {"attn_norm": [-0.4, 0.1, 0.2, 0.3], "attn_norm_res": [-0.4, 0.1, 0.2, 0.3],
           "globenc_layer": [-0.45, 0.1, 0.2, 0.3]}
    c = globenc_fig3_claims(_globenc_frame(roll, ind))
    assert c[GLOBENC_FIG3_HEADLINE]          # highest in layers 2-4, not in layer 1: "almost"
    assert c.all()
    t = globenc_table2_claims(_globenc_frame(roll, ind))
    assert not t.iloc[1] and t[GLOBENC_TABLE2_HEADLINE]      # layer 2: N ties the single layer
    worse = dict(ind, attn_norm=[-0.4, 0.1, 0.2, 0.9])        # N's single last layer above
    assert not globenc_table2_claims(_globenc_frame(roll, worse))[GLOBENC_TABLE2_HEADLINE]
    flat_fails = dict(roll, globenc_layer=[-0.45, -0.4, -0.35, 0.9])
    c2 = globenc_fig3_claims(_globenc_frame(flat_fails, ind))
    key = "the N-Enc curve flattens (reaches at least 3/4 of its rise by the middle layer)"
    assert not c2[key]
    # 3/4 of the rise by the middle layer: 0.8 of it flattens, 0.7 does not
    assert globenc_fig3_claims(_globenc_frame(
        dict(roll, globenc_layer=[-0.45, 0.35, 0.5, 0.55]), ind))[key]
    assert not globenc_fig3_claims(_globenc_frame(
        dict(roll, globenc_layer=[-0.45, 0.25, 0.5, 0.55]), ind))[key]


def test_every_numbered_item_of_the_three_papers_has_a_row():
    """NUMBERED_ITEMS (transcribed from the papers' captions) is covered by the status rows, and
    no row names an item that is not in a paper."""
    from cmixlib.book.reproduction import ITEMS, NUMBERED_ITEMS, covered_items

    assert covered_items("Figure 4, Figures A.5-A.18") == {"Figure 4", *(f"Figure A.{k}" for k
                                                                         in range(5, 19))}
    assert covered_items("Tables 1, 3-9 (rows)") == {"Table 1", *(f"Table {k}" for k in
                                                                  range(3, 10))}
    for paper, want in NUMBERED_ITEMS.items():
        rows = [covered_items(it.item) for it in ITEMS
                if it.paper == paper and not it.item.startswith("Text ")]
        assert all(rows), [it.item for it in ITEMS if it.paper == paper]
        have = set().union(*rows)
        assert set(want) - have == set(), (paper, sorted(set(want) - have))
        assert have - set(want) == set(), (paper, sorted(have - set(want)))


def test_status_rows_show_sizes_and_methods_for_reading():
    from cmixlib.book.reproduction import show_size

    assert show_size(1106) == "1,106" and show_size(None) == ""
    assert show_size({"sst2": 500, "sva": 500}) == "sst2 500, sva 500"
    assert "{" not in show_size({"SST-2": 872, "MNLI": {"a": 1}})


def test_methods_that_do_not_beat_the_sanity_baselines_are_flagged():
    from cmixlib.book.verdicts import below_sanity_baselines

    table = {"random": 0.01, "alti": 0.30, "nearness": 0.25, "value_zeroing_rollout": 0.05,
             "globenc": 0.25}
    assert below_sanity_baselines(table) == ["value_zeroing_rollout", "globenc"]   # a tie too
    assert below_sanity_baselines({"alti": 0.3, "vz": -0.1}) == []                # no floor
    assert below_sanity_baselines({"random": 0.0, "alti": float("nan"), "vz": 0.1}) == []


def test_describe_sanity_baselines_names_the_flagged_methods():
    from cmixlib.book.verdicts import describe_sanity_baselines

    table = {"random": 0.01, "alti": 0.30, "nearness": 0.25, "globenc": 0.25}
    assert describe_sanity_baselines(table) == ("Sanity baselines: random +0.01, nearness +0.25; "
                                                "not above them: globenc.")
    assert describe_sanity_baselines({"random": 0.0, "alti": 0.3}, label=str.upper) == \
        "Sanity baselines: RANDOM +0.00; every method is above them."
    assert describe_sanity_baselines({"alti": 0.3}) == ""
