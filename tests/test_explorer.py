"""The static explorer: the packed data equal the library's maps for each model family (small
random encoders, BERT and MPNet, and a random Llama-style decoder), the page is self-contained,
and in headless Chromium every control does what it says (skipped without chromium)."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers as tf

import cmixlib
from cmixlib.forward.decoder import random_decoder
from cmixlib.methods.decoder import DECODER_METHOD_NAMES
from cmixlib.plotting import explorer as X
from cmixlib.plotting import explorer_models as XM
from cmixlib.plotting import explorer_packing as XP
from cmixlib.plotting import explorer_page as XE
from cmixlib.experiments.saliency import example_rows, text_example

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_explorer", ROOT / "tools" / "check_explorer.py")
CE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(CE)

# Stored values are round(x * 10^d): off by at most half a unit of the last decimal, plus the
# float64 roundings of x * 10^d / 10^d (<< 1e-12). Maps are the same float32 computation
# (explorer_models calls context_mixing / the model as the reference here does).
def _atol(decimals):
    return 0.5 * 10 ** -decimals + 1e-12


@pytest.fixture(scope="module")
def tok():
    return tf.AutoTokenizer.from_pretrained(cmixlib.packaged_model_path())


def _bundle(model, tok, name):
    return cmixlib.ModelBundle(model=model, tokenizer=tok, requested="random", source="random",
                               name=name)


@pytest.fixture(scope="module")
def bundle(tok):
    return _bundle(cmixlib.random_model("bert", vocab=tok.vocab_size, layers=2, seed=3), tok,
                   "tiny random BERT")


@pytest.fixture(scope="module")
def mpnet(tok):
    return _bundle(cmixlib.random_model("mpnet", vocab=tok.vocab_size, layers=2, seed=4), tok,
                   "tiny random MPNet")


@pytest.fixture(scope="module")
def decoder():
    dtok = tf.AutoTokenizer.from_pretrained(cmixlib.packaged_model_path())
    dtok.mask_token = None                       # a decoder's tokenizer: no mask token
    model = random_decoder("llama", vocab=dtok.vocab_size, layers=2, seed=5)
    return _bundle(model, dtok, "tiny random Llama decoder")


@pytest.fixture(scope="module")
def baseline_models(tok):
    mlm = _bundle(cmixlib.random_model("bert", task="mlm", vocab=tok.vocab_size, seed=6), tok,
                  "tiny random BERT MLM")
    clf = _bundle(cmixlib.random_model("bert", task="sequence-classification",
                                       vocab=tok.vocab_size, seed=7), tok,
                  "tiny random BERT classifier")
    return mlm, clf


@pytest.fixture(scope="module")
def sentences():
    s = X.explorer_sentences()
    return s[:5] + s[-1:]                         # masked, SST-2, a BLiMP pair, an SST-2 review


@pytest.fixture(scope="module")
def blocks(bundle, mpnet, decoder, baseline_models, sentences):
    return [XM.model_block(b, sentences, progress=False, baseline_models=baseline_models)
            for b in (bundle, mpnet, decoder)]


@pytest.fixture(scope="module")
def data(blocks):
    names = [m for b in blocks for m in b["methods"] + b["baseline_methods"]]
    return {"decimals": XP.DECIMALS, "methods": XE.method_table(list(dict.fromkeys(names))),
            "models": blocks}


def test_sentence_set_is_attributed_and_pairs_point_to_each_other():
    sents = X.explorer_sentences()
    assert len(sents) >= 12
    assert all(s["text"].strip() and s["source"].strip() for s in sents)
    assert len({s["text"] for s in sents}) == len(sents)
    assert any("BLiMP" in s["source"] for s in sents) and any("SST-2" in s["source"] for s in sents)
    pairs = [(k, s["pair"]) for k, s in enumerate(sents) if "pair" in s]
    assert len(pairs) == 2 * len(X.BLIMP_SUBSETS)
    for k, p in pairs:
        assert sents[p]["pair"] == k and sents[k]["grammatical"] != sents[p]["grammatical"]


def test_method_lists_come_from_the_registry(blocks):
    enc, mp, dec = blocks
    assert enc["methods"][:len(cmixlib.METHODS)] == list(cmixlib.METHODS) == mp["methods"][:15]
    assert dec["methods"][:len(dec["methods"]) - 4] == [m for m in DECODER_METHOD_NAMES
                                                       if m in cmixlib.METHODS]
    for b in blocks:
        rolled = [m.split(":", 1)[1] for m in b["methods"] if m.startswith("rollout:")]
        assert rolled and all(cmixlib.METHODS[m].kind == "layer" for m in rolled)
        # no layer-wise method is left without a rollout, and none gets two
        bases = {cmixlib.METHODS[m].base for m in b["methods"] if m in cmixlib.METHODS}
        layer = [m for m in b["methods"] if m in cmixlib.METHODS
                 and cmixlib.METHODS[m].kind == "layer"]
        assert sorted(rolled) == sorted(m for m in layer if m not in bases)
    assert "alti_logit" not in dec["methods"] and "attn_norm_res_ln" not in dec["methods"]
    table = {m["name"]: m for m in XE.method_table(["rollout:attn_norm", "alti", "grad_l2"])}
    assert table["rollout:attn_norm"]["label"] == cmixlib.method_label("rollout:attn_norm")
    assert table["rollout:attn_norm"]["base"] == "attn_norm"
    assert table["grad_l2"]["label"] == cmixlib.method_label("grad_l2")


@pytest.mark.parametrize("which", [0, 1, 2], ids=["bert", "mpnet", "llama-decoder"])
def test_packed_maps_equal_the_library_maps(which, blocks, bundle, mpnet, decoder, sentences):
    b, blk = (bundle, mpnet, decoder)[which], blocks[which]
    dec = blk["decimals"]
    assert blk["model"] == b.describe() and blk["layers"] == 2
    assert blk["family"] == ("decoder" if which == 2 else "encoder")
    for s, src in zip(blk["sentences"], sentences):
        text = src["text"]
        if "[MASK]" in text:
            text = (text.replace("[MASK]", b.tokenizer.mask_token) if b.tokenizer.mask_token
                    else text.split("[MASK]")[0].rstrip())
        assert s["text"] == text and ("cut" in s) == (which == 2 and "[MASK]" in src["text"])
        ids = b.tokenizer(text)["input_ids"]
        assert s["tokens"] == cmixlib.tokens(b.tokenizer, ids)
        ref = cmixlib.context_mixing(b, None, text, methods=[m for m in blk["methods"]
                                                             if ":" not in m])
        for name in blk["methods"]:
            want = (cmixlib.rollout(ref[name.split(":")[1]], add_identity=False, normalize=True)
                    if name.startswith("rollout:") else ref[name])
            got = np.asarray(s["maps"][name], dtype=float) / 10 ** dec
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=0, atol=_atol(dec))
        with torch.no_grad():
            att = b.model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
        heads = np.asarray(s["heads"], dtype=float) / 10 ** dec
        np.testing.assert_allclose(heads, torch.stack([a[0] for a in att]).numpy(), rtol=0,
                                   atol=_atol(dec))
        # the per-head view and the attention map agree: the mean of the (rounded) heads
        np.testing.assert_allclose(heads.mean(axis=1), ref["attention"], rtol=0,
                                   atol=2 * _atol(dec))
        if which == 2:        # causal: nothing above the diagonal
            assert not np.triu(np.asarray(s["maps"]["alti"]), 1).any()


def test_baseline_rows_equal_the_library_rows(blocks, baseline_models, sentences):
    enc = blocks[0]
    mlm, clf = baseline_models
    shown = [k for k, s in enumerate(enc["sentences"]) if "baselines" in s]
    # the masked paper sentences (MLM) and the SST-2 sentences (classifier); no BLiMP sentence
    assert [sentences[k].get("target_word") or sentences[k].get("task") for k in shown] == \
        ["were", "sst2", "shows", "sst2"]
    for k in shown:
        s, src = enc["sentences"][k], sentences[k]
        b = s["baselines"]
        if src.get("target_word"):
            model = mlm
            ex = text_example(mlm.tokenizer, src["text"], target_word=src["target_word"],
                              foil_word=src["foil_word"])
        else:
            model, ex = clf, text_example(clf.tokenizer, src["text"])
        assert b["model"] == model.describe() and b["target"] == ex["target_index"]
        ref = example_rows(model, ex, list(XM.BASELINE_METHODS), XM.BASELINE_SETTINGS)
        for name, row in ref.items():
            key = cmixlib.methods.registry.resolve(name)
            scale = b["scale"][key]
            assert scale == pytest.approx(float(np.abs(row).max()), rel=1e-6)
            np.testing.assert_allclose(np.asarray(b["rows"][key]) / 10 ** XP.DECIMALS,
                                       row / scale, rtol=0, atol=_atol(XP.DECIMALS) + 1e-6)
    assert blocks[1]["baseline_methods"] == list(enc["baseline_methods"])   # same tokenizer
    assert blocks[2]["baseline_methods"] == []                     # decoders: no baselines


def test_decoder_note_is_computed_from_the_maps(blocks):
    dec = blocks[2]
    share = np.mean([np.asarray(s["maps"]["attention"])[:, 1:, 0].mean() / 1000
                     for s in dec["sentences"]])
    assert f"{share:.0%} of the head-averaged attention" in dec["note"]
    assert dec["model"] in dec["note"] and blocks[0]["note"] is None


def test_pack_maps_marks_nan_and_refuses_negative_values():
    packed = XP.pack_maps({"m": np.array([[[0.25, np.nan], [1.0, 0.0004]]])})
    assert packed["m"] == [[[250, -1], [1000, 0]]]
    with pytest.raises(ValueError, match="negative"):
        XP.pack_maps({"m": np.array([[-0.1]])})
    assert XP.pack_row(np.array([0.5, -1.0, 0.25]), 3) == ([500, -1000, 250], 1.0)


def test_page_is_self_contained_and_small(data):
    page = X.explorer_html(data)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "cmixExplorer(" in page
    assert CE.page_data(page) == json.loads(json.dumps(data))
    assert X.decode_payload(X.encode_payload(data)) == json.loads(json.dumps(data))
    size = X.payload_size(data)
    assert size["page"] < size["json"] / 2          # deflate pays for base64's third


def _write(tmp_path, data, js_edit=None):
    page = X.explorer_html(data)
    if js_edit:
        old, new = js_edit
        assert old in page
        page = page.replace(old, new)
    path = tmp_path / "explorer.html"
    path.write_text(f"<!doctype html><html><body>{page}</body></html>", encoding="utf-8")
    return path


needs_chromium = pytest.mark.skipif(CE.find_chromium() is None,
                                    reason="needs chromium (Debian: apt-get install chromium)")


@needs_chromium
@pytest.mark.parametrize("dpr", [None, 2], ids=["dpr1", "dpr2"])
def test_every_control_in_headless_chromium(tmp_path, data, dpr):
    path = _write(tmp_path, data)
    res = CE.run_selftest(path, scale_factor=dpr)
    assert res["dpr"] == (dpr or 1)
    assert len(res["models"]) == 3
    assert {s["what"] for s in res["steps"]} >= {
        "compare alti", "shared on", "difference", "pair", "head last", "baseline",
        "pointer touch 2,1", "model 1", "model 2"}
    assert CE.check_results(data, res) == []


# each edit breaks one feature; the browser check must name it
BREAKS = {
    "layer slider": ('layer.addEventListener("input", redraw);\n'
                     '  layer.addEventListener("change", redraw);', ""),
    "difference map": ("(C.m[i][j] - O.m[i][j]) / SCALE", "(C.m[i][j] + O.m[i][j]) / SCALE"),
    "shared scale": ("specA.vmax = specB.vmax = v / SCALE;", ""),
    "per-head view": ("s.heads[l - 1][h - 1]", "s.heads[l - 1][0]"),
    "(touch)": ('c.addEventListener("pointerdown", point);', ""),
    "devicePixelRatio": ("c.width = Math.round(w * r);", "c.width = Math.round(w);"),
    "model switch": ("function blk() { return D.models[+model.value]; }",
                     "function blk() { return D.models[0]; }"),
    "minimal pair": ("specB = {k: s.pair, name: name};", "specB = {k: k, name: name};"),
}


@needs_chromium
@pytest.mark.parametrize("what", list(BREAKS))
def test_the_browser_check_catches_a_broken_feature(tmp_path, data, what):
    errors = CE.check_results(data, CE.run_selftest(_write(tmp_path, data, BREAKS[what]),
                                                    scale_factor=2))
    assert any(what in e for e in errors), errors
