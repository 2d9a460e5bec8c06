"""Plausibility against human rationales: the metrics of cmixlib.metrics.plausibility on hand-computed
cases, the HateXplain rationale loader on the shipped files, and the `hatexplain-plausibility`
experiment on a tiny random classifier through the Sources seam."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib import data
from cmixlib import experiments as X
from cmixlib.metrics import plausibility as pl
from cmixlib.data.hatexplain import majority_rationale
from cmixlib.experiments.plausibility import PLAUSIBILITY_METHODS, SUBSETS, attribution_rows
from fakes import FakeBundle, rationale_posts

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "cache"))
    yield


# ---------------------------------------------------------------------------------------------
# The metrics, by hand
# ---------------------------------------------------------------------------------------------
def test_word_scores_pool_pieces_and_leave_out_special_tokens():
    a = [9.0, 1.0, 2.0, 3.0, 4.0, 9.0]           # [CLS] w0 (w1 w1) w2 [SEP]
    w2t = [[1], [2, 3], [4], []]
    np.testing.assert_array_equal(pl.word_scores(a, w2t), [1.0, 5.0, 4.0, 0.0])
    np.testing.assert_array_equal(pl.word_scores(a, w2t, "mean"), [1.0, 2.5, 4.0, 0.0])
    np.testing.assert_array_equal(pl.word_scores(a, w2t, "max"), [1.0, 3.0, 4.0, 0.0])
    with pytest.raises(ValueError, match="pooling"):
        pl.word_scores(a, w2t, "median")
    with pytest.raises(ValueError, match="outside"):
        pl.word_scores(a, [[6]])
    with pytest.raises(ValueError, match="1-D"):
        pl.word_scores(np.ones((2, 3)), [[0]])


def test_auprc_token_f1_and_iou_f1_by_hand():
    scores, rationale = [0.9, 0.8, 0.3, 0.1], [1, 0, 1, 0]
    # ranks: + (P 1, R 1/2), - , + (P 2/3, R 1): AP = 1/2 * 1 + 1/2 * 2/3
    assert pl.auprc(scores, rationale) == pytest.approx(0.5 + 1 / 3)
    # top k = 2 words {0, 1}: one of the two rationale words
    np.testing.assert_array_equal(pl.top_k(scores, 2), [1, 1, 0, 0])
    assert pl.token_f1(scores, rationale) == pytest.approx(0.5)
    # kept span [0, 2) against rationale spans [0, 1) and [2, 3): IOU 1/2 >= 0.5 -> found;
    # P = 1/1, R = 1/2, F1 = 2/3
    assert pl.spans([1, 1, 0, 0]) == [(0, 2)] and pl.spans(rationale) == [(0, 1), (2, 3)]
    assert pl.iou_f1(scores, rationale) == pytest.approx(2 / 3)
    assert pl.iou_f1(scores, rationale, threshold=0.6) == 0.0
    # one kept span of two words inside a three-word rationale span: IOU 2/3
    assert pl.iou_f1([0, 5, 4, 0, 0], [0, 1, 1, 1, 0]) == pytest.approx(1.0)
    out = pl.plausibility_scores(scores, rationale)
    assert set(out) == {"auprc", "token_f1", "iou_f1"}


def test_ties_keep_the_earlier_word_and_count_together_in_auprc():
    np.testing.assert_array_equal(pl.top_k([1.0, 1.0, 1.0], 2), [1, 1, 0])
    # all scores tied: one threshold, precision = the rationale's share
    assert pl.auprc([0.5] * 4, [0, 1, 0, 0]) == pytest.approx(0.25)
    assert pl.token_f1([0.5] * 4, [0, 1, 0, 0]) == 0.0     # the earliest word is kept


@pytest.mark.parametrize("seed", range(4))
def test_auprc_equals_sklearns_average_precision(seed):
    """The numpy AUPRC against the obvious reference, sklearn's average_precision_score, on
    random posts with and without ties (rounded scores, all-equal scores, one rationale word).
    Both sum at most W products of numbers in [0, 1] in different orders: rule 1 with W terms."""
    from sklearn.metrics import average_precision_score

    from tolerances import rounding_atol

    rng = np.random.default_rng(seed)
    for t in range(300):
        n = int(rng.integers(1, 60))
        scores = rng.normal(size=n)
        if t % 3 == 0:
            scores = np.round(scores * 2) / 2                 # many ties
        if t % 11 == 0:
            scores[:] = 0.25                                  # one threshold
        rationale = (rng.random(n) < rng.random()).astype(int)
        rationale[rng.integers(n)] = 1
        ref = average_precision_score(rationale, scores)
        assert abs(pl.auprc(scores, rationale) - ref) <= rounding_atol(n, 1.0, np.float64)
        assert pl.plausibility_scores(scores, rationale)["auprc"] == pl.auprc(scores, rationale)


def test_word_scores_equal_a_loop_over_words():
    """Pooling all words at once against a loop that pools each word's pieces on its own."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(3, 40))
        a = rng.normal(size=n)
        w2t = [sorted(rng.choice(n, size=int(rng.integers(0, 4)), replace=False).tolist())
               for _ in range(int(rng.integers(1, 20)))]
        for pooling, f in (("sum", np.sum), ("mean", np.mean), ("max", np.max)):
            ref = [f(a[p]) if p else 0.0 for p in w2t]
            np.testing.assert_allclose(pl.word_scores(a, w2t, pooling), ref, rtol=0,
                                       atol=4 * 2.0 ** -53 * np.abs(a).max())


@pytest.mark.parametrize("seed", range(5))
def test_a_perfect_attribution_scores_one_and_a_reversed_one_low(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 30))
    rationale = np.zeros(n, dtype=int)
    rationale[rng.choice(n, size=int(rng.integers(1, n // 2 + 1)), replace=False)] = 1
    perfect = rationale + rng.uniform(0, 0.5, n)             # every rationale word above the rest
    for metric in (pl.auprc, pl.token_f1, pl.iou_f1):
        assert metric(perfect, rationale) == pytest.approx(1.0)
    reversed_ = -perfect                                     # the rationale at the bottom
    assert pl.token_f1(reversed_, rationale) == 0.0 and pl.iou_f1(reversed_, rationale) == 0.0
    # AP of the worst order: the k positives last, sum_i (1/k) * i / (n - k + i)
    k = int(rationale.sum())
    worst = np.mean([i / (n - k + i) for i in range(1, k + 1)])
    assert pl.auprc(reversed_, rationale) == pytest.approx(worst)
    assert pl.auprc(reversed_, rationale) < rationale.mean() + 1e-12 or k == n


@pytest.mark.parametrize("scores, rationale, match", [
    ([0.1, 0.2], [1, 0, 0], "same length"),
    ([], [], "empty"),
    ([0.1, np.nan], [1, 0], "NaN"),
    ([0.1, 0.2], [1, 2], "only 0 and 1"),
    ([0.1, 0.2], [0, 0], "marks no word"),
    ([[0.1, 0.2]], [[1, 0]], "1-D"),
])
def test_bad_input_is_refused_with_a_clear_error(scores, rationale, match):
    for metric in (pl.auprc, pl.token_f1, pl.iou_f1):
        with pytest.raises(ValueError, match=match):
            metric(scores, rationale)


def test_bad_k_and_threshold():
    with pytest.raises(ValueError, match="k must be"):
        pl.top_k([1.0, 2.0], 3)
    with pytest.raises(ValueError, match="k must be"):
        pl.top_k([1.0, 2.0], True)
    with pytest.raises(ValueError, match="threshold"):
        pl.iou_f1([1.0, 2.0], [0, 1], threshold=0)


# ---------------------------------------------------------------------------------------------
# The loader on the shipped files
# ---------------------------------------------------------------------------------------------
def test_majority_rationale_rule():
    assert majority_rationale([[1, 1, 0], [0, 1, 1]], 3) == [0, 1, 0]          # 2 of 3 needed
    assert majority_rationale([[1, 1, 0], [0, 1, 1], [1, 0, 0]], 3) == [1, 1, 0]
    assert majority_rationale([], 3) == []
    with pytest.raises(ValueError, match="one entry per word"):
        majority_rationale([[1, 0], [1]], 3)
    with pytest.raises(ValueError, match="n_annotators"):
        majority_rationale([[1]], 0)


def test_rationale_files_counts_and_rule():
    df = data.load_hatexplain_rationales("test")
    assert len(df) == 1924
    assert df["label_name"].value_counts().to_dict() == {"normal": 782, "hatespeech": 594, "offensive": 548}
    has = df["marks"].map(len) > 0
    assert int(has.sum()) == 1142 and set(df.loc[~has, "label_name"]) == {"normal"}
    assert int((df["rationale"].map(sum) > 0).sum()) == 1106
    row = df.iloc[2]                          # 2 rationales over 12 words, both mark the last word
    assert row["rationale"] == [0] * 11 + [1] and row["label_name"] == "offensive"
    val = data.load_hatexplain_rationales("validation")
    assert len(val) == 1922 and int((val["marks"].map(len) > 0).sum()) == 1141


def test_rationale_loader_refuses_bad_arguments(packaged_tokenizer):
    with pytest.raises(ValueError, match="train rationales are not shipped"):
        data.load_hatexplain_rationales("train")
    with pytest.raises(TypeError, match="split must be a string"):
        data.load_hatexplain_rationales(1)
    with pytest.raises(ValueError, match="limit"):
        data.load_hatexplain_rationale_inputs(packaged_tokenizer, "test", limit=0)
    with pytest.raises(TypeError, match="tokenizer"):
        data.load_hatexplain_rationale_inputs(None, "test")
    with pytest.raises(TypeError, match="only_rationales"):
        data.load_hatexplain_rationale_inputs(packaged_tokenizer, "test", only_rationales="yes")


def test_malformed_rationale_file_names_the_line(tmp_path, monkeypatch):
    folder = tmp_path / "data" / "hatexplain"
    folder.mkdir(parents=True)
    good = {"id": "a", "annotators": {"label": [0, 0, 1], "annotator_id": [1, 2, 3],
                                      "target": [[], [], []]},
            "rationales": [[1, 0], [1, 1]], "post_tokens": ["x", "y"]}
    bad = dict(good, rationales=[[1, 0, 0]])
    (folder / "rationales_test.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    monkeypatch.setenv("CMIX_DATA", str(tmp_path / "data"))
    with pytest.raises(data.MalformedDataError, match="line 2"):
        data.load_hatexplain_rationales("test")


def test_inputs_map_every_word_to_its_pieces(packaged_tokenizer):
    exs = data.load_hatexplain_rationale_inputs(packaged_tokenizer, "test", limit=30)
    assert len(exs) == 30 and all(sum(ex["rationale"]) > 0 for ex in exs)
    for ex in exs:
        ids = ex["input_ids"]
        assert ex["target_index"] == 0 and len(ex["word_to_tokens"]) == len(ex["post_tokens"])
        assert ex["word_ids"][0] == -1 and ex["word_ids"][-1] == -1       # [CLS], [SEP]
        for w, positions in enumerate(ex["word_to_tokens"]):
            assert positions and all(ex["word_ids"][k] == w for k in positions)
        # the pieces spell the word (uncased WordPiece)
        w = max(range(len(ex["post_tokens"])), key=lambda i: len(ex["word_to_tokens"][i]))
        pieces = packaged_tokenizer.convert_ids_to_tokens([ids[k] for k in ex["word_to_tokens"][w]])
        spelled = "".join(p.removeprefix("##") for p in pieces)
        assert spelled == ex["post_tokens"][w].lower() or "[UNK]" in pieces
        assert ids == packaged_tokenizer(" ".join(ex["post_tokens"]))["input_ids"]


# ---------------------------------------------------------------------------------------------
# The experiment on a tiny random classifier
# ---------------------------------------------------------------------------------------------
class TinySources(X.Sources):
    def __init__(self):
        model = cmixlib.random_model("bert", task="sequence-classification", layers=2, num_labels=3,
                                     seed=11)
        model.config.id2label = {0: "hatespeech", 1: "normal", 2: "offensive"}
        self.bundle = FakeBundle(model)

    def classifier(self, task):
        assert task == "hatexplain"
        return self.bundle, {"accuracy": 0.5}

    def hatexplain_rationales(self, bundle, limit):
        return rationale_posts(limit)


def test_experiment_on_a_tiny_model_matches_one_post_at_a_time():
    src = TinySources()
    r = X.run_experiment("hatexplain-plausibility", model="tiny-plausibility", progress=False,
                         sources=src, settings={"ig_steps": 3})
    res = r.result.set_index("method")
    assert list(res.index) == PLAUSIBILITY_METHODS and (res["n"] == 7).all()
    for m in ("auprc", "token_f1", "iou_f1"):
        assert ((res[m] >= 0) & (res[m] <= 1)).all()
        assert (res[f"{m}_ci_low"] <= res[m] + 1e-12).all() and (res[m] <= res[f"{m}_ci_high"] + 1e-12).all()
    per = r.frames["per_post"]
    assert len(per) == 7 * len(PLAUSIBILITY_METHODS)
    # every post against its own unpadded run: same predicted class, same scores
    posts = rationale_posts(None)
    settings = dict(X.REGISTRY["hatexplain-plausibility"].defaults, ig_steps=3)
    for ex in posts:
        predicted, scores = attribution_rows(src.bundle, [ex], PLAUSIBILITY_METHODS, settings,
                                             [ex["idx"]])[0]
        rows = per[per["idx"] == ex["idx"]].set_index("method")
        assert (rows["predicted"] == predicted).all()
        for m in PLAUSIBILITY_METHODS:
            want = pl.plausibility_scores(pl.word_scores(scores[m], ex["word_to_tokens"]), ex["rationale"])
            for metric, value in want.items():
                assert rows.loc[m, metric] == pytest.approx(value, abs=1e-9), (m, metric)
        with torch.no_grad():
            logits = src.bundle.model(input_ids=torch.tensor([ex["input_ids"]])).logits
        assert predicted == int(logits.argmax())
    # the subsets count the right posts
    sub = r.frames["subsets"].set_index(["subset", "method"])
    one = per.drop_duplicates("idx")
    assert sub.loc[(SUBSETS[0], "random"), "n"] == 7
    assert sub.loc[(SUBSETS[1], "random"), "n"] == int((one["predicted"] == one["label"]).sum())
    assert sub.loc[(SUBSETS[2], "random"), "n"] == int((one["predicted"] != 1).sum())
    assert r.meta["info"]["posts"]["evaluated"] == 7
    assert "mean per post" in r.summary()


def test_experiment_refuses_an_unknown_method_and_a_bad_pooling():
    with pytest.raises(ValueError, match="unknown method"):
        X.run_experiment("hatexplain-plausibility", model="tiny-plausibility", progress=False,
                         sources=TinySources(), settings={"methods": ["no_such_method"]})
    with pytest.raises(ValueError, match="pooling"):
        X.run_experiment("hatexplain-plausibility", model="tiny-plausibility", progress=False,
                         sources=TinySources(), limit=2, settings={"pooling": "median"})


def test_book_run_entry():
    from cmixlib.book import runs as B

    spec = B.BOOK_RUNS["plausibility"]
    assert spec.experiment == "hatexplain-plausibility" and spec.group == "classifier"
    assert spec.full_limit is None and spec.quick_limit == 2


def test_the_sentence_names_the_top_group_and_the_overlap():
    import pandas as pd

    from cmixlib.experiments.plausibility import describe_most_plausible

    def row(m, v, lo, hi):
        return {"method": m, "auprc": v, "auprc_ci_low": lo, "auprc_ci_high": hi, "confidence": 0.95}

    r = pd.DataFrame([row("random", 0.5, 0.45, 0.55), row("alti", 0.8, 0.75, 0.85),
                      row("attn_norm", 0.7, 0.66, 0.74), row("attn_norm_res", 0.7, 0.66, 0.74)])
    text = describe_most_plausible(r)
    assert text.startswith("By mean AUPRC the most plausible method is ALTI, 0.800 [0.750, 0.850]")
    assert "does not overlap that of the runner-up, N = N-Res, 0.700" in text
    r.loc[1, "auprc_ci_low"] = 0.70
    assert "its interval overlaps" in describe_most_plausible(r)
    per = pd.DataFrame({"idx": [0, 1, 0, 1], "method": ["alti", "alti", "attn_norm", "attn_norm"],
                        "auprc": [1.0, 0.6, 0.8, 0.6]})
    assert "paired difference per post is +0.100" in describe_most_plausible(r, per_post=per)
    with pytest.raises(ValueError, match="metric"):
        describe_most_plausible(r, "f1")


def test_default_sources_read_the_test_split(packaged_tokenizer):
    from types import SimpleNamespace

    exs = X.Sources().hatexplain_rationales(SimpleNamespace(tokenizer=packaged_tokenizer), 3)
    want = data.load_hatexplain_rationale_inputs(packaged_tokenizer, "test", limit=3)
    assert [e["id"] for e in exs] == [e["id"] for e in want] and len(exs) == 3
