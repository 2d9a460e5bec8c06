"""The reproduction-status rules (cmixlib.reproduction) on hand-made inputs."""
import pandas as pd

from cmixlib import reproduction as R
from cmixlib.verdicts import claims_verdict


def test_claims_verdict_rule():
    assert claims_verdict(pd.Series({"a": True, "b": True}))[0] == "same ranking"
    v, detail = claims_verdict(pd.Series({"a": True, "b": False}))
    assert v == "same direction" and "1 of 2 claims hold; not: b" in detail
    assert claims_verdict(pd.Series({"a": False, "b": False, "c": True}))[0] == "differs"


def test_every_item_is_assessed_or_says_why_not():
    for it in R.ITEMS:
        assert (it.assess is None) == bool(it.not_run), it
        if it.assess is None:
            assert it.not_run.startswith(("not run", "not scored", "not built")), it
    papers = {it.paper for it in R.ITEMS}
    assert papers == {"Value Zeroing", "ALTI", "GlobEnc"}


def test_short_model_names():
    assert R._short_model("all-MiniLM-L6-v2 + MLM adaptation (bert, 6 layers): x") == \
        "all-MiniLM-L6-v2 + MLM adaptation"
    assert R._short_model("sst2: A (b; fine-tuned on sst2) | sva: C (d)") == \
        "sst2: A (fine-tuned) | sva: C"
