"""Tests of the BLiMP cue annotation rules (cmixlib.data.blimp_rules): constructed sentences
parsed by spaCy and run through the real rule code (``annotate_pair``), hand-built parses for the
parser failures (``cue_for``, ``noun_number``), the shipped BLiMP files and the cache key."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cmixlib import data as D

REPO_DATA = Path(__file__).resolve().parents[1] / "data"  # the repository's own data/


@pytest.fixture(scope="module")
def nlp() -> Any:
    """The spaCy pipeline used by the annotation (skips when it is not installed)."""
    pytest.importorskip("spacy")
    try:
        return D.load_spacy()
    except D.DataError as err:  # pragma: no cover - depends on the environment
        pytest.skip(str(err))


def annotate(nlp: Any, uid: str, good: str, bad: str) -> dict:
    """Annotate one constructed minimal pair with the real rule code."""
    return D.annotate_pair(uid, good, bad, nlp)


def cue_words(rec: dict) -> list[str]:
    """The cue words of an annotated record (empty when it has none)."""
    return [rec["words"][i] for i in rec["cue_word_indices"] or []]


def hand_parse(nlp: Any, rows: list[tuple[str, str, str, int]]) -> Any:
    """A Doc with a given (word, tag, dep, head) analysis, i.e. a fixed parser mistake."""
    from spacy.tokens import Doc
    words, tags, deps, heads = (list(x) for x in zip(*rows))
    tag_map = {"DT": "DET", "JJ": "ADJ", "NN": "NOUN", "NNS": "NOUN", "NNP": "PROPN",
               "VBZ": "VERB", "VBP": "VERB", "VBD": "VERB", "IN": "ADP", ".": "PUNCT"}
    return Doc(nlp.vocab, words=words, tags=tags, pos=[tag_map[t] for t in tags], deps=deps,
               heads=heads)


# ----------------------------------------------------------------------------- determiner -> noun
@pytest.mark.parametrize("good, bad, cue", [
    ("Tracy passed that old train station.", "Tracy passed those old train station.", "station"),
    ("Tracy visited those quiet village schools.", "Tracy visited that quiet village schools.",
     "schools"),
    # the parser does not attach the determiner to the noun here (fallback ``next_noun``)
    ("Every teacher buys that out in the open grocery store.",
     "Every teacher buys those out in the open grocery store.", "store"),
    ("Sandra appreciated that important college campus.",
     "Sandra appreciated those important college campus.", "campus"),
])
def test_determiner_cue_is_compound_head(nlp: Any, good: str, bad: str, cue: str) -> None:
    rec = annotate(nlp, "dnaa", good, bad)
    assert rec["drop_reason"] is None
    assert cue_words(rec) == [cue], rec["cue_rule"]
    assert rec["cue_rule"] in ("dep", "dep_compound_head", "next_noun", "next_noun_compound_head")


def test_determiner_attached_to_compound_modifier(nlp: Any) -> None:
    """A parse attaching ``that`` to ``train`` (the compound's modifier) still gives the head."""
    doc = hand_parse(nlp, [("Sam", "NNP", "nsubj", 1), ("likes", "VBZ", "ROOT", 1),
                           ("that", "DT", "det", 4), ("old", "JJ", "amod", 5),
                           ("train", "NN", "compound", 5), ("station", "NN", "dobj", 1),
                           (".", ".", "punct", 1)])
    doc[2].head = doc[4]
    cue = D.cue_for(doc, 2, "dnaa")
    assert [doc[i].text for i in cue.indices] == ["station"]
    assert cue.rule == "dep_compound_head"


# ----------------------------------------------------------------------------- subject -> verb
@pytest.mark.parametrize("good, bad, cue", [
    ("The radio reports about the storm worry Sam.",
     "The radio reports about the storm worries Sam.", "reports"),
    ("A newspaper article about the Borgias vanishes.",
     "A newspaper article about the Borgias vanish.", "article"),
    ("The newspaper articles about Winston Churchill win.",
     "The newspaper articles about Winston Churchill wins.", "articles"),
    ("The grandsons of Douglas chuckle.", "The grandsons of Douglas chuckles.", "grandsons"),
])
def test_modified_subject_cue_is_head_noun(nlp: Any, good: str, bad: str, cue: str) -> None:
    rec = annotate(nlp, "darn", good, bad)
    assert rec["drop_reason"] is None
    assert cue_words(rec) == [cue], rec["cue_rule"]
    assert rec["cue_rule"] in ("dep", "np_head")


@pytest.mark.parametrize("good, bad, cue", [
    ("A lot of people like Sam.", "A lot of people likes Sam.", "people"),
    ("A lot of organizations praise Andrew.", "A lot of organizations praises Andrew.",
     "organizations"),
    ("All drivers walk to the store.", "All drivers walks to the store.", "drivers"),
])
def test_quantified_subject_cue_is_head_noun(nlp: Any, good: str, bad: str, cue: str) -> None:
    rec = annotate(nlp, "rpsv", good, bad)
    assert rec["drop_reason"] is None
    assert cue_words(rec) == [cue], rec["cue_rule"]
    if good.startswith("A lot"):
        assert rec["cue_rule"] in ("dep_lot_of", "np_head_lot_of")


def test_unreliable_parse_is_dropped(nlp: Any) -> None:
    # spaCy reads "waitresses" as the verb and "bike" as its object; no trustworthy subject head
    rec = annotate(nlp, "rpsv", "All waitresses bike to glaciers.",
                   "All waitresses bikes to glaciers.")
    assert rec["drop_reason"] == "unreliable_parse" and rec["cue_word_indices"] is None
    rec = annotate(nlp, "rpsv", "That drawing disgusts the banks.",
                   "That drawing disgust the banks.")
    assert rec["drop_reason"] == "unreliable_parse"


def test_unreliable_parse_on_hand_built_parses(nlp: Any) -> None:
    # the verb tagged as a noun and the subject's noun as a verb: no subject head to trust
    doc = hand_parse(nlp, [("All", "DT", "nsubj", 1), ("drivers", "VBZ", "ROOT", 1),
                           ("walk", "NN", "dobj", 1), ("to", "IN", "prep", 1),
                           ("glaciers", "NNS", "pobj", 3), (".", ".", "punct", 1)])
    assert D.cue_for(doc, 2, "rpsv").drop_reason == "unreliable_parse"
    # a direct subject that is not the head of the sentence-initial noun phrase
    doc = hand_parse(nlp, [("The", "DT", "det", 1), ("reports", "NNS", "ROOT", 1),
                           ("about", "IN", "prep", 1), ("the", "DT", "det", 4),
                           ("storm", "NN", "nsubj", 5), ("worry", "VBP", "pobj", 2),
                           ("Sam", "NNP", "dobj", 5), (".", ".", "punct", 1)])
    assert D.cue_for(doc, 5, "darn").drop_reason == "unreliable_parse"
    # the verb tagged as a noun but a clean sentence-initial noun phrase: positional head
    doc = hand_parse(nlp, [("The", "DT", "det", 2), ("cups", "NNS", "compound", 2),
                           ("alarm", "NN", "compound", 3), ("Angela", "NNP", "ROOT", 3),
                           (".", ".", "punct", 3)])
    cue = D.cue_for(doc, 2, "rpsv")
    assert cue.indices == [1] and cue.rule == "np_head"


# ----------------------------------------------------------------------------- BLiMP label errors
@pytest.mark.parametrize("good, bad", [
    ("The dogs barks at Sam.", "The dogs bark at Sam."),            # plural subject, VBZ "good"
    ("The Clintons disgusts Brian.", "The Clintons disgust Brian."),
    ("The dog bark at the mailman.", "The dog barks at the mailman."),  # singular subject, VBP
])
def test_blimp_label_error_is_dropped(nlp: Any, good: str, bad: str) -> None:
    rec = annotate(nlp, "rpsv", good, bad)
    assert rec["drop_reason"] == "blimp_label_error"


@pytest.mark.parametrize("good, bad", [
    ("The dogs bark at Sam.", "The dogs barks at Sam."),
    ("James walks to the store.", "James walk to the store."),     # NNP with a final -s
    ("Politics was disgusting some patient.", "Politics were disgusting some patient."),
])
def test_correct_pairs_are_not_label_errors(nlp: Any, good: str, bad: str) -> None:
    assert annotate(nlp, "rpsv", good, bad)["drop_reason"] is None


def test_noun_number(nlp: Any) -> None:
    doc = hand_parse(nlp, [("dogs", "NNS", "ROOT", 0), ("dog", "NN", "dep", 0),
                           ("nephews", "NN", "dep", 0), ("James", "NNP", "dep", 0),
                           ("children", "NNS", "dep", 0), ("Clintons", "NNS", "dep", 0),
                           ("politics", "NNS", "dep", 0)])
    got = [D.noun_number(t) for t in doc]
    assert got == [D.PLURAL, D.SINGULAR, None, None, D.PLURAL, D.PLURAL, None]


# ----------------------------------------------------------------------------- shipped data
@pytest.fixture(scope="module")
def real_annotation(nlp: Any, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """A fresh annotation of the shipped dna, dnaa, darn and rpsv files (empty cache)."""
    mp = pytest.MonkeyPatch()
    mp.setenv(D.DATA_ENV_VAR, str(REPO_DATA))
    mp.setenv(D.CACHE_ENV_VAR, str(tmp_path_factory.mktemp("cache")))
    try:
        return D.annotate_blimp(["dna", "dnaa", "darn", "rpsv"], progress=False)
    finally:
        mp.undo()


def test_real_determiner_cues_are_compound_heads(nlp: Any, real_annotation: list[dict]) -> None:
    kept = [r for r in real_annotation if r["uid"] in ("dna", "dnaa") and r["drop_reason"] is None]
    assert len(kept) > 1900
    docs = nlp.pipe([r["sentence_good"] for r in kept], batch_size=256)
    for rec, doc in zip(kept, docs):
        assert [t.text for t in doc] == rec["words"]
        (ci,) = rec["cue_word_indices"]
        cue = doc[ci]
        non_head = cue.dep_ == "compound" and cue.head.i > ci and cue.head.tag_.startswith("NN")
        assert not non_head, (rec["sentence_good"], cue.text)
        assert ci > rec["target_word_index"] and cue.tag_.startswith("NN")


def test_real_subject_cues_and_label_errors(real_annotation: list[dict]) -> None:
    by_key = {(r["uid"], r["pair_id"]): r for r in real_annotation}
    # BLiMP's own errors: a plural subject with a singular "good" verb
    for pid, sentence in ((419, "The Clintons disgusts Brian."),
                          (105, "Those drivers disgusts Dan.")):
        rec = by_key[("rpsv", pid)]
        assert rec["sentence_good"] == sentence and rec["drop_reason"] == "blimp_label_error"
    assert by_key[("rpsv", 497)]["drop_reason"] == "unreliable_parse"  # All waitresses bike ...
    assert cue_words(by_key[("rpsv", 474)]) == ["organizations"]       # A lot of organizations
    assert cue_words(by_key[("darn", 936)]) == ["article"]             # A newspaper article about
    errors = [r for r in real_annotation if r["drop_reason"] == "blimp_label_error"]
    assert 5 <= len(errors) <= 20
    for rec in real_annotation:
        if rec["uid"] in ("darn", "rpsv") and rec["drop_reason"] is None:
            (ci,) = rec["cue_word_indices"]
            assert ci < rec["target_word_index"]
            assert rec["words"][ci].lower() not in ("a", "the", "all", "that", "this", "lot", "of")
            assert rec["cue_rule"] in ("dep", "dep_lot_of", "np_head", "np_head_lot_of")


# ----------------------------------------------------------------------------- cache key
def test_cache_key_follows_rule_code(nlp: Any, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "blimp").mkdir()
    (tmp_path / "README.md").write_text("tiny copy\n")
    name = D.BLIMP_AGREEMENT_SUBSETS["dna"]
    lines = (REPO_DATA / "blimp" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    (tmp_path / "blimp" / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv(D.DATA_ENV_VAR, str(tmp_path))
    monkeypatch.setenv(D.CACHE_ENV_VAR, str(tmp_path / "cache"))
    first = D.annotate_blimp(["dna"], progress=False, nlp=nlp)
    assert len(D.annotation_rules_hash()) == 16
    cache_file = D.annotation_cache_file("dna")
    # the annotation is stored in that one file, whose key is the rules' hash
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [cache_file.name]
    assert D.annotation_cache_file("dna", rules_hash=D.annotation_rules_hash()) == cache_file

    class Unusable:  # a pipeline that fails when used: a result with it comes from the cache
        def pipe(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("spaCy was used")
    assert D.annotate_blimp(["dna"], progress=False, nlp=Unusable()) == json.loads(json.dumps(first))
    # edited rules give another cache file, which does not exist: the pair would be parsed again
    edited = D.annotation_cache_file("dna", rules_hash="edited-rules")
    assert edited != cache_file and not edited.exists()
