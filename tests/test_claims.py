"""The papers' claims as data (cmixlib.book.claims): every quote is the paper's own words, every claim
has a test and an item, and the rules that turn outcomes into verdicts (unit tests on hand-made
frames; the real runs are exercised by notebook 98)."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from cmixlib.book import reproduction as R
from cmixlib.book.claims import (PAPER_FILES, Claim, claims_for, load_claims, normalise_text,
                                 quote_in_text, seed_path, seeds_dir)
from cmixlib.book.claims import compare as C
from cmixlib.book.claims import rules
from cmixlib.book.claims.compare import Outcome

SEEDS = seeds_dir()


# ---- the quotes are the papers' words ---------------------------------------------------------
@pytest.mark.skipif(SEEDS is None, reason="the papers' texts (../shared/seeds) are not here")
@pytest.mark.parametrize("paper", list(PAPER_FILES))
def test_every_quote_is_verbatim_in_the_paper(paper):
    text = seed_path(paper).read_text(encoding="utf-8")
    missing = [c.id for c in load_claims(paper) if not quote_in_text(c.quote, text)]
    assert not missing, missing


@pytest.mark.skipif(SEEDS is None, reason="the papers' texts (../shared/seeds) are not here")
def test_the_quote_check_can_fail():
    text = seed_path("ALTI").read_text(encoding="utf-8")
    assert quote_in_text("ALTI method outperforms similar previous approaches", text)
    assert not quote_in_text("ALTI method outperforms every previous approach", text)


def test_normalisation_is_whitespace_and_hyphenated_breaks_only():
    assert normalise_text("infor-\n  mation  flows\n\nhere") == "information flows here"
    assert normalise_text("grad-L2") == "grad-L2"             # a hyphen inside a line stays
    assert not quote_in_text("Value Zeroing", "Value-Zeroing")


# ---- every claim is complete and tied to the page ---------------------------------------------
def test_every_claim_has_a_known_test_a_location_a_scope_and_an_item_on_the_page():
    items = {(it.paper, it.item) for it in R.ITEMS}
    for c in load_claims():
        assert c.test in rules.TESTS, c.id
        assert c.where and c.scope and c.quote.strip() == c.quote, c.id
        assert (c.paper, c.item) in items, (c.paper, c.item)


def test_each_item_with_claims_has_exactly_one_headline():
    for paper in PAPER_FILES:
        for item in {c.item for c in load_claims(paper)}:
            heads = [c for c in claims_for(paper, item) if c.headline]
            assert len(heads) == 1, (paper, item)
            assert claims_for(paper, item)[0].headline


def test_every_assessed_item_is_decided_by_claims():
    """Each assessed row has claims (a table's headline weights its ranking); an item "not run"
    names the model as the paper does (VZ Figure A.4: the ELECTRA generator)."""
    for it in R.ITEMS:
        if it.assess is not None:
            assert claims_for(it.paper, it.item), (it.paper, it.item)
    a4 = next(it for it in R.ITEMS if it.paper == "Value Zeroing" and it.item == "Figure A.4")
    assert "electra-base-generator" in a4.not_run


# ---- outcome -> verdict rules -----------------------------------------------------------------
def _claims(*outcomes: str) -> list:
    return [(Claim(id=f"c{i}", paper="p", item="i", quote="q", where="w", test="not_tested",
                   headline=i == 0), Outcome(o)) for i, o in enumerate(outcomes)]


def test_claims_verdict_weights_the_headline():
    v = lambda *o: rules.claims_verdict(_claims(*o))[0]  # noqa: E731
    assert v("holds", "holds", "holds") == "claims hold"
    assert v("holds", "holds", "fails") == "headline holds"          # half of the others
    assert v("holds", "fails") == "headline holds"                   # one alone: not enough
    assert v("holds", "fails", "fails", "holds") == "differs"         # 1 of 3 others
    assert v("fails", "holds", "holds") == "differs"
    assert v("reversed", "holds") == "reversed"
    assert v("tie", "holds") == "not decided"
    assert v("holds", "not tested") == "claims hold"                  # untested: left out
    assert v("not run", "not run") == "not run"
    for o in ("holds", "fails", "tie", "reversed"):
        assert "ranking" not in v(o, "holds") and "direction" not in v(o, "holds")
    with pytest.raises(ValueError):
        rules.claims_verdict([(c, o) for c, o in _claims("holds", "holds")
                              if not c.headline])


def test_table_verdict_lets_a_failed_headline_overrule_the_ranking():
    assert rules.table_verdict("same ranking (other model)", Outcome("fails")) == \
        "differs (other model)"
    assert rules.table_verdict("same ranking", Outcome("holds")) == "same ranking"
    assert rules.table_verdict("too few methods (other model)", Outcome("holds")) == \
        "headline holds (other model)"
    assert rules.table_verdict("too few methods", Outcome("tie")) == "not decided"
    assert rules.table_verdict("same direction", Outcome("reversed")) == "differs"


# ---- comparisons with their uncertainty -------------------------------------------------------
def _rows(values: dict, std: float = 0.1, n: int = 100) -> pd.DataFrame:
    """{method: [mean per layer]} -> rows with layer (from 1), mean, std, n."""
    return pd.DataFrame([{"method": m, "layer": k + 1, "mean": v, "std": std, "n": n}
                         for m, vals in values.items() for k, v in enumerate(vals)])


def test_every_layer_is_per_layer_with_ties_as_ties():
    se2 = np.sqrt(2 * 0.1 ** 2 / 100)                # the combined standard error: 0.0141
    far, near = 3 * se2, 1 * se2
    rows = _rows({"a": [0.5, 0.5, 0.5], "b": [0.5 - far, 0.5 - far, 0.5 - far]})
    assert C.every_layer(rows, "a", ["b"])[0] == "holds"
    rows = _rows({"a": [0.5, 0.5, 0.5], "b": [0.5 - far, 0.5 - near, 0.5 - far]})
    out, text = C.every_layer(rows, "a", ["b"])
    assert out == "tie" and "tie in layer(s) 2" in text and "layer 2:" in text
    rows = _rows({"a": [0.9, 0.5, 0.9], "b": [0.1, 0.5 + far, 0.1]})   # the mean would hide it
    out, text = C.every_layer(rows, "a", ["b"])
    assert out == "fails" and "below in layer(s) 2" in text
    assert C.every_layer(rows.assign(mean=-rows["mean"]), "a", ["b"],
                         higher_is_better=False)[0] == "fails"


def test_relation_and_combine():
    assert C.relation(0.1, 2.5) == "above" and C.relation(-0.1, -2.5) == "below"
    assert C.relation(0.1, 1.9) == "tie"
    assert C.combine(["holds", "holds"]) == "holds"
    assert C.combine(["holds", "tie"]) == "tie"
    assert C.combine(["holds", "fails"]) == "fails"
    assert C.combine(["reversed", "reversed"]) == "reversed"
    assert C.combine(["holds", "not tested"]) == "not tested"
    with pytest.raises(ValueError):
        Outcome("maybe")


def test_paired_bootstrap_is_seeded_and_covers_the_mean():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.3, 1, 400), rng.normal(0, 1, 400)
    d, lo, hi = C.paired_bootstrap(a, b)
    assert (d, lo, hi) == C.paired_bootstrap(a, b)
    assert lo < d < hi and lo < 0.3 < hi
    d1, lo1, hi1 = C.paired_bootstrap(a[:1], b[:1])          # one example: no interval
    assert np.isfinite(d1) and np.isnan(lo1) and np.isnan(hi1)


# ---- the tests on hand-made run frames --------------------------------------------------------
def test_vz_headline_is_on_both_metrics_and_only_the_context_mixing_methods(monkeypatch):
    from cmixlib.book.claims import rules_vz as V

    big = {m: [0.1, 0.1, 0.1] for m in V.CONTEXT_MIXING}
    dot = {**big, "value_zeroing": [0.5, 0.5, 0.5], "random": [0.6, 0.1, 0.1],
           "deeplift": [0.9, 0.9, 0.9]}
    ap = {**big, "value_zeroing": [0.5, 0.05, 0.5], "random": [0.1, 0.1, 0.1],
          "deeplift": [0.9, 0.9, 0.9]}
    rows = pd.concat([_rows(dot, std=0.01).assign(metric="dot"),
                      _rows(ap, std=0.01).assign(metric="ap")])
    rows["layer"] -= 1                                   # the run numbers layers from 0
    monkeypatch.setattr(V, "_run", lambda *a: SimpleNamespace(result=rows, frames={}))
    o = V.vz_best_among_mixing("pretrained")
    assert o.outcome == "fails"                          # AP, layer 2
    assert "dot product: above in layer(s) 1-3" in o.ours
    assert "average precision: above in layer(s) 1, 3; below in layer(s) 2" in o.ours
    assert "dot product: at or below Random in layer(s) 1" in o.ours   # the fact beside


def _seeded_compression(last_steps, layers: int = 6) -> pd.DataFrame:
    """compression_seeds rows: layers 0..layers, rising by 1 a layer with a small per-seed
    offset, then the last step by ``last_steps`` (one value per seed)."""
    rows = []
    for s, last in enumerate(last_steps):
        vals = [1.0 + k + 0.01 * s for k in range(layers)]
        vals.append(vals[-1] + last)
        rows += [{"condition": "x", "layer": k, "seed": s, "compression": v}
                 for k, v in enumerate(vals)]
    return pd.DataFrame(rows)


def _fake_mdl(monkeypatch, by_condition, layers: int = 6):
    from cmixlib.book.claims import alternatives_vz as AV
    from cmixlib.book.claims import rules_vz_probing as P

    meta = {"model": "m", "model_identity": {"id": "m", "layers": layers}}
    monkeypatch.setattr(P, "run", lambda name, c=None: SimpleNamespace(
        frames={"compression_seeds": by_condition[c],
                "compression": by_condition[c].query("seed == 0")}, meta=meta))
    return SimpleNamespace(vz_compression_rises=P.vz_compression_rises,
                           vz_compression_jumps=P.vz_compression_jumps,
                           mdl_noise_alternative=AV.mdl_noise_alternative)


def test_compression_steps_pair_by_seed_and_decide_by_two_standard_errors():
    from cmixlib.book.claims import rules_vz_probing as V

    d = _seeded_compression([-0.3, 0.2, -0.25, 0.1])
    steps = V.compression_steps(d.pivot(index="layer", columns="seed", values="compression"))
    last = steps.loc[6]
    diffs = np.array([-0.3, 0.2, -0.25, 0.1])
    assert last["mean"] == pytest.approx(diffs.mean())
    assert last["se"] == pytest.approx(diffs.std(ddof=1) / 2)
    assert last["z"] == pytest.approx(diffs.mean() / (diffs.std(ddof=1) / 2))
    assert list(steps["kind"]) == ["rise"] * 5 + ["tie"]
    clear = _seeded_compression([-1.0, -0.9, -1.1, -0.95])
    steps = V.compression_steps(clear.pivot(index="layer", columns="seed", values="compression"))
    assert steps.loc[6, "kind"] == "fall" and steps.loc[6, "z"] < -2


def test_vz_compression_rises_fails_only_on_a_fall_outside_noise(monkeypatch):
    rise = _seeded_compression([0.5, 0.4, 0.6, 0.45])
    clear = _seeded_compression([-1.0, -0.9, -1.1, -0.95])
    noisy = _seeded_compression([-0.3, 0.2, -0.25, 0.1])
    V = _fake_mdl(monkeypatch, {"pretrained": rise, "finetuned": rise})
    o = V.vz_compression_rises()
    assert o.outcome == "holds" and "rises at every step" in o.ours
    assert o.uncertainty.startswith("4 probe seeds per layer; paired by seed")
    V = _fake_mdl(monkeypatch, {"pretrained": rise, "finetuned": clear})
    o = V.vz_compression_rises()
    assert o.outcome == "fails" and "fine-tuned" in o.ours
    assert "falls outside noise at layer 5->6 -0.99" in o.ours
    assert "outside noise: the fall is real" in V.mdl_noise_alternative()
    V = _fake_mdl(monkeypatch, {"pretrained": noisy, "finetuned": rise})
    o = V.vz_compression_rises()
    assert o.outcome == "tie" and "within noise at layer 5->6 -0.06" in o.ours
    alt = V.mdl_noise_alternative()
    assert "pre-trained, layer 5->6 -0.06" in alt and "within noise: a tie, not a fall" in alt
    assert "fine-tuned, layer 5->6 +0.49" in alt and "a rise" in alt


def test_vz_compression_jumps_not_tested_without_bert_layers(monkeypatch):
    rise = _seeded_compression([0.5, 0.4, 0.6, 0.45])
    V = _fake_mdl(monkeypatch, {"finetuned": rise}, layers=6)
    o = V.vz_compression_jumps()
    assert o.outcome == "not tested" and "no layer 9" in o.uncertainty
    assert "6 +0.49 ± 0.09" in o.ours
    jumps = [0.5] * 12
    jumps[3] = jumps[8] = 2.0                           # layers 4 and 9 (steps from layer 3, 8)
    rows = pd.DataFrame([{"condition": "x", "layer": k, "seed": s,
                          "compression": 1 + sum(jumps[:k]) + 0.01 * s}
                         for s in range(3) for k in range(13)])
    V = _fake_mdl(monkeypatch, {"finetuned": rows}, layers=12)
    assert V.vz_compression_jumps().outcome == "holds"
    rows.loc[rows.layer >= 9, "compression"] -= 1.6     # layer 9's rise below the median
    assert V.vz_compression_jumps().outcome == "fails"


def test_alti_fig6_reversed_when_alti_gives_the_special_tokens_more(monkeypatch):
    from cmixlib.book.claims import rules_alti as A

    res = pd.DataFrame({"method": ["alti", *A.FIG6_OTHERS], "mean": [0.9, 0.5, 0.5, 0.4],
                        "std": 0.1, "n": 500})
    monkeypatch.setattr(A, "_run", lambda name: SimpleNamespace(result=res))
    assert A.alti_fig6_special().outcome == "reversed"
    res.loc[0, "mean"] = 0.1
    assert A.alti_fig6_special().outcome == "holds"
    res.loc[0, "mean"] = 0.45
    assert A.alti_fig6_special().outcome == "fails"


def _by_depth(a_roll: float, b_roll: float, b_layers: int = 3) -> pd.DataFrame:
    """A table2_by_depth frame: A (6 layers) and B, Random 0 and Nearness 0.05 on both, std 0.3
    and n 400 (standard error 0.015 a mean)."""
    rows = []
    for model, layers, roll in (("A", 6, a_roll), ("B", b_layers, b_roll)):
        for m, v in (("attention_rollout", roll), ("alti", 0.4), ("random", 0.0),
                     ("nearness", 0.05)):
            rows.append({"method": m, "model": model, "layers": layers, "reference": "grad_l2",
                         "mean": v, "std": 0.3, "n": 400, "n_nan": 0})
    return pd.DataFrame(rows)


def test_depth_student_alternative_gives_each_conclusion(monkeypatch):
    from cmixlib.book.claims import alternatives_alti as A

    end = lambda key: A.DEPTH_CONCLUSIONS[key].format(s="B", d="A") + "."  # noqa: E731
    # B clearly above both baselines (0.2 vs 0.05: 7 SE) and above A's -0.05: depth
    text = A.depth_student_alternative(_by_depth(-0.05, 0.2))
    assert text.startswith("Attn Rollout's Spearman with grad-L2 (Table 2's SST-2 column)")
    assert text.endswith(end("depth"))
    assert "A (6 layers): Attn Rollout -0.050" in text and "B (3 layers): Attn Rollout +0.200" in text
    assert "Nearness +0.050 (gap +7.1 SE)" in text and "B's Attn Rollout minus A's +0.250 (+11.8 SE)" in text
    assert "over the same 400 sentences" in text
    # B within 2 SE of Nearness (0.07 vs 0.05: 0.9 SE): not above the baselines either
    assert A.depth_student_alternative(_by_depth(-0.05, 0.07)).endswith(end("not depth"))
    # B below Random: not depth
    assert A.depth_student_alternative(_by_depth(-0.05, -0.2)).endswith(end("not depth"))
    # B above both baselines, A as high: not told apart
    assert A.depth_student_alternative(_by_depth(0.2, 0.21)).endswith(end("not told apart"))
    # the run's frame is read when none is given
    monkeypatch.setattr(A, "run", lambda name: SimpleNamespace(
        frames={"table2_by_depth": _by_depth(-0.05, 0.2)}))
    assert A.depth_student_alternative().endswith(end("depth"))
    assert "not told apart: both models have 6 layers" in A.depth_student_alternative(
        _by_depth(-0.05, 0.2, b_layers=6))


def test_claims_why_names_the_failed_claims_and_the_models_accuracy(monkeypatch):
    from cmixlib.book.claims import status as S

    rows = _claims("holds", "fails", "reversed", "tie")
    rows = [(c, Outcome(o.outcome, f"numbers {k}")) for k, (c, o) in enumerate(rows)]
    monkeypatch.setattr(S, "claim_rows", lambda paper, item: rows)
    meta = {"model": "m (bert, 6 layers); accuracy 0.912", "data_size": 5,
            "experiment": "alti-fig3-anisotropy", "settings": {}}
    monkeypatch.setattr(S, "run", lambda name, condition=None: SimpleNamespace(meta=meta))
    text, ev = S.claims_why("ALTI", "Figure 3", "alti-fig3")
    assert "fails: w (c1): numbers 1; reversed: w (c2): numbers 2." in text
    assert "numbers 0" not in text and "numbers 3" not in text
    assert text.endswith("told apart by its accuracy: 0.912.")
    assert list(ev["outcome"]) == ["holds", "fails", "reversed", "tie"]


def test_every_assessed_item_has_a_why():
    from cmixlib.book.item_whys import ITEM_WHYS

    for it in R.ITEMS:
        if it.assess is not None and not it.item.startswith("Table 3"):
            assert (it.paper, it.item) in ITEM_WHYS, (it.paper, it.item)


def test_every_claims_args_fit_its_test():
    import inspect

    for c in load_claims():
        inspect.signature(rules.TESTS[c.test]).bind(**c.args)      # raises on a wrong name


def test_an_example_item_is_told_apart_by_the_models_predictions(monkeypatch):
    """Where the run states no accuracy (the papers' example sentences), the why's alternative
    is told apart by the model's predictions on those sentences (the run's rows), and an
    annotation item with no model says that it is not told apart: never 'not stated'."""
    import pandas as pd

    from cmixlib.book.claims import status as S

    frame = pd.DataFrame([
        {"item": "ALTI Tables 1, 3-9", "claim": "headline", "value": 1, "op": "==",
         "expected": 3, "evidence": "e"},
        {"item": "ALTI Tables 1, 3-9", "claim": "Table 4: the classifier predicts positive",
         "value": "positive", "op": "==", "expected": "positive", "evidence": "positive"},
        {"item": "ALTI Tables 1, 3-9", "claim": "Table 8: the MLM picks 'appear' over "
         "'appears'", "value": 0.351, "op": ">", "expected": 0.5, "evidence": "p = 0.351"},
        {"item": "VZ Table 1", "claim": "ana: the annotation marks exactly 'x'", "value": "x",
         "op": "==", "expected": "x", "evidence": "ours: x"}])
    res = SimpleNamespace(result=frame)
    alti = S.example_alternative(res, "ALTI", "Tables 1, 3-9")
    assert "told apart by its predictions there: 1 of 2 as the paper says" in alti
    assert ("not as the paper says: Table 8: the MLM picks 'appear' over 'appears' "
            "(ours: p = 0.351)") in alti
    own = S.example_alternative(res, "ALTI", "Tables 1, 3-9", ["ranks x higher (Table 8): y"])
    assert own.endswith("on the failing claim's own sentence (Table 8): Table 8: the MLM picks "
                        "'appear' over 'appears' (not as the paper says).")
    vz = S.example_alternative(res, "Value Zeroing", "Table 1")
    assert "not told apart" in vz and "annotation" in vz
    assert "not told apart" in S.example_alternative(res, "GlobEnc", "Figure 9")
