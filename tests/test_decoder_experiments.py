"""Chapter 16's experiment (cmixlib.experiments.decoder) on small random decoders and a toy
word-level tokenizer: the causal adaptation of BLiMP pairs (prediction position, first tokens of
target and foil, cue positions, drop reasons), blank-out and sentence log-probabilities against
slow one-sequence references, the whole run in quick mode, and bad input.

Tolerances: batched (right-padded) against one-sequence float32 computations use rule 2 of
tests/tolerances.py (no worse than an independent float32 baseline against float64), on the
GPT-2 family, whose LayerNorm computes in the input's dtype (HF's Llama RMSNorm computes in
float32 inside a float64 model, so a float64 Llama is no exact reference)."""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch

from cmixlib import AltiLogit, InputError, context_mixing
from cmixlib.methods import decoder as dm
from cmixlib.forward.decoder import random_decoder, run_decoder
from cmixlib.metrics.evaluation import alignment_rows
from cmixlib.metrics.statistics import spearman
from cmixlib.experiments import decoder as D
from cmixlib.experiments import decoder_scores as DS
from cmixlib.experiments import run_experiment
from tolerances import assert_no_worse_than_baseline

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BOS, UNK = 0, 1


class ToyTokenizer:
    """Word-level, GPT-2 style: a word after a space is its own token with the space (" cat");
    " dislikes" is two tokens (" dislike", "s"); "ice cream" is one token (a merge across
    words). Ids are given in order of first use, from 3 (0 BOS, 1 unknown, 2 spare)."""

    unk_token_id, pad_token_id = UNK, None

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def _id(self, piece: str) -> int:
        return self.vocab.setdefault(piece, 3 + len(self.vocab))

    def pieces(self, text: str) -> list[str]:
        text = text.replace("ice cream", "ice_cream")
        out = []
        for k, word in enumerate(text.split(" ")):
            word = word if k == 0 else " " + word
            out += [word[:-1], "s"] if word.strip() == "dislikes" else [word]
        return out

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self._id(p) for p in self.pieces(text)]}

    def convert_ids_to_tokens(self, ids):
        inv = {v: k for k, v in self.vocab.items()}
        return [inv.get(i, "<bos>" if i == BOS else "?") for i in ids]


def pair(words, ti, target, foil, cues, uid="darn", pair_id=0):
    bad = list(words)
    bad[ti] = foil
    return {"uid": uid, "pair_id": pair_id, "label": "plural", "words": list(words),
            "spaces": [True] * (len(words) - 2) + [False, False], "target_word_index": ti,
            "target_word": target, "foil_word": foil, "cue_word_indices": cues,
            "sentence_good": " ".join(words[:-1]) + words[-1],
            "sentence_bad": " ".join(bad[:-1]) + bad[-1]}


DARN = pair(["The", "teachers", "near", "the", "door", "were", "here", "."], 5, "were", "was",
            [1])


# ------------------------------------------------------------------ the causal adaptation
def test_causal_example_positions_and_first_tokens():
    tok = ToyTokenizer()
    ex, why = D.causal_example(DARN, tok, BOS)
    assert why is None
    words = ["The", " teachers", " near", " the", " door"]
    assert ex["input_ids"] == [BOS] + [tok.vocab[w] for w in words]
    assert ex["target_index"] == len(ex["input_ids"]) - 1 == 5       # "door", before the verb
    assert (ex["target_id"], ex["foil_id"]) == (tok.vocab[" were"], tok.vocab[" was"])
    assert ex["cue_indices"] == [2]                                  # "teachers", after the BOS
    assert ex["tokens"][2] == " teachers"


def test_prediction_position_is_where_the_full_sentence_predicts_the_target():
    """Causal: the logits at p of the prefix are those at p of the whole good sentence, where
    the next token is the target's first token."""
    tok, model = ToyTokenizer(), random_decoder("llama", seed=3)
    ex, _ = D.causal_example(DARN, tok, BOS)
    full = [BOS] + tok(DARN["sentence_good"])["input_ids"]
    p = ex["target_index"]
    assert full[p + 1] == ex["target_id"] and full[:p + 1] == ex["input_ids"]
    with torch.no_grad():
        a = model(torch.tensor([full])).logits[0, p]
        b = model(torch.tensor([ex["input_ids"]])).logits[0, p]
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5 * float(a.abs().max()))


def test_cue_tokens_of_a_word_split_into_several_tokens():
    tok = ToyTokenizer()
    p = pair(["Those", "dislikes", "girls", "were", "ok", "."], 3, "were", "was", [1, 2])
    ex, _ = D.causal_example(p, tok, BOS)
    assert ex["cue_indices"] == [2, 3, 4]        # " dislike", "s", " girls"
    assert ex["target_index"] == 4


@pytest.mark.parametrize("words, ti, target, foil, cues, reason", [
    (["I", "saw", "this", "dog", "."], 2, "this", "these", [3], "cue_after_target"),
    (["Dogs", "bark", "."], 0, "Dogs", "Dog", [1], "no_context"),
    (["The", "boys", "dislike", "it", "."], 2, "dislike", "dislikes", [1], "same_first_token"),
    (["The", "ice", "cream", "is", "."], 3, "is", "are", [2], "tokens_cross_words"),
])
def test_drop_reasons(words, ti, target, foil, cues, reason):
    ex, why = D.causal_example(pair(words, ti, target, foil, cues), ToyTokenizer(), BOS)
    assert ex is None and why == reason


def test_sample_per_paradigm_is_seeded_and_keeps_order():
    pairs = [{"uid": u, "pair_id": k} for u in ("ana", "dna") for k in range(10)] + \
            [{"uid": "rpsv", "pair_id": 0}]
    a = D.sample_per_paradigm(pairs, 3)
    assert a == D.sample_per_paradigm(pairs, 3)
    assert pd.Series([p["uid"] for p in a]).value_counts().to_dict() == \
        {"ana": 3, "dna": 3, "rpsv": 1}
    assert a == [p for p in pairs if p in a]
    assert D.sample_per_paradigm(pairs, None) == pairs


# ------------------------------------------------------------------ blank-out, log-probs
def _models():
    m32 = random_decoder("gpt2", seed=5)
    return m32, copy.deepcopy(m32).double()


def _delta(model, ids, t, f):
    with torch.no_grad():
        lg = model(torch.tensor([ids])).logits[0, -1].double()
    return float(lg[t] - lg[f])


@pytest.mark.parametrize("blank", ["delete", "unk"])
def test_blank_out_against_one_sequence_at_a_time(blank):
    m32, m64 = _models()
    g = torch.Generator().manual_seed(1)
    exs = [{"input_ids": [BOS] + torch.randint(3, 101, (n,), generator=g).tolist(),
            "target_id": 7, "foil_id": 9} for n in (3, 6, 4)]

    def slow(model, ex):
        ids = ex["input_ids"]
        clean = _delta(model, ids, 7, 9)
        out = []
        for j in range(len(ids)):
            v = ids[:j] + ids[j + 1:] if blank == "delete" else ids[:j] + [UNK] + ids[j + 1:]
            out.append(clean - _delta(model, v, 7, 9))
        return np.array(out)

    got = DS.blank_out_scores(m32, exs, blank, unk_id=UNK, batch=5)    # batches cut examples
    for g32, ex in zip(got, exs):
        assert_no_worse_than_baseline(g32, slow(m64, ex), slow(m32, ex), err_msg=blank)
    with pytest.raises(AssertionError):       # the check can fail: a wrong variant is caught
        np.testing.assert_allclose(got[1][1:], slow(m32, exs[1])[:-1], atol=1e-4)


def test_sentence_logprobs_against_one_sequence_at_a_time():
    m32, m64 = _models()
    g = torch.Generator().manual_seed(2)
    seqs = [[BOS] + torch.randint(3, 101, (n,), generator=g).tolist() for n in (2, 7, 5, 7)]

    def slow(model):
        out = []
        for s in seqs:
            with torch.no_grad():
                lp = torch.log_softmax(model(torch.tensor([s])).logits[0].double(), -1)
            out.append(float(sum(lp[k - 1, s[k]] for k in range(1, len(s)))))
        return np.array(out)

    assert_no_worse_than_baseline(DS.sentence_logprobs(m32, seqs, pad_id=2, batch=3),
                                  slow(m64), slow(m32))


def test_bad_blank_and_exclude_are_clear_errors():
    model = random_decoder("llama")
    ex = {"input_ids": [0, 5, 6], "target_id": 7, "foil_id": 8}
    with pytest.raises(InputError, match="blank must be one of"):
        DS.blank_out_scores(model, [ex], "mask")
    with pytest.raises(InputError, match="use blank='delete'"):
        DS.blank_out_scores(model, [ex], "unk", unk_id=None)
    with pytest.raises(InputError, match="exclude must be one of"):
        D.exclude_for("special")


# ------------------------------------------------------------------ the whole run, quick
PAIRS = [DARN,
         pair(["The", "boys", "were", "here", "."], 2, "were", "was", [1], "rpsv", 1),
         pair(["Some", "girls", "near", "me", "are", "ok", "."], 4, "are", "is", [1], "rpsv", 2),
         pair(["The", "men", "saw", "themselves", "."], 3, "themselves", "himself", [0, 1],
              "ana", 3),
         pair(["I", "saw", "this", "dog", "."], 2, "this", "these", [3], "dna", 4)]


TOY = ToyTokenizer()     # one vocabulary for the run and the direct computation


class ToySources(D.DecoderSources):
    def decoder(self):
        from types import SimpleNamespace

        model = random_decoder("llama", seed=11)
        return SimpleNamespace(model=model, tokenizer=TOY, bos_token_id=BOS,
                               name="random-llama"), None

    def blimp_pairs(self):
        return [dict(p) for p in PAIRS]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    import os

    old = os.environ.get("CMIX_CACHE")
    os.environ["CMIX_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield run_experiment("decoder-blimp", model="toy", limit=2, progress=False,
                             sources=ToySources(), use_cache=False)
    finally:
        if old is None:
            os.environ.pop("CMIX_CACHE")
        else:
            os.environ["CMIX_CACHE"] = old


def test_quick_run_frames(quick_run):
    f = quick_run.frames
    assert set(f) == {"result", "accuracy", "faithfulness", "sink_norm", "sink_share", "drops",
                      "logit_parts", "result_by_paradigm", "alignment_drops"}
    # "The boys were": the cue (boys) is the prediction position: out of the cue alignment
    cue = f["alignment_drops"].set_index(["uid", "reason"])["pairs"].to_dict()
    assert cue == {("darn", "kept"): 1, ("rpsv", "cue_is_prediction_word"): 1,
                   ("rpsv", "kept"): 1, ("ana", "kept"): 1}
    byp = f["result_by_paradigm"]
    assert set(byp.uid) == {"darn", "rpsv", "ana"}
    assert set(byp[byp.metric == "dot"].n) == {1}
    parts = f["logit_parts"]
    assert len(parts) == 4 and set(parts.uid) == {"darn", "rpsv", "ana"}
    np.testing.assert_allclose(parts.tokens + parts.remainder, parts.logit, rtol=1e-5,
                               atol=1e-6)
    assert quick_run.meta["data_size"] == {"pairs": 5, "causal": 4}
    drops = f["drops"].set_index(["uid", "reason"])["pairs"].to_dict()
    assert drops == {("darn", "kept"): 1, ("rpsv", "kept"): 2, ("ana", "kept"): 1,
                     ("dna", "cue_after_target"): 1}
    acc = f["accuracy"].set_index("uid")
    assert acc.loc["rpsv", "pairs"] == 2 and np.isnan(acc.loc["dna", "prediction_accuracy"])
    assert set(f["result"]["exclude"]) == {"bos", "none"}
    assert set(f["result"]["method"]) == set(D.DECODER_LAYER_METHODS)
    assert f["sink_norm"]["layer"].tolist() == [0, 1, 2]
    assert set(f["faithfulness"]["method"]) == set(D.DECODER_GLOBAL_METHODS)


def test_quick_run_numbers_against_a_direct_computation(quick_run):
    """Cue alignment, faithfulness and the sink share of the run, recomputed for the run's four
    examples from context_mixing and a slow blank-out, then averaged."""
    src = ToySources()
    bundle, _ = src.decoder()
    tok = bundle.tokenizer
    exs = [D.causal_example(p, tok, BOS)[0] for p in PAIRS[:4]]
    # the run sorts examples into length batches but keeps their indices: ids are by position
    rows, rho, share, ratio = [], {"alti": [], "nearness": [], "alti_logit": []}, [], []
    for ex in exs:
        cap = run_decoder(bundle.model, torch.tensor(ex["input_ids"]))
        x = cap.layers[1].resid_in.double().norm(dim=-1)
        ratio.append(float(x[0] / x[1:].mean()))
        ids, p = ex["input_ids"], ex["target_index"]
        maps = context_mixing(bundle.model, None, {"input_ids": torch.tensor(ids)},
                              ["value_zeroing", "alti", "attention",
                               AltiLogit(target=ex["target_id"], foil=ex["foil_id"])])
        cues = [c for c in ex["cue_indices"]                  # the word at p left out
                if c not in ex["prediction_word_indices"]]
        if cues:
            rows += alignment_rows({"value_zeroing": maps["value_zeroing"][:, p]}, cues,
                                   exclude=[0])
        clean = _delta(bundle.model, ids, ex["target_id"], ex["foil_id"])
        bo = np.array([clean - _delta(bundle.model, ids[:j] + ids[j + 1:], ex["target_id"],
                                      ex["foil_id"]) for j in range(len(ids))])
        rho["alti"].append(spearman(maps["alti"][-1, p, 1:], bo[1:]))
        # ALTI-Logit's global row: summed over layers, the embedding term added at p itself
        expl = maps["alti_logit"][:, p].sum(0)
        expl[p] += dm.alti_logit(cap, bundle.model, ex["target_id"], ex["foil_id"]).embedding[p]
        rho["alti_logit"].append(spearman(expl[1:], bo[1:]))
        near = -np.abs(np.arange(len(ids)) - p)
        rho["nearness"].append(spearman(near[1:], bo[1:]))
        share.append(maps["attention"][0, 1:, 0].mean())
    want = pd.DataFrame(rows).groupby("layer")["dot"].mean().to_numpy()
    res = quick_run.result
    got = res[(res.exclude == "bos") & (res.method == "value_zeroing") & (res.metric == "dot")]
    np.testing.assert_allclose(got.sort_values("layer")["mean"], want, rtol=1e-5)
    faith = quick_run.frames["faithfulness"]
    faith = faith[faith.exclude == "bos"].set_index("method")["mean"]
    for m, vals in rho.items():
        assert faith[m] == pytest.approx(np.nanmean(vals), abs=1e-6), m
    sink = quick_run.frames["sink_share"]
    got_share = sink[(sink.method == "attention") & (sink.layer == 0)]["share"].item()
    assert got_share == pytest.approx(np.mean(share), rel=1e-5)
    norm = quick_run.frames["sink_norm"].set_index("layer")
    assert norm.loc[1, "ratio"] == pytest.approx(np.mean(ratio), rel=1e-5)


def test_alignment_cues_leave_the_word_at_the_prediction_position_out():
    assert D.alignment_cues({"target_index": 3, "cue_indices": [2, 3]}) == [2]
    assert D.alignment_cues({"target_index": 2, "cue_indices": [2]}) == []
    # a cue noun of two tokens ending at p: both are the word at p, none is left
    ex = {"target_index": 4, "cue_indices": [1, 3, 4], "prediction_word_indices": [3, 4]}
    assert D.alignment_cues(ex) == [1]
    tok = ToyTokenizer()
    real, _ = D.causal_example(PAIRS[1], tok, BOS)         # "The boys | were"
    assert real["prediction_word_indices"] == [real["target_index"]]
    assert D.alignment_cues(real) == []


def test_quick_run_refuses_unknown_settings():
    with pytest.raises(InputError, match="blank must be one of"):
        run_experiment("decoder-blimp", model="toy", limit=1, progress=False,
                       sources=ToySources(), use_cache=False, settings={"blank": "mask"})


# ------------------------------------------------------------------ the chapter's sentences
def test_sentences_follow_their_rules():
    from cmixlib.book import decoder_report as R

    norm = pd.DataFrame({"layer": [0, 1, 2, 3], "ratio": [1.0, 12.0, 3.0, 40.0]})
    share = pd.DataFrame({"method": ["attention"] * 2 + ["alti"] * 2, "layer": [0, 1] * 2,
                          "share": [0.8, 0.6, 0.1, 0.3]})
    text = R.describe_sink(norm, share, "M")
    assert "2 of 4 layers (the first is layer 2, the last layer 4)" in text
    assert "largest ratio is 40 at the input of layer 4" in text
    assert "70% of its mass on the BOS token with Attention (the most)" in text
    assert "20% with ALTI (the least)" in text
    share = pd.concat([share, pd.DataFrame({"method": ["attn_norm"], "layer": [0],
                                            "share": [0.5]})])
    assert "N gives the BOS 50% of a row against 70% for attention" in \
        R.describe_sink(norm, share, "M")

    acc = pd.DataFrame({"uid": ["ana", "dna"], "sentence_accuracy": [1.0, 0.5],
                        "pairs": [4, 2], "prediction_accuracy": [0.75, np.nan],
                        "causal_pairs": [4.0, np.nan]})
    text = R.describe_decoder_accuracy(acc, "M")
    assert "in 0.750 of the pairs on average over the 2 paradigms" in text
    assert "from 0.500 in dna to 1.000 in ana), on 6 pairs" in text
    assert "beats the foil's in 0.750 of the 4 pairs" in text

    dec = {"random": 0.5, "attention": 0.4, "value_zeroing": 0.6, "alti_logit": 0.45,
           "alti_layer": 0.2}
    enc = {"random": 0.3, "attention": 0.1, "value_zeroing": 0.5, "alti_layer": 0.6}
    text = R.describe_alignment_comparison(dec, enc, ("D", "E"))
    assert "best-aligned method is Value Zeroing in D and ALTI (layer) in E" in text
    assert "3 shared methods correlate with Spearman -0.50" in text
    assert "Value Zeroing (0.600) is above" in text and "ALTI-Logit (0.450) is not above" in text
    text = R.describe_alignment_comparison({**dec, "value_zeroing": 0.5001}, enc, ("D", "E"))
    assert "Value Zeroing (0.500) is not above the random baseline (0.500)" in text

    text = R.describe_decoder_faithfulness({"random": 0.0, "nearness": 0.2, "alti": 0.3,
                                            "attention_rollout": 0.2}, "M")
    assert "is ALTI (mean Spearman +0.300)" in text
    assert "not above the sanity baselines (random, nearness): Attention rollout." in text
    assert R.short_name("org/name (llama, 30 layers): GGUF") == "org/name"
