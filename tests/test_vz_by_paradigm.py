"""vz-cue-alignment's per-paradigm frame (result_by_paradigm): the same aggregation as
``result`` per BLiMP uid; its n-weighted mean over paradigms gives back ``result``'s mean, and
``result`` itself is unchanged by the new frame."""
import numpy as np

from cmixlib import experiments as X
from test_cli import FAST, FakeSources, _examples


class PairedSources(FakeSources):
    def blimp(self, bundle, limit):
        return [dict(e, uid=("ana" if i % 3 else "darn"))
                for i, e in enumerate(_examples(limit or 8))]


def test_result_by_paradigm_pools_back_to_the_result():
    r = X.run_experiment("vz-cue-alignment", model="fake", limit=6,
                         settings={**FAST, "methods": ["attention", "alti_layer"]},
                         progress=False, sources=PairedSources())
    byp, res = r.frames["result_by_paradigm"], r.result
    assert set(byp.uid) == {"ana", "darn"} and set(byp.condition) == {"pretrained"}
    assert byp.groupby(["method", "layer", "metric"]).n.sum().eq(
        res.set_index(["method", "layer", "metric"]).n).all()
    dot = byp[byp.metric == "dot"].assign(w=lambda d: d["mean"] * d.n)
    pooled = dot.groupby(["method", "layer"]).w.sum() / dot.groupby(["method", "layer"]).n.sum()
    want = res[res.metric == "dot"].set_index(["method", "layer"])["mean"]
    assert np.allclose(pooled.reindex(want.index), want, rtol=1e-12, atol=0)
    assert list(res.columns) == ["condition", "method", "layer", "metric", "mean", "std", "n"]


def test_pooled_over_paradigms_is_the_mean_over_those_examples():
    import pandas as pd
    import pytest

    from cmixlib.book.decoder_report import pooled_over_paradigms

    per_ex = pd.DataFrame({"uid": ["a", "a", "b", "c"], "method": ["m"] * 4, "layer": [0] * 4,
                           "dot": [0.1, 0.3, 0.9, 0.5]})
    from cmixlib.metrics import evaluation as ev
    byp = ev.aggregate_alignment(per_ex, metrics=("dot",), by=("uid", "method", "layer"))
    got = pooled_over_paradigms(byp, ["a", "b"])
    assert got["mean"].item() == pytest.approx((0.1 + 0.3 + 0.9) / 3, rel=1e-12)
    assert got["n"].item() == 3
    with pytest.raises(ValueError, match="no rows"):
        pooled_over_paradigms(byp, ["z"])
