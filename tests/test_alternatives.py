"""Alternative causes (cmixlib.book.claims.alternatives) and the claim rules issue 39's review
changed: every declared alternative has a measurement, the why prints it instead of the generic
accuracy line, and each rule decides right on hand-made frames (and can fail)."""
import inspect
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from cmixlib.book.claims import Claim, load_claims
from cmixlib.book.claims import alternatives as ALT
from cmixlib.book.claims import rules
from cmixlib.book.claims.compare import Outcome


def _claims(*outcomes: str) -> list:
    return [(Claim(id=f"c{i}", paper="p", item="i", quote="q", where="w", test="not_tested",
                   headline=i == 0), Outcome(o)) for i, o in enumerate(outcomes)]


# ---- the registry -------------------------------------------------------------------------------
def test_every_declared_alternative_names_a_cause_and_a_known_measurement():
    declared = [c for c in load_claims() if c.alternative]
    assert len(declared) >= 10
    for c in declared:
        alt = c.alternative
        assert set(alt) <= {"cause", "test", "args"} and alt["cause"].strip(), c.id
        assert alt["test"] in ALT.ALTERNATIVES, c.id
        inspect.signature(ALT.ALTERNATIVES[alt["test"]]).bind(**alt.get("args", {}))


def test_parts_margin_names_the_parts_that_fail_outside_noise(monkeypatch):
    outcomes = {"a": Outcome("holds", "x"), "b": Outcome("fails", "ours b"),
                "c": Outcome("tie", "y")}
    monkeypatch.setattr(ALT, "claim_by_id", lambda i: Claim(
        id=i, paper="p", item=f"item {i}", quote="q", where="w", test="not_tested"))
    monkeypatch.setattr(ALT, "evaluate", lambda c: outcomes[c.id])
    text = ALT.parts_margin(["a", "b", "c"])
    assert "item b: fails (ours b)" in text and "item a: holds;" in text
    assert text.endswith("1 part(s) fail outside noise (item b): not a near miss")
    assert ALT.parts_margin(["a", "c"]).endswith("no part fails outside noise")


def test_the_why_prints_the_declared_alternative_not_the_generic_accuracy(monkeypatch):
    from cmixlib.book.claims import status as S

    with_alt = Claim(id="c1", paper="p", item="i", quote="q", where="w", test="not_tested",
                     alternative={"cause": "a cause", "test": "m", "args": {"k": 2}})
    head = Claim(id="c0", paper="p", item="i", quote="q", where="w", test="not_tested",
                 headline=True)
    monkeypatch.setitem(ALT.ALTERNATIVES, "m", lambda k: f"measured {k}: told apart")
    monkeypatch.setattr(S, "claim_rows", lambda paper, item: [
        (head, Outcome("holds")), (with_alt, Outcome("fails", "numbers"))])
    text, _ = S.claims_why("p", "i", "any-run")
    assert text == ("fails: w (c1): numbers. Alternative cause (c1): a cause; told apart by "
                    "measured 2: told apart.")
    assert "accuracy" not in text


def test_one_failing_secondary_claim_does_not_overrule_a_headline_that_holds():
    v = lambda *o: rules.claims_verdict(_claims(*o))[0]  # noqa: E731
    assert v("holds", "fails") == "headline holds"
    assert v("holds", "fails", "holds", "holds") == "headline holds"
    assert v("holds", "fails", "fails") == "differs"
    assert v("holds", "fails", "fails", "holds", "holds") == "headline holds"   # 2 of 4
    assert v("holds", "fails", "fails", "fails", "holds") == "differs"


# ---- ALTI Table 2: "with lower overall correlation values" ------------------------------------
def _table2(sst: dict, sva: dict, std: float = 0.2, n: int = 500) -> pd.DataFrame:
    return pd.DataFrame([{"task": t, "method": m, "mean": v, "std": std, "n": n}
                         for t, vals in (("SST-2", sst), ("SVA", sva)) for m, v in vals.items()])


def test_sva_lower_is_about_the_overall_values(monkeypatch):
    from cmixlib.book.claims import rules_alti as A

    sst = {"attention_rollout": -0.03, "rollout:attn_norm_res_ln": 0.41, "alti": 0.55}
    sva = {"attention_rollout": -0.02, "rollout:attn_norm_res_ln": 0.19, "alti": 0.40}
    frame = _table2(sst, sva)        # the paper's own BERT row: rollout is not lower on SVA
    monkeypatch.setattr(A, "_run", lambda name: SimpleNamespace(result=frame))
    assert A.alti_sva_lower().outcome == "holds"
    frame = _table2(sst, {m: v + 0.3 for m, v in sst.items()})
    monkeypatch.setattr(A, "_run", lambda name: SimpleNamespace(result=frame))
    assert A.alti_sva_lower().outcome == "fails"
    frame = _table2(sst, {m: v - 0.01 for m, v in sst.items()})          # within noise
    monkeypatch.setattr(A, "_run", lambda name: SimpleNamespace(result=frame))
    assert A.alti_sva_lower().outcome == "tie"


def test_the_sva_rule_passes_on_the_papers_own_numbers():
    from cmixlib.book.claims.rules_alti import ALTI_TABLE2_METHODS
    from cmixlib.data import paper_numbers as pn

    p = pn.alti_table2()
    p = p[p.model == "bert-base-uncased"].set_index(["task", "cmix_method"])["value"]
    assert (p.loc["SVA"].loc[list(ALTI_TABLE2_METHODS)].mean()
            < p.loc["SST-2"].loc[list(ALTI_TABLE2_METHODS)].mean())


# ---- GlobEnc Figures 3, 4, 5 --------------------------------------------------------------------
def _fig3_frame(values: dict, std: float = 0.1, n: int = 1000) -> pd.DataFrame:
    return pd.DataFrame([{"task": "SST-2", "rollout": "raw", "method": m, "aggregation": "rollout",
                          "layer": k + 1, "mean": v, "std": std, "n": n}
                         for m, vals in values.items() for k, v in enumerate(vals)])


def test_fig3_headline_counts_layers_with_noise():
    from cmixlib.book.claims.rules_globenc import fig3_headline

    se = np.sqrt(2 * 0.1 ** 2 / 1000)
    other = [0.0, 0.2, 0.4, 0.6]
    clear, near = 3 * se, 1 * se
    top = [v + clear for v in other]
    assert fig3_headline(_fig3_frame({"globenc_layer": top, "attn_norm": other}),
                         "SST-2")[0] == "holds"
    one_low = [other[0] - clear, *top[1:]]                       # one layer: still "almost"
    assert fig3_headline(_fig3_frame({"globenc_layer": one_low, "attn_norm": other}),
                         "SST-2")[0] == "holds"
    two_low = [other[0] - clear, other[1] - clear, *top[2:]]
    out, text, t = fig3_headline(_fig3_frame({"globenc_layer": two_low, "attn_norm": other}),
                                 "SST-2")
    assert out == "fails" and "below in layer(s) 1-2" in text
    ties = [other[0] - near, other[1] + near, *top[2:]]          # two layers within noise
    assert fig3_headline(_fig3_frame({"globenc_layer": ties, "attn_norm": other}),
                         "SST-2")[0] == "tie"


def _fig4_per_example(gap_by_variant: dict, n: int = 64) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for variant, gap in gap_by_variant.items():
        for k in range(n):
            base = 0.8 + 0.01 * rng.standard_normal()
            for m, v in (("attn_norm_res", base), ("globenc_layer", base),
                         ("attn_norm_res_ln", base - gap + 0.001 * rng.standard_normal())):
                rows.append({"example": k, "variant": variant, "method": m, "layer": 1,
                             "value": v})
    return pd.DataFrame(rows)


def test_fig4_holds_only_when_it_holds_in_every_reading(monkeypatch):
    from cmixlib.book.claims import rules_globenc_layers as G

    per = _fig4_per_example({"map_raw": 0.1, "rows": 0.1, "rows_off_diagonal": 0.1})
    monkeypatch.setattr(G, "_run", lambda name: SimpleNamespace(frames={"per_example": per}))
    assert G.ge_fig4().outcome == "holds"
    per = _fig4_per_example({"map_raw": 0.1, "rows": 0.1, "rows_off_diagonal": -0.1})
    monkeypatch.setattr(G, "_run", lambda name: SimpleNamespace(frames={"per_example": per}))
    o = G.ge_fig4()                                  # the diagnostic reading does not decide
    assert o.outcome == "holds" and "row by row without the diagonal (diagnostic)" in o.ours
    per = _fig4_per_example({"map_raw": 0.1, "rows": 0.01, "rows_off_diagonal": 0.1})
    monkeypatch.setattr(G, "_run", lambda name: SimpleNamespace(frames={"per_example": per}))
    o = G.ge_fig4()                                  # lower, but not "considerably"
    assert o.outcome == "fails" and "row by row: " in o.ours


def test_fig5_needs_large_negative_correlations(monkeypatch):
    from cmixlib.book.claims import rules_globenc_layers as G

    def frame(rs):
        return pd.DataFrame({"layer": range(1, len(rs) + 1), "pearson": rs,
                             "n_outlier_dims": 5})

    monkeypatch.setattr(G, "_run", lambda name: SimpleNamespace(
        result=frame([-0.8, -0.7, np.nan, -0.6, 0.2])))
    assert G.ge_fig5().outcome == "holds"                    # 3 of 4 defined layers
    monkeypatch.setattr(G, "_run", lambda name: SimpleNamespace(
        result=frame([-0.8, -0.02, -0.1, -0.6, 0.2])))        # negative, but not large
    o = G.ge_fig5()
    assert o.outcome == "fails" and "2 of 5 layers" in o.ours


# ---- Value Zeroing §5 ---------------------------------------------------------------------------
def _depth(values: dict, L: int = 3) -> pd.DataFrame:
    """{(method, aggregation): [mean per layer]} -> a rollout-depth result (pinned variant)."""
    return pd.DataFrame([{"condition": "c", "method": m, "aggregation": a, "layer": k + 1,
                          "replacement": "unk", "exclude": "special+target", "mean": v,
                          "std": 0.1, "n": 400, "n_nan": 0}
                         for (m, a), vals in values.items() for k, v in enumerate(vals)])


@pytest.fixture
def depth_run(monkeypatch):
    from cmixlib.book.claims import alternatives_vz as AV
    from cmixlib.book.claims import rules_vz as V

    def use(values):
        frame = _depth(values)
        monkeypatch.setattr(V, "_run", lambda *a: SimpleNamespace(result=frame))
        monkeypatch.setattr(AV, "run", lambda *a: SimpleNamespace(result=frame))
    return use


def test_rollout_benefit_is_against_the_same_layer(depth_run):
    from cmixlib.book.claims import rules_vz as V
    from cmixlib.book.claims.alternatives_vz import rollout_common_alternative

    vals = {(m, "single"): [0.1, 0.4, 0.05] for m in ("globenc_layer", "alti_layer")}
    vals.update({(m, "rollout"): [0.1, 0.3, 0.35] for m in ("globenc_layer", "alti_layer")})
    vals.update({("attention", "single"): [0.1, 0.1, 0.1],
                 ("attention", "rollout"): [0.1, 0.1, 0.1], ("nearness", "control"): [0.0]})
    depth_run(vals)
    o = V.vz_rollout_benefit()
    assert o.outcome == "holds" and "best single layer 2: +0.40" in o.ours
    assert rollout_common_alternative().endswith("the benefit is not common to every method")
    vals[("attention", "rollout")] = [0.1, 0.1, 0.4]
    depth_run(vals)
    assert rollout_common_alternative().endswith("every method benefits alike")
    vals[("alti_layer", "rollout")] = [0.1, 0.3, 0.06]               # within noise: a tie
    depth_run(vals)
    assert V.vz_rollout_benefit().outcome == "tie"
    vals[("alti_layer", "rollout")] = [0.1, 0.3, 0.35]
    vals[("nearness", "control")] = [0.35]           # a position-only score matches it: a tie
    depth_run(vals)
    o = V.vz_rollout_benefit()
    assert o.outcome == "tie" and "vs Nearness +0.35" in o.ours


# ---- paired differences (the cue-alignment runs) -----------------------------------------------
def test_paired_alignment_equals_a_loop_and_skips_nan():
    from cmixlib.metrics.paired import paired_alignment

    rng = np.random.default_rng(1)
    rows = [{"example": e, "method": m, "layer": l, "dot": float(rng.random()),
             "ap": float("nan") if (e == 2 and m == "b") else float(rng.random())}
            for e in range(6) for m in ("b", "a", "c") for l in (0, 1)]
    df = pd.DataFrame(rows)
    got = paired_alignment(df, metrics=("dot", "ap")).set_index(["layer", "metric", "a", "b"])
    assert len(got) == 2 * 2 * 3                        # layers x metrics x pairs
    for (layer, metric, a, b), r in got.iterrows():
        assert a < b
        x = df[df.layer == layer].pivot(index="example", columns="method", values=metric)
        d = (x[a] - x[b]).dropna().to_numpy()
        assert r["n"] == len(d)
        assert r["mean"] == pytest.approx(d.mean(), abs=1e-12)
        assert r["std"] == pytest.approx(d.std(), abs=1e-12)
    assert got.loc[(0, "ap", "a", "b"), "n"] == 5


def test_every_layer_uses_the_paired_error_where_the_run_keeps_it():
    from cmixlib.book.claims.compare import every_layer, paired_gap_z

    rows = pd.DataFrame([{"method": m, "layer": 1, "mean": v, "std": 0.3, "n": 100}
                         for m, v in (("a", 0.52), ("b", 0.50))])
    assert every_layer(rows, "a", ["b"])[0] == "tie"               # unpaired: z = 0.47
    pairs = pd.DataFrame([{"layer": 1, "a": "a", "b": "b", "mean": 0.02, "std": 0.05,
                           "n": 100}])                            # paired: z = 4
    assert every_layer(rows, "a", ["b"], pairs=pairs)[0] == "holds"
    assert paired_gap_z(pairs, 1, "b", "a") == pytest.approx((-0.02, -4.0))
    assert paired_gap_z(pairs, 2, "a", "b") is None
    assert every_layer(rows, "b", ["a"], pairs=pairs)[0] == "fails"


def test_table2_high_is_a_tie_when_the_probe_seeds_disagree(monkeypatch):
    from cmixlib.book.claims import rules_vz_probing as P

    L = 6
    align = pd.DataFrame([{"method": "value_zeroing", "metric": "dot", "layer": k,
                           "mean": [0.1, 0.2, 0.3, 0.4, 0.6, 0.5][k]} for k in range(L)])
    result = pd.DataFrame({"method": ["value_zeroing", "grad_x_input"],
                           "spearman": [0.9, -0.9], "n_layers": L})

    def fake(curves):
        seeds = pd.DataFrame([{"layer": k, "seed": s, "compression": c[k]}
                              for s, c in enumerate(curves) for k in range(L + 1)])

        def run(name, condition=None):
            if name == "cue-alignment":
                return SimpleNamespace(result=align)
            return SimpleNamespace(result=result,
                                   meta={"model_identity": {"id": "m", "layers": L}},
                                   frames={"compression_seeds": seeds})
        monkeypatch.setattr(P, "run", run)

    same = [1, 2, 3, 4, 5, 7, 6]                  # ranks the layers as Value Zeroing does
    fake([same, same])
    assert P.vz_table2_high("finetuned").outcome == "holds"
    fake([same, [1, 6, 5, 4, 3, 2, 7]])           # another seed reverses most of the order
    o = P.vz_table2_high("finetuned")
    assert o.outcome == "tie" and "over 2 probe seeds" in o.ours
    fake([[1, 6, 5, 4, 3, 2, 7]] * 2)
    assert P.vz_table2_high("finetuned").outcome == "fails"


def test_globenc_size_says_which_mnli_rows_and_why():
    from cmixlib.book.claims.runs import size_note

    res = SimpleNamespace(meta={"experiment": "globenc-correlations",
                                "settings": {"tasks": ["sst2", "mnli"]}})
    note = size_note(res)
    assert note.startswith(" (MNLI, the classifier's split: ") and "held-out dev-matched" in note
    assert size_note(SimpleNamespace(meta={"experiment": "alti-table2"})) == ""


def test_sva_right_wrong_compares_the_sentences_the_lm_gets_right_and_wrong():
    from cmixlib.book.claims.alternatives_alti import sva_right_wrong

    rng = np.random.default_rng(0)
    p = np.r_[np.full(300, 0.9), np.full(200, 0.2)]
    rho = np.r_[0.4 + 0.1 * rng.standard_normal(300), 0.0 + 0.1 * rng.standard_normal(200)]
    per = pd.DataFrame({"task": "SVA", "example": np.arange(500), "method": "alti", "rho": rho})
    text, stat = sva_right_wrong(per.sample(frac=1, random_state=0), p)   # order restored
    assert stat.loc["right", "n"] == 300 and stat.loc["right", "mean"] == pytest.approx(
        rho[:300].mean())
    assert text.endswith("the LM's failures pull the value down: part of the cause")
    same = per.assign(rho=0.1 * rng.standard_normal(500))
    assert sva_right_wrong(same, p)[0].endswith("do not explain the low value")
    with pytest.raises(ValueError):
        sva_right_wrong(per, p[:10])


def test_layers_noise_reports_the_paired_gap_where_an_every_layer_claim_fails(monkeypatch):
    from cmixlib.book.claims import alternatives_vz as AV

    rows = pd.DataFrame([{"method": m, "layer": l, "mean": v, "std": 0.3, "n": 100}
                         for m, vals in (("random", [0.5, 0.5]), ("attention", [0.4, 0.52]))
                         for l, v in zip((1, 2), vals)])
    pairs = pd.DataFrame([{"layer": 2, "a": "attention", "b": "random", "mean": 0.02,
                           "std": 0.05, "n": 100}])               # paired: random - attn z = -4
    monkeypatch.setattr(AV, "alignment_rows", lambda c, m: rows)
    monkeypatch.setattr(AV, "alignment_pairs", lambda c, m: pairs)
    text = AV.layers_noise_alternative("pretrained", "random", "attention", metrics=("dot",))
    assert text == ("the paired gap at each layer where it fails: dot layer 2: Random minus "
                    "Attention -0.020 (z = -4.0, outside noise)")


def test_claims_why_secondary_only_leaves_the_headline_out(monkeypatch):
    from cmixlib.book.claims import status as S

    rows = _claims("fails", "holds")
    monkeypatch.setattr(S, "claim_rows", lambda paper, item: rows)
    monkeypatch.setattr(S, "run", lambda name, condition=None: SimpleNamespace(
        meta={"model": "m; accuracy 0.9", "data_size": 1, "experiment": "x", "settings": {}}))
    text, _ = S.claims_why("p", "i", "any", secondary_only=True)
    assert text.startswith("no claim fails")
    assert S.claims_why("p", "i", "any")[0].startswith("fails: w (c0)")


def test_annotation_parse_tells_the_parse_from_the_rule(monkeypatch):
    pytest.importorskip("spacy")
    from cmixlib.book.claims import alternatives_vz as AV

    rows = pd.DataFrame([
        {"item": "VZ Table 1", "headline": False, "claim": "dnaa: the annotation marks exactly "
         "'white hospitals'", "value": "hospitals", "op": "==", "expected": "white hospitals"},
        {"item": "VZ Table 1", "headline": False, "claim": "dna: the annotation marks exactly "
         "'museums'", "value": "museums", "op": "==", "expected": "museums"}])
    monkeypatch.setattr(AV, "run", lambda name: SimpleNamespace(result=rows))
    text = AV.annotation_parse_alternative()
    assert "dnaa: 'white' is amod of 'hospitals'" in text and "dna:" not in text
    assert text.endswith("our rule (which of its words to mark) is what differs")
    rows.loc[0, "value"] = "Sara"                  # a mark off the phrase: the parse may differ
    assert AV.annotation_parse_alternative().endswith("it may be the cause")


def test_fig7_grad_l2_must_follow_behind_alti(monkeypatch):
    from cmixlib.book.claims import rules_alti as A

    rng = np.random.default_rng(0)
    base = rng.random(200)
    def per(alti_shift):
        rows = [{"example": k, "method": m, "spearman": v}
                for m, shift in (("alti", alti_shift), ("grad_l2", 0.0),
                                 ("grad_x_input_abs", -0.5), ("integrated_gradients", -0.2))
                for k, v in enumerate(base + shift + 0.01 * rng.standard_normal(200))]
        return pd.DataFrame(rows)
    monkeypatch.setattr(A, "_run", lambda name: SimpleNamespace(
        frames={"per_example": per(+0.1)}))
    assert A.alti_fig7_grad_second().outcome == "holds"          # second, behind ALTI
    monkeypatch.setattr(A, "_run", lambda name: SimpleNamespace(
        frames={"per_example": per(-0.1)}))
    assert A.alti_fig7_grad_second().outcome == "fails"          # first: not "behind"


def test_depth_relative_reads_the_shallower_model_against_the_deeper(monkeypatch):
    from cmixlib.book.claims import rules_alti as A

    def frame(shallow_roll):
        rows = []
        for model, layers, roll in (("A", 6, -0.05), ("B", 3, shallow_roll)):
            for m, v in (("attention_rollout", roll), ("alti", 0.6), ("random", 0.0),
                         ("nearness", 0.1)):
                rows.append({"method": m, "model": model, "layers": layers, "mean": v,
                             "std": 0.2, "n": 500})
        return pd.DataFrame(rows)
    def models(how):
        return pd.DataFrame({"model": ["A", "B"], "description": ["m (6 layers)", how]})

    monkeypatch.setattr(A, "_run", lambda name: SimpleNamespace(
        frames={"table2_by_depth": frame(0.5), "models": models("m, 3 layers, fine-tuned")}))
    o = A.alti_depth_relative()
    assert o.outcome == "holds" and "B (3 layers) Attn Rollout +0.500" in o.ours
    monkeypatch.setattr(A, "_run", lambda name: SimpleNamespace(
        frames={"table2_by_depth": frame(-0.06), "models": models("m, 3 layers")}))
    assert A.alti_depth_relative().outcome == "fails"
    monkeypatch.setattr(A, "_run", lambda name: SimpleNamespace(     # a distilled pair
        frames={"table2_by_depth": frame(0.5), "models": models("m (distilled student)")}))
    o = A.alti_depth_relative()
    assert o.outcome == "not tested" and "holds on this pair" in o.ours
    assert "depth and distillation are not told apart" in o.uncertainty


def test_probes_same_pattern_fails_only_on_opposite_standings(monkeypatch):
    from cmixlib.book.claims import rules_vz as V

    def frames(ap_vz, probes_vz):
        rows = []
        for metric, vz in (("ap", ap_vz), ("probes_needed", probes_vz)):
            for m in V.CONTEXT_MIXING:
                rows += [{"metric": metric, "method": m, "layer": k, "mean": 0.5, "std": 0.01,
                          "n": 1000} for k in range(3)]
            rows += [{"metric": metric, "method": "value_zeroing", "layer": k, "mean": v,
                      "std": 0.01, "n": 1000} for k, v in enumerate(vz)]
        return pd.DataFrame(rows)

    def use(ap_vz, probes_vz):
        r = frames(ap_vz, probes_vz)
        monkeypatch.setattr(V, "_run", lambda *a: SimpleNamespace(result=r, frames={}))

    use([0.6, 0.6, 0.5], [0.4, 0.4, 0.6])      # AP above, fewer probes; layer 3 tie / below
    assert V.vz_probes_best_among_mixing().outcome == "holds"
    use([0.6, 0.6, 0.6], [0.4, 0.6, 0.4])      # layer 2: above on AP, more probes
    o = V.vz_probes_best_among_mixing()
    assert o.outcome == "fails" and "opposite in layer(s) 2" in o.ours


def test_a_failing_headline_whose_alternative_holds_is_not_decided(monkeypatch):
    from cmixlib.book.claims import alternatives as ALT_
    from cmixlib.book.claims import status as S
    from cmixlib.book.claims.compare import Measured

    head = Claim(id="h", paper="p", item="i", quote="q", where="w", test="not_tested",
                 headline=True, alternative={"cause": "c", "test": "m", "args": {}})
    rows = [(head, Outcome("fails", "x"))]
    monkeypatch.setattr(S, "claim_rows", lambda paper, item: rows)
    monkeypatch.setattr(S, "run", lambda name, condition=None: SimpleNamespace(
        meta={"model": "m; accuracy 0.9", "data_size": 1, "experiment": "x", "settings": {}}))
    for holds, verdict in ((True, "not decided"), (False, "differs"), (None, "differs")):
        monkeypatch.setitem(ALT_.ALTERNATIVES, "m", lambda h=holds: Measured("t", h))
        row = S.claims_item("p", "i", "any", paper_models=None)()
        assert row["verdict"] == verdict, holds
        assert ("declared alternative cause holds" in row["detail"]) == (holds is True)


def test_table2_power_knows_the_smallest_significant_rho_over_six_layers(monkeypatch):
    from cmixlib.book.claims import alternatives_vz as AV

    table = pd.DataFrame({0: [1.0, 2, 3, 4, 6, 5]}, index=range(1, 7))
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    monkeypatch.setattr(AV, "curves", lambda c, m: (x, table))
    text = AV.table2_power_alternative("finetuned")        # rho 0.943: p = 0.008
    assert "must reach +0.83 for p <= 0.05" in text and text.holds is False
    table = pd.DataFrame({0: [2.0, 1, 3, 6, 4, 5]}, index=range(1, 7))   # rho 0.771
    text = AV.table2_power_alternative("finetuned")
    assert text.holds is True and "leaves it undecided" in text


def test_fig1_focus_takes_the_named_word_among_the_top_two(monkeypatch):
    from cmixlib.book.claims import rules_globenc as G

    tokens = ["[CLS]", "a", "deep", "and", "meaningful", "film", ".", "[SEP]"]

    def maps(weights):
        m = np.zeros((2, 8, 8))
        m[-1, 0] = weights
        return ((tokens, {"globenc_layer": m}, 4),)

    monkeypatch.setattr(G, "fig1_maps", lambda quick: maps(
        [0.3, 0.0, 0.23, 0.05, 0.21, 0.16, 0.05, 0.0]))
    o = G.ge_fig1("focus")
    assert o.outcome == "holds" and "'meaningful' ranks 2 of 6" in o.ours
    monkeypatch.setattr(G, "fig1_maps", lambda quick: maps(
        [0.3, 0.0, 0.23, 0.05, 0.10, 0.16, 0.05, 0.0]))
    assert G.ge_fig1("focus").outcome == "fails"                   # third: not in focus


def test_jumps_where_alignment_rises_on_shallow_models(monkeypatch):
    from cmixlib.book.claims import rules_vz_probing as P

    def use(x, comp):
        table = pd.DataFrame({0: comp}, index=range(1, len(comp) + 1))
        monkeypatch.setattr(P, "curves", lambda c, m: (np.array(x), table))

    use([0.1, 0.3], [1.0, 2.0])                         # two layers: one step, one jump
    assert P.vz_jumps_where_alignment_rises().outcome == "holds"
    use([0.1], [1.0])                                  # one layer: no step to compare
    assert P.vz_jumps_where_alignment_rises().outcome == "not tested"
    use([0.1, 0.5, 0.6, 0.2], [1.0, 1.05, 1.5, 4.0])   # alignment rises at 2, jumps at 4, 3
    assert P.vz_jumps_where_alignment_rises().outcome == "fails"
