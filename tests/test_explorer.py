"""The static explorer: the packed data equal the library's maps, the page is self-contained,
and in headless Chromium its controls change the picture (skipped without chromium)."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import transformers as tf

import cmixlib
from cmixlib.plotting import explorer as X

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_explorer", ROOT / "tools" / "check_explorer.py")
CE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(CE)


@pytest.fixture(scope="module")
def bundle():
    tok = tf.AutoTokenizer.from_pretrained(cmixlib.packaged_model_path())
    model = cmixlib.random_model("bert", vocab=tok.vocab_size, layers=2, seed=3)
    return cmixlib.ModelBundle(model=model, tokenizer=tok, requested="random", source="random",
                               name="tiny random BERT")


@pytest.fixture(scope="module")
def data(bundle):
    return X.explorer_data(bundle, X.explorer_sentences()[:3], use_cache=False, progress=False)


def test_sentence_set_is_attributed_and_large_enough():
    sents = X.explorer_sentences()
    assert len(sents) >= 12
    assert all(s["text"].strip() and s["source"].strip() for s in sents)
    assert len({s["text"] for s in sents}) == len(sents)
    assert any("BLiMP" in s["source"] for s in sents) and any("SST-2" in s["source"] for s in sents)


def test_packed_maps_equal_the_library_maps_to_the_stated_rounding(bundle, data):
    assert data["model"] == bundle.describe() and data["layers"] == 2
    assert [m["name"] for m in data["methods"]] == list(cmixlib.METHODS)
    for s in data["sentences"]:
        ref = cmixlib.context_mixing(bundle, None, s["text"])
        assert s["tokens"] == cmixlib.tokens(bundle.tokenizer, bundle.tokenizer(s["text"])["input_ids"])
        for name in cmixlib.METHODS:
            got = np.asarray(s["maps"][name], dtype=float) / 10 ** data["decimals"]
            assert got.shape == ref[name].shape
            # explorer_data makes this same context_mixing call (bitwise the same float32 maps), so the only
            # difference is the rounding to `decimals` plus float64 roundings of x * 10^d / 10^d (<< 1e-12)
            np.testing.assert_allclose(got, ref[name], rtol=0, atol=0.5 * 10 ** -data["decimals"] + 1e-12)
    assert "[MASK]" in data["sentences"][0]["text"]      # the model's mask token


def test_nan_rows_are_marked():
    packed = X.pack_maps({"m": np.array([[[0.25, np.nan], [1.0, 0.0004]]])})
    assert packed["m"] == [[[250, -1], [1000, 0]]]


def test_rollout_pairs_come_from_the_registry(data):
    base = {m["name"]: m["base"] for m in data["methods"] if m["kind"] == "aggregated"}
    assert base["value_zeroing_rollout"] == "value_zeroing" and base["alti"] == "alti_layer"


def test_page_is_self_contained(data):
    page = X.explorer_html(data)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "cmixExplorer(" in page
    assert CE.page_data(page) == json.loads(json.dumps(data))


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
def test_controls_change_the_picture_in_headless_chromium(tmp_path, data):
    path = _write(tmp_path, data)
    res = CE.run_selftest(path)
    assert len(res["states"]) == len(data["sentences"]) * len(data["methods"])
    assert CE.check_results(data, res) == []


@needs_chromium
def test_the_browser_check_catches_a_dead_control(tmp_path, data):
    # the layer slider no longer redraws: the check must say so
    path = _write(tmp_path, data, ('layer.addEventListener("input", redraw);\n'
                                   '  layer.addEventListener("change", redraw);', ""))
    errors = CE.check_results(data, CE.run_selftest(path))
    assert any("layer slider" in e for e in errors), errors
