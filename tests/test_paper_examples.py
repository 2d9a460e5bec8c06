"""cmixlib.experiments.saliency, the computations behind chapter 14 (the papers' example maps): every row
equals the direct library call, GlobEnc's raw rollout equals the product written out, examples
are built, found and chosen as documented, and bad input gets a clear error."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib.experiments import saliency as S
from cmixlib.experiments.common import predicted_classes
from cmixlib.methods.aggregation import rollout
from cmixlib.gradients import ClassTarget, MLMTarget, attribute, blank_out

from fakes import FakeBundle

FAMILIES = ["bert", "electra", "distilbert"]


def _ids(n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [1] + rng.integers(5, 100, n - 2).tolist() + [2]


# The models are float64 (the rows are compared with float64 tolerances, rtol 1e-9).
def _classifier(arch: str) -> FakeBundle:
    return FakeBundle(cmixlib.random_model(arch, task="sequence-classification", layers=2, seed=3,
                                           num_labels=3, dtype=torch.float64))


def _mlm(arch: str = "bert") -> FakeBundle:
    return FakeBundle(cmixlib.random_model(arch, task="mlm", layers=3, seed=4, dtype=torch.float64))


@pytest.mark.parametrize("arch", FAMILIES)
def test_classifier_rows_equal_the_direct_calls(arch):
    """ALTI's SST-2 table: [CLS] rows of the final layer and gradients of the predicted class's
    probability (ALTI's |sum| aggregation for IG) are what the plain library calls give."""
    bundle = _classifier(arch)
    model, tok = bundle.model, bundle.tokenizer
    ex = {"input_ids": _ids(7, seed=1)}
    ids = torch.tensor([ex["input_ids"]])
    settings = {**S.ALTI_GRADIENTS, "ig_steps": 6}
    methods = ["grad_l2", "grad_x_input_abs", "integrated_gradients", "attention_rollout",
               "rollout:attn_norm_res_ln", "alti", "blank_out"]
    got = S.example_rows(bundle, ex, methods, settings, replacement="mask")
    maps = cmixlib.context_mixing(model, tok, {"input_ids": ids},
                                  methods=["attention_rollout", "attn_norm_res_ln", "alti"])
    target = ClassTarget(None, score="prob")
    want = {"grad_l2": attribute(model, ids, target, method="grad_l2"),
            "grad_x_input_abs": attribute(model, ids, target, method="grad_x_input_abs"),
            "integrated_gradients": attribute(model, ids, target, method="integrated_gradients",
                                              n_steps=6, aggregate="abs", tokenizer=tok),
            "attention_rollout": maps["attention_rollout"][-1, 0],
            "rollout:attn_norm_res_ln": rollout(maps["attn_norm_res_ln"], add_identity=False)[-1, 0],
            "alti": maps["alti"][-1, 0],
            "blank_out": blank_out(model, ids, ClassTarget(None), replacement="mask", tokenizer=tok,
                                   skip_special=False)}
    assert list(got) == methods
    for m in methods:
        assert got[m].shape == (7,)
        np.testing.assert_allclose(got[m], want[m], rtol=1e-9, atol=1e-12, err_msg=f"{arch} {m}")
    # IG with ALTI's |sum| is not the default signed sum: the setting reaches the computation
    signed = attribute(model, ids, target, method="integrated_gradients", n_steps=6, tokenizer=tok)
    assert (signed < 0).any() and (got["integrated_gradients"] >= 0).all()


@pytest.mark.parametrize("arch", ["bert", "electra"])
def test_mlm_rows_equal_the_direct_calls_at_both_levels(arch):
    """Value Zeroing Figure 4 / A.5-A.18 and ALTI's SVA table: the [MASK] row of every layer or of
    the last one, gradients of sigma(z_t - z_f), blank-out with [UNK]."""
    bundle = _mlm(arch)
    model, tok = bundle.model, bundle.tokenizer
    ids_list = _ids(8, seed=2)
    ids_list[3] = tok.mask_token_id
    ex = {"input_ids": ids_list, "target_index": 3, "target_id": 10, "foil_id": 11}
    ids = torch.tensor([ids_list])
    settings = {"grad_score": "prob", "grad_aggregate": "l2", "ig_steps": 4}
    target = MLMTarget(3, 10, 11, score="prob")
    maps = cmixlib.context_mixing(model, tok, {"input_ids": ids},
                                  methods=["value_zeroing", "attn_norm", "globenc"])

    layers = S.example_rows(bundle, ex, ["value_zeroing", "rollout:attn_norm", "globenc",
                                         "grad_x_input"], settings, level="layers")
    np.testing.assert_allclose(layers["value_zeroing"], maps["value_zeroing"][:, 3], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(layers["rollout:attn_norm"], rollout(maps["attn_norm"], add_identity=False)[:, 3],
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(layers["globenc"], maps["globenc"][:, 3], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(layers["grad_x_input"],
                               attribute(model, ids, target, method="grad_x_input_l2", level="layers"),
                               rtol=1e-9, atol=1e-12)
    assert layers["value_zeroing"].shape == (3, 8)

    inp = S.example_rows(bundle, ex, ["globenc", "integrated_gradients", "blank_out"], settings)
    np.testing.assert_allclose(inp["globenc"], maps["globenc"][-1, 3], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(inp["integrated_gradients"],
                               attribute(model, ids, target, method="integrated_gradients", n_steps=4,
                                         aggregate="l2", tokenizer=tok), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(inp["blank_out"],
                               blank_out(model, ids, target, replacement="unk", tokenizer=tok,
                                         skip_special=False), rtol=1e-9, atol=1e-12)
    probs = S.target_probabilities(bundle, [ex, ex])
    with torch.no_grad():
        z = model(input_ids=ids).logits[0, 3]
    np.testing.assert_allclose(probs, [torch.sigmoid(z[10] - z[11]).item()] * 2, rtol=1e-12)


@pytest.mark.parametrize("arch", FAMILIES)
def test_rollout_maps_are_globenc_raw_products(arch):
    """GlobEnc's aggregation, written out: R = C^L ... C^1 of the raw maps, rows then scaled to
    sum to 1; with raw=False the maps are row-normalised first."""
    bundle = _classifier(arch)
    ex = {"input_ids": _ids(6, seed=5)}
    methods = ["attn_norm", "globenc_layer", "attention"]
    got = S.rollout_maps(bundle, ex, methods)
    got_norm = S.rollout_maps(bundle, ex, methods, raw=False)
    raw = cmixlib.context_mixing(bundle, None, {"input_ids": [ex["input_ids"]]}, methods=methods,
                                 normalize=False)
    for m in methods:
        c = raw[m].astype(np.float64)
        prod, prod_n = np.eye(6), np.eye(6)
        for layer in range(c.shape[0]):
            prod = c[layer] @ prod
            prod_n = (c[layer] / c[layer].sum(1, keepdims=True)) @ prod_n
            np.testing.assert_allclose(got[m][layer], prod / prod.sum(1, keepdims=True), rtol=1e-9)
            np.testing.assert_allclose(got_norm[m][layer], prod_n / prod_n.sum(1, keepdims=True), rtol=1e-9)
    # N-Enc's raw rows have different sums, so the two aggregations differ (the test can fail)
    assert np.abs(got["globenc_layer"] - got_norm["globenc_layer"]).max() > 1e-4


def test_text_example_builds_classification_and_mlm_examples(packaged_tokenizer):
    tok = packaged_tokenizer
    t3 = S.PAPER_SENTENCES["alti-table3"]
    ex = S.text_example(tok, t3["text"], target_word=t3["target_word"], foil_word=t3["foil_word"])
    assert ex["tokens"][ex["target_index"]] == tok.mask_token
    assert ex["target_id"] == tok.convert_tokens_to_ids("shows")
    assert ex["foil_id"] == tok.convert_tokens_to_ids("show")
    assert ex["tokens"][:4] == ["[CLS]", "a", "1770", "##s"]
    t1 = S.text_example(tok, S.PAPER_SENTENCES["alti-table1"]["text"])
    assert t1["target_index"] == 0 and "179" in t1["tokens"] and "target_id" not in t1
    with pytest.raises(ValueError, match="exactly once"):
        S.text_example(tok, "no mask here .", target_word="is", foil_word="are")
    with pytest.raises(ValueError, match="exactly once"):
        S.text_example(tok, "[MASK] and [MASK] .", target_word="is", foil_word="are")
    with pytest.raises(ValueError, match="one sub-token"):
        S.text_example(tok, "the maps [MASK] it .", target_word="unidentifiably", foil_word="is")
    with pytest.raises(ValueError, match="both"):
        S.text_example(tok, "the maps [MASK] it .", target_word="are")


def test_find_and_select_examples():
    exs = [{"sentence": "A  b .", "input_ids": [1, 5, 6, 2]},
           {"sentence_good": "c d e", "input_ids": [1, 5, 6, 7, 8, 2]},
           {"sentence": "f", "input_ids": [1, 9, 2]}]
    assert S.find_example(exs, "a b .") is exs[0]
    assert S.find_example(exs, "C D E") is exs[1]
    with pytest.raises(LookupError, match="No example"):
        S.find_example(exs, "missing")
    assert S.select_examples(exs, 2) == exs[:2]
    assert S.select_examples(exs, 5, max_tokens=4) == [exs[0], exs[2]]
    assert S.select_examples(exs, 5, min_tokens=5) == [exs[1]]
    assert S.select_examples(exs, 1, keep=[False, False, True]) == [exs[2]]
    with pytest.raises(ValueError, match="at least 1"):
        S.select_examples(exs, 0)
    with pytest.raises(ValueError, match="flags"):
        S.select_examples(exs, 1, keep=[True])


def test_predicted_classes_match_the_logits():
    bundle = _classifier("bert")
    exs = [{"input_ids": _ids(n, seed=n)} for n in (5, 9, 4)]
    got = predicted_classes(bundle, exs)
    for ex, c in zip(exs, got):
        with torch.no_grad():
            assert int(bundle.model(input_ids=torch.tensor([ex["input_ids"]])).logits.argmax()) == c


def test_bad_input_gets_a_clear_error():
    cls, mlm = _classifier("bert"), _mlm()
    ex = {"input_ids": _ids(6, seed=0)}
    mex = {"input_ids": _ids(6, seed=0), "target_index": 2, "target_id": 10, "foil_id": 11}
    with pytest.raises(ValueError, match="Unknown method"):
        S.example_rows(cls, ex, ["alti", "saliency"])
    with pytest.raises(ValueError, match="non-empty list"):
        S.example_rows(cls, ex, [])
    with pytest.raises(ValueError, match="no per-layer"):
        S.example_rows(mlm, mex, ["blank_out"], level="layers")
    with pytest.raises(ValueError, match="MLM examples only"):
        S.example_rows(cls, ex, ["grad_l2"], level="layers")
    with pytest.raises(ValueError, match="level must be"):
        S.example_rows(cls, ex, ["alti"], level="heads")
    with pytest.raises(ValueError, match="foil_id"):
        S.example_rows(mlm, {"input_ids": mex["input_ids"], "target_index": 2, "target_id": 10},
                       ["alti"])
    with pytest.raises(ValueError, match="input_ids"):
        S.example_rows(cls, {"input_ids": []}, ["alti"])
    with pytest.raises(ValueError, match="layer-wise"):
        S.rollout_maps(cls, ex, ["globenc"])
    with pytest.raises(KeyError, match="Unknown experiment"):
        S.experiment_settings("no-such-experiment")
    with pytest.raises(ValueError, match="no setting"):
        S.experiment_settings("alti-table2", {"ig_step": 3})
    with pytest.raises(ValueError, match="task="):
        S.experiment_inputs("alti-table2", {}, data=False)


def test_experiment_inputs_load_what_the_run_reads():
    """The declared inputs of a run, through the Sources seam: ALTI Table 2's SVA task reads the
    pre-trained MLM, its SST-2 task a classifier, both with the run's settings."""
    from cmixlib.experiments import Sources

    calls = []

    class Fake(Sources):
        def mlm(self, condition):
            calls.append(("mlm", condition))
            return _mlm(), {"accuracy": 0.5}

        def classifier(self, task):
            calls.append(("classifier", task, self._settings["cls_epochs"]))
            return _classifier("bert"), {"accuracy": 0.5}

        def sst2(self, bundle, limit):
            return [{"input_ids": _ids(5, seed=i), "label": i % 2} for i in range(limit or 3)]

        sst2_test = sst2      # ALTI's experiments read the test split

    bundle, info, exs = S.experiment_inputs("alti-table2", {"cls_epochs": 7}, "sst2", limit=2,
                                            sources=Fake())
    assert len(exs) == 2 and info["accuracy"] == 0.5 and calls[-1] == ("classifier", "sst2", 7)
    bundle, _, exs = S.experiment_inputs("alti-table2", None, "sva", data=False, sources=Fake())
    assert exs is None and calls[-1] == ("mlm", "pretrained")
    assert S.experiment_settings("alti-table2", {"cls_epochs": 7})["blankout_replacement"] == "mask"


def test_plot_layer_rows_and_titled_map_grid():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cmixlib.plotting import plot_layer_maps, plot_layer_rows

    rows = {"alti": np.random.default_rng(0).random((3, 4)), "my example": np.ones((3, 5))}
    toks = {"alti": list("abcd"), "my example": list("vwxyz")}
    fig = plot_layer_rows(rows, toks, ncols=2, highlight={"alti": 1})
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["ALTI", "my example"]
    assert [t.get_text() for t in axes[1].get_xticklabels()] == list("vwxyz")
    assert [t.get_text() for t in axes[0].get_yticklabels()] == ["layer 1", "layer 2", "layer 3"]
    assert len(axes[0].patches) == 1 and not axes[1].patches
    with pytest.raises(ValueError, match="expected"):
        plot_layer_rows({"alti": np.ones((3, 4))}, list("abc"))
    with pytest.raises(ValueError, match="no panels"):
        plot_layer_rows({}, [])
    fig2 = plot_layer_maps(np.ones((2, 3, 3)), list("abc"), titles=["N", "N-Enc"], ncols=2)
    assert [ax.get_title() for ax in fig2.axes if ax.get_label() != "<colorbar>"] == \
        ["N", "N-Enc"]
    with pytest.raises(ValueError, match="titles"):
        plot_layer_maps(np.ones((2, 3, 3)), list("abc"), titles=["one"])
    plt.close("all")


# ---- cmixlib.book.model_examples: the papers' sentences on further models (MPNet, a decoder) ----

from cmixlib.book import model_examples as ME  # noqa: E402


def _named(model, tok, name):
    return cmixlib.ModelBundle(model=model, tokenizer=tok, requested="random", source="random",
                               name=name)


@pytest.fixture(scope="module")
def further_bundles():
    import transformers as tf
    from cmixlib.forward.decoder import random_decoder

    tok = tf.AutoTokenizer.from_pretrained(cmixlib.packaged_model_path())
    dtok = tf.AutoTokenizer.from_pretrained(cmixlib.packaged_model_path())
    dtok.mask_token = None                        # a decoder's tokenizer has no mask
    return [_named(cmixlib.random_model("mpnet", vocab=tok.vocab_size, layers=2, seed=8), tok,
                   "tiny random MPNet"),
            _named(random_decoder("llama", vocab=dtok.vocab_size, layers=2, seed=9), dtok,
                   "tiny random Llama decoder")]


@pytest.mark.parametrize("which", [0, 1], ids=["mpnet", "llama-decoder"])
@pytest.mark.parametrize("text", ["The pictures of some hat [MASK] scaring Marcus.",
                                  "a remarkable meditation on revolution ."])
def test_further_model_rows_equal_the_library_maps(further_bundles, which, text):
    b = further_bundles[which]
    got = ME.example_layer_rows(b, text, use_cache=False)
    decoder = which == 1
    shown = (text.split("[MASK]")[0].rstrip() if decoder else
             text.replace("[MASK]", b.tokenizer.mask_token))
    assert got["text"] == shown and (got["cut"] is not None) == (decoder and "[MASK]" in text)
    ids = b.tokenizer(shown)["input_ids"]
    want_t = (len(ids) - 1 if decoder else
              ids.index(b.tokenizer.mask_token_id) if "[MASK]" in text else 0)
    assert got["position"] == want_t and got["model"] == b.describe()
    methods = ME.figure_methods(b)
    assert list(got["rows"]) == methods
    if decoder:   # no post-residual LayerNorm: no N-ResLN or GlobEnc pair
        assert "attn_norm_res_ln" not in methods and "globenc" not in methods
    else:
        assert methods == [m for pair in ME.FIGURE_PAIRS for m in pair]
    # the rows it reads: every layer at the explained position, the last layer only there
    # (final_rows; equal to the whole maps up to float32 rounding: tests/test_core.py)
    maps = cmixlib.context_mixing(b, None, shown, methods=[m for m in methods if ":" not in m],
                                  final_rows=[want_t])
    for m in methods:
        full = (rollout(maps[m.split(":")[1]], add_identity=False, normalize=True,
                        rows=[want_t]) if m.startswith("rollout:") else maps[m])
        # the same float32 computation, bit for bit
        np.testing.assert_array_equal(got["rows"][m], full[:, want_t, :])


def test_further_model_rows_are_cached_by_model_and_text(further_bundles, tmp_path, monkeypatch):
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path))
    b = further_bundles[0]
    first = ME.example_layer_rows(b, "a remarkable meditation .")
    files = list((tmp_path / "model_examples").glob("*.json"))
    assert len(files) == 1
    again = ME.example_layer_rows(b, "a remarkable meditation .")
    for m in first["rows"]:
        np.testing.assert_array_equal(again["rows"][m], first["rows"][m])
    ME.example_layer_rows(b, "a remarkable film .")              # another text: another entry
    ME.example_layer_rows(further_bundles[1], "a remarkable meditation .")   # another model
    assert len(list((tmp_path / "model_examples").glob("*.json"))) == 3
    # changed library code (another code version) never reads the old entry
    monkeypatch.setattr(ME, "code_version", lambda *a: "another-version")   # the name it reads
    ME.example_layer_rows(b, "a remarkable meditation .")
    assert len(list((tmp_path / "model_examples").glob("*.json"))) == 4
    with pytest.raises(ValueError, match="non-empty"):
        ME.example_layer_rows(b, "  ")


def test_top_tokens_follow_the_written_rule():
    # explained token 1 is left out; ties go to the earlier token
    res = {"model": "m", "tokens": ["<s>", "hat", "were", "."], "position": 1,
           "rows": {"alti": np.array([[0.1, 0.9, 0.0, 0.0], [0.2, 0.5, 0.2, 0.1]]),
                    "value_zeroing": np.array([[0.0, 0.0, 0.0, 1.0], [0.0, 0.1, 0.8, 0.1]]),
                    "attention": np.array([[0.0, 0.0, 0.0, 1.0], [0.1, 0.0, 0.6, 0.3]])}}
    assert ME.top_tokens(res) == {"alti": "<s>", "value_zeroing": "were", "attention": "were"}
    assert ME.top_tokens(res, layer=0)["value_zeroing"] == "."
    text = ME.describe_top_tokens(res)
    assert text == ("m, layer 2, row of 'hat' (itself left out): the first-ranked token is "
                    "'were' by 2 of 3 (Value Zeroing, Attention); '<s>' by 1 of 3 (ALTI).")
    with pytest.raises(ValueError, match="only the explained token"):
        ME.top_tokens({**res, "tokens": ["hat"], "position": 0,
                       "rows": {"alti": np.ones((2, 1))}})
