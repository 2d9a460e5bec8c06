"""The reproduction-status rules (cmixlib.book.reproduction) on hand-made inputs."""
import pandas as pd

from cmixlib.book import reproduction as R
from cmixlib.book.verdicts import claims_verdict


def test_claims_verdict_rule():
    assert claims_verdict(pd.Series({"a": True, "b": True}))[0] == "claims hold"
    v, detail = claims_verdict(pd.Series({"a": True, "b": False}))
    assert v == "most claims hold" and "1 of 2 claims hold; not: b" in detail
    assert claims_verdict(pd.Series({"a": False, "b": False, "c": True}))[0] == "differs"


def test_every_item_is_assessed_or_says_why_not():
    for it in R.ITEMS:
        assert (it.assess is None) == bool(it.not_run), it
        if it.assess is None:
            assert it.not_run.startswith(("not run", "no claim to test", "not built")), it
    papers = {it.paper for it in R.ITEMS}
    assert papers == {"Value Zeroing", "ALTI", "GlobEnc"}
    assert not any("not scored" in it.not_run for it in R.ITEMS)


def test_every_item_that_can_differ_has_an_investigation():
    """Each assessed item whose verdict can be "differs" (a claims or ranking item) has a
    "why": the Table 3 rows their own, every other item of ITEM_WHYS or a ranking detail."""
    from cmixlib.book.item_whys import ITEM_WHYS

    keys = {(it.paper, it.item) for it in R.ITEMS}
    assert set(ITEM_WHYS) <= keys


def test_short_model_names():
    assert R._short_model("all-MiniLM-L6-v2 + MLM adaptation (bert, 6 layers): x") == \
        "all-MiniLM-L6-v2 + MLM adaptation"
    assert R._short_model("sst2: A (b; fine-tuned on sst2) | sva: C (d)") == \
        "sst2: A (fine-tuned) | sva: C"
    assert R._short_model("sst2: sentence-transformers/M (x; fine-tuned on sst2) | mnli: "
                          "sentence-transformers/M (fine-tuned on mnli)") == \
        "M (fine-tuned; sst2, mnli)"


def test_sanity_note_flags_methods_below_the_baselines():
    note = R.sanity_note({"random": 0.0, "nearness": 0.2, "alti": 0.3, "value_zeroing_rollout": -0.1,
                          "globenc": 0.2})
    assert note == ("; not above the sanity baselines (Random, Nearness): Value Zeroing rollout, "
                    "GlobEnc")
    assert R.sanity_note({"random": 0.0, "alti": 0.3}) == ""          # none flagged
    assert R.sanity_note({"alti": 0.3, "globenc": -0.2}) == ""        # no baseline in the table


def _fake(**kw):
    from types import SimpleNamespace

    return SimpleNamespace(**{"meta": {"model": "tiny (offline fallback)", "data_size": 9}, **kw})


def test_table3_rows_give_the_investigated_reason_and_the_sanity_flags(monkeypatch):
    from test_rollout_depth import depth_frames

    methods = ["alti", "value_zeroing_rollout", "globenc"]
    comp = pd.DataFrame({"cmix_method": methods, "condition": "pre-trained",
                         "ours": [0.3, -0.1, 0.2], "paper": [0.2, 0.26, 0.1]})
    result = pd.DataFrame({"method": methods + ["random", "nearness"],
                           "mean": [0.3, -0.1, 0.2, 0.0, 0.25]})
    runs = {"faithfulness": _fake(result=result, comparison=lambda: comp),
            "rollout-depth": _fake(frames=depth_frames(), meta={"model": "tiny",
                                                                "data_size": 200})}
    monkeypatch.setattr(R, "run", lambda name, condition=None: runs[name])
    row = R._vz_table("faithfulness", "pretrained")()
    assert row["why"].startswith("pre-trained, 200 test pairs: Value Zeroing's single-layer maps"
                                 " reach +0.30 (layer 2) but its rollout gives -0.10 at layer 3")
    assert f'href="{R.TABLE3_WHY_LINK}"' in row["why"]
    # the numbers it cites, the row's own size beside the depth run's, the alternatives
    assert "Numbers: the [MASK] row's self weight" in row["why"]
    assert "on these 400 pairs, -0.10 on the row's 9" in row["why"]   # n of the frame's cell
    assert "Alternative 1, the layer maps themselves: the single layer-3 map" in row["why"]
    assert "Alternative 2, drift away from the [MASK]" in row["why"]
    assert "the paper's 12-layer BERT scores +0.26" in row["why"]
    assert row["detail"].endswith("; not above the sanity baselines (Random, Nearness): "
                                  "Value Zeroing rollout, GlobEnc")
    runs["mdl-probing"] = runs["faithfulness"]
    assert "why" not in R._vz_table("mdl-probing", "pretrained")()      # only Table 3 has one


def test_globenc_table1_rows_are_flagged_against_the_controls(monkeypatch):
    from cmixlib.data import paper_numbers as pn
    from cmixlib.experiments.globenc import GLOBENC_METHODS, _correlations_compare

    vals = dict(zip(GLOBENC_METHODS, [-0.1, 0.0, 0.3, 0.1, 0.4, 0.5, 0.2, 0.6]))
    variants = pd.DataFrame([{"task": "SST-2", "rollout": v, "method": m, "aggregation": "rollout",
                              "layer": 2, "mean": x} for v in ("raw", "row-normalised")
                             for m, x in vals.items()])
    controls = pd.DataFrame({"task": "SST-2", "method": ["random", "nearness"],
                             "mean": [0.0, 0.35]})
    paper = pn.globenc_table1()
    raw = {"result": variants[variants.rollout == "raw"]}
    res = _fake(frames={"variants": variants, "controls": controls, **raw}, paper=paper,
                comparison=lambda: _correlations_compare(raw, paper))
    monkeypatch.setattr(R, "run", lambda name, condition=None: res)
    row = R._globenc_table1("SST-2")()
    flagged = row["detail"].split("not above the sanity baselines (Random, Nearness): ")[1]
    assert set(flagged.split(", ")) == {"Attention", "W-FixedRes", "W-Res", "N", "N-ResLN"}
