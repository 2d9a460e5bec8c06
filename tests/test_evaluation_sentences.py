"""Sentences generated from computed values (cmixlib.metrics.evaluation.describe_*)."""
import pandas as pd

from cmixlib.book.verdicts import describe_claims


def test_describe_claims_counts_and_names_the_failed_claims():
    t = pd.DataFrame({"pre-trained": [True, False, True], "fine-tuned": [True, True, True]},
                     index=["A is first", "B beats C", "D is low"])
    text = describe_claims(t)
    assert text.startswith("pre-trained: 2 of 3 of the paper's claims hold; not: B beats C.")
    assert "fine-tuned: 3 of 3 of the paper's claims hold." in text
    flipped = describe_claims(~t)
    assert "pre-trained: 1 of 3" in flipped and "A is first" in flipped


def test_describe_model_difference_from_the_config():
    from types import SimpleNamespace

    from cmixlib.book.verdicts import describe_model_difference

    small = SimpleNamespace(num_hidden_layers=6, hidden_size=384, num_attention_heads=12,
                            _name_or_path="tiny")
    text = describe_model_difference(small)
    assert "6 layers, hidden size 384" in text and "12 layers, hidden size 768" in text
    assert "6/12 as long" in text
    base = SimpleNamespace(num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
                           _name_or_path="bert-base-uncased")
    assert "the same shape" in describe_model_difference(base)


def test_describe_depth_trend_rule():
    from cmixlib.book.verdicts import describe_depth_trend

    assert "rises with depth" in describe_depth_trend({1: 1.0, 2: 1.5, 3: 2.0}, "compression")
    assert "falls with depth" in describe_depth_trend({1: 3.0, 2: 2.0, 3: 1.0}, "x")
    text = describe_depth_trend({1: 1.0, 2: 3.0, 3: 1.0}, "x")
    assert "no clear trend" in text and "layer 2" in text


def test_describe_ranking_names_orders_and_agreement():
    from cmixlib.book.verdicts import describe_ranking

    paper = {"a": 0.3, "b": 0.2, "c": 0.1, "d": 0.0}
    same = describe_ranking({"a": 3, "b": 2, "c": 1, "d": 0, "extra": 9}, paper)
    assert "the same order" in same and "our number 1 of 4" in same
    flipped = describe_ranking({"a": 0, "b": 1, "c": 2, "d": 3}, paper)
    assert "our number 4 of 4" in flipped and "rank agreement -1.00" in flipped
    assert "ours: d > c > b" in flipped


def test_alignment_claims_follow_their_rules():
    from cmixlib.book.claims.rules_vz import alignment_claims

    cols = ["random", "attention", "attn_norm", "attn_norm_res_ln", "globenc_layer", "alti_layer",
            "value_zeroing", "deeplift"]
    good = pd.DataFrame([[0.2, 0.1, 0.3, 0.2, 0.2, 0.2, 0.6, 0.5],
                         [0.2, 0.1, 0.3, 0.2, 0.2, 0.2, 0.6, 0.3],
                         [0.2, 0.1, 0.3, 0.2, 0.2, 0.2, 0.6, 0.1]], columns=cols)
    c = alignment_claims(good, ["deeplift"])
    assert c.all() and len(c) == 6
    bad = good.copy()
    bad["attention"] = 0.9          # attention now best and above random and N
    c = alignment_claims(bad, ["deeplift"])
    assert not c["Value Zeroing is above the other context-mixing methods in every layer"]
    assert not c["raw attention is below the random baseline in every layer"]
    assert not c["N (attn-norm) is above raw attention"]
    assert c["N-ResLN is below N"]


def test_ranking_verdict_rules():
    from cmixlib.book.verdicts import ranking_verdict

    paper = {"a": 0.5, "b": 0.3, "c": 0.1}
    assert ranking_verdict({"a": 0.52, "b": 0.29, "c": 0.12}, paper, same_model=True)[0] == \
        "reproduced"
    # the same numbers from another model: never "reproduced"; 3 methods cannot reach p <= 0.05
    assert ranking_verdict({"a": 0.52, "b": 0.29, "c": 0.12}, paper, same_model=False)[0] == \
        "too few methods (other model)"
    # a weak positive agreement (rho = 0.3 over 5 methods, p = 0.36): differs
    five = {"a": 5, "b": 4, "c": 3, "d": 2, "e": 1}
    weak = ranking_verdict({"a": 3, "b": 5, "c": 1, "d": 4, "e": 2}, five, same_model=False)
    assert weak[0] == "differs (other model)" and "Spearman +0.30" in weak[1]
    # rho = 0.4 over 4 methods is what a random order reaches with chance 9/24: differs
    four = {"a": 4, "b": 3, "c": 2, "d": 1}
    at = ranking_verdict({"a": 2, "b": 4, "c": 3, "d": 1}, four, same_model=False)
    assert "Spearman +0.40" in at[1] and at[0] == "differs (other model)"
    assert ranking_verdict({"a": 0.1}, paper, same_model=False)[0] == "not run"
    low = ranking_verdict({"a": 0.1, "b": 0.3, "c": 0.5, "d": 0.7},
                          {"a": 0.2, "b": 0.4, "c": 0.6, "d": 0.8},
                          same_model=False, higher_is_better=False)
    assert low[0] == "same ranking (other model)"
