"""BLiMP agreement annotation rules: target word, label and cue of one minimal pair.

Owns the word-level rules that :func:`~cmixlib.data.annotate_blimp` runs on each pair of the five
paradigms, given a spaCy parse of the good sentence:

* :func:`~cmixlib.data.blimp_terms.expand_contractions` (``doesn't`` -> ``does not``) before
  parsing;
* the label: :func:`_label_for` (determiner / reflexive tables, :func:`_verb_number` for verbs);
* the cue, one rule per subset (:data:`_CUE_RULES`): :func:`_sva_cue` (rpsv, darn),
  :func:`_det_cue` (dna, dnaa), :func:`_anaphor_cue` (ana), with their helpers;
* :func:`_annotate_rows`, which applies them to parsed pairs and sets the drop reasons.

The source code of these functions is hashed by :func:`annotation_rules_hash`, which keys the
on-disk annotation cache, so an edited rule never reuses an old annotation. A rename changes the
hash too: that is why the rules keep their private names and the public entry points below wrap
them. Public: :func:`annotate_pair` (one constructed pair), :func:`cue_for` (the cue rule on a
given Doc, e.g. a hand-built parse), :func:`noun_number`, :func:`verb_number`,
:func:`annotate_rows` (what :func:`~cmixlib.data.annotate_blimp` caches),
:data:`ANNOTATION_VERSION`, :func:`annotation_rules_hash`; the terms they use (:class:`Cue`,
:data:`SINGULAR`, :data:`PLURAL`, :func:`expand_contractions`) are :mod:`.blimp_terms`.
"""
from __future__ import annotations

import hashlib
from typing import Any

from cmixlib.data.blimp_terms import PLURAL, SINGULAR, Cue, expand_contractions

#: Bump when the BLiMP annotation rules change: old cache files are then ignored.
ANNOTATION_VERSION = "blimp-agreement-v4"

# Number of the words that decide each label (lower-case).
_DETERMINER_NUMBER = {"this": SINGULAR, "that": SINGULAR, "these": PLURAL, "those": PLURAL}

_REFLEXIVE_NUMBER = {"himself": SINGULAR, "herself": SINGULAR, "itself": SINGULAR,
                     "themselves": PLURAL}

_AUX_NUMBER = {"is": SINGULAR, "was": SINGULAR, "has": SINGULAR, "does": SINGULAR,
               "are": PLURAL, "were": PLURAL, "have": PLURAL, "do": PLURAL}

_SUBJECT_DEPS = ("nsubj", "nsubjpass")

# Dependents of the antecedent's head noun that belong to the cue phrase (anaphor subset).
_NP_MODIFIER_DEPS = ("det", "predet", "nummod", "amod", "compound", "quantmod")

def _verb_number(good: str, bad: str) -> str | None:
    """Number of the grammatical verb form ``good`` given its swapped form ``bad``.

    be/have/do forms come from a fixed table (is/was/has/does singular; are/were/have/do plural).
    Other verbs: the third-person ``-s`` form is singular, i.e. ``good`` is singular when it is
    ``bad`` + ``s``/``es`` or ``bad`` with final ``y`` -> ``ies``, and plural in the mirror case.
    Anything else returns None (the example is dropped).
    """
    g, b = good.lower(), bad.lower()
    if g in _AUX_NUMBER and b in _AUX_NUMBER and _AUX_NUMBER[g] != _AUX_NUMBER[b]:
        return _AUX_NUMBER[g]

    def is_s_form(s: str, base: str) -> bool:
        return s in (base + "s", base + "es") or (base.endswith("y") and s == base[:-1] + "ies")
    if is_s_form(g, b):
        return SINGULAR
    if is_s_form(b, g):
        return PLURAL
    return None


def _first_noun(doc: Any, t: Any) -> Any:
    """Head of the sentence-initial noun phrase (fallback of the anaphor rule: in the BLiMP
    templates used here the subject is always the first noun phrase): the first token before ``t``
    that is not a determiner, adjective, numeral or punctuation. Part-of-speech tags are not
    trusted further than that, because the tagger sometimes tags a sentence-initial name as an
    adverb."""
    for tok in doc[:t.i]:
        if tok.pos_ not in ("DET", "ADJ", "NUM", "PUNCT"):
            return tok
    return None


def _quantified_noun(subj: Any) -> Any:
    """For ``a lot of N`` / ``lots of N`` return the noun N (which carries the number), else None."""
    if subj.lower_ not in ("lot", "lots"):
        return None
    for prep in subj.children:
        if prep.dep_ == "prep" and prep.lower_ == "of":
            for pobj in prep.children:
                if pobj.dep_ == "pobj":
                    return _compound_head(pobj)
    return None


def _find_subject(doc: Any, t: Any, start: Any) -> tuple[Any, str | None]:
    """Subject for target ``t``: the nsubj/nsubjpass child of ``start`` or, walking up the
    dependency heads from ``start``, of the closest ancestor that has one (rule ``dep``); else the
    first noun / pronoun of the sentence (rule ``first_noun``). Used by the anaphor rule only."""
    node = start
    while True:
        cands = [c for c in node.children if c.dep_ in _SUBJECT_DEPS and c.i != t.i]
        if cands:
            return cands[0], "dep"
        if node.head.i == node.i:
            break
        node = node.head
    tok = _first_noun(doc, t)
    return (tok, "first_noun") if tok is not None else (None, None)


_Cue = Cue  # the rules' source (hashed, see annotation_rules_hash) spells it _Cue


_NOUN_TAGS = ("NN", "NNS", "NNP", "NNPS")

_PLURAL_TAGS = ("NNS", "NNPS")

# plural nouns without a final -s that occur in the BLiMP vocabulary
_IRREGULAR_PLURALS = frozenset({"people", "children", "men", "women", "mice", "geese", "teeth",
                                "feet", "oxen", "cacti", "fungi", "alumni", "bacteria", "police",
                                "fish", "sheep", "deer"})

# nouns in -s that also take a singular verb (besides every noun in -ics: politics, physics)
_NUMBER_AMBIGUOUS = frozenset({"news", "series", "species", "means", "headquarters", "athletics"})

_LOT_WORDS = ("lot", "lots")

# parts of speech that cannot head a subject noun phrase (a verb can: the tagger reads the noun
# ``reports`` in ``The radio reports about ...`` as a verb, while the parse and position agree)
_FUNCTION_POS = ("DET", "ADP", "SCONJ", "CCONJ", "PART", "PUNCT", "AUX", "NUM")


def _compound_head(tok: Any) -> Any:
    """Follow ``compound`` relations to the right: in ``train station`` the head is ``station``."""
    while tok.dep_ == "compound" and tok.head.i > tok.i and tok.head.tag_ in _NOUN_TAGS:
        tok = tok.head
    return tok


def _noun_number(tok: Any) -> str | None:
    """Number of the noun ``tok`` when the tagger and the word form agree, else None.

    The tag (NN/NNP singular, NNS/NNPS plural; spaCy morphology ``Number`` for other tags) must
    agree with the form (a final ``-s``, not ``-ss``/``-us``/``-is``, or a listed irregular plural,
    reads plural; anything else singular). Names such as ``James`` (NNP, final ``s``), a plural
    tagged NN, and nouns in ``-s`` that may be singular (``politics``, ``news``) give None: no
    judgement is made on them.
    """
    if tok.tag_ in _NOUN_TAGS:
        by_tag = PLURAL if tok.tag_ in _PLURAL_TAGS else SINGULAR
    else:
        morph = tok.morph.get("Number")
        by_tag = {"Sing": SINGULAR, "Plur": PLURAL}.get(morph[0]) if morph else None
    w = tok.lower_
    if w.endswith("ics") or w in _NUMBER_AMBIGUOUS:  # "Politics was ...", "The news is ..."
        return None
    plural_form = w in _IRREGULAR_PLURALS or (w.endswith("s")
                                              and not w.endswith(("ss", "us", "is")))
    by_form = PLURAL if plural_form else SINGULAR
    return by_tag if by_tag == by_form else None


def _base_np_end(doc: Any, start: int, stop: int) -> int:
    """End (exclusive) of the base noun phrase ``doc[start:stop]``: the first preposition after
    ``start`` (tag ``IN`` or ``TO``, or part of speech ``ADP``) or ``stop``."""
    for k in range(start + 1, stop):
        if doc[k].tag_ in ("IN", "TO") or doc[k].pos_ == "ADP":
            return k
    return stop


def _positional_subject(doc: Any, t: Any) -> tuple[Any, bool, bool]:
    """Head of the sentence-initial subject noun phrase of the target verb ``t``, found by
    position (the BLiMP sva templates put the subject first, before the verb or auxiliary).

    The subject is the base noun phrase starting the sentence (up to the first preposition: ``The
    radio reports`` in ``The radio reports about the storm worry ...``); its head is its last
    word. In ``a lot of N`` / ``lots of N`` the head is the last word of N's base noun phrase.
    Returns ``(head, trusted, quantified)``; ``head`` is None when there is no word before ``t``.
    ``trusted`` is False when the tags contradict this reading: a word of the base phrase is
    tagged as a verb or modal, or the head is not tagged as a noun or pronoun (a one-word,
    capitalised subject such as a name is accepted under any tag but a verb or function-word one,
    since the tagger sometimes tags a sentence-initial name as an adverb or adjective).
    """
    if t.i == 0:
        return None, False, False
    end = _base_np_end(doc, 0, t.i)
    start, quantified = 0, False
    if doc[end - 1].lower_ in _LOT_WORDS and end + 1 < t.i and doc[end].lower_ == "of":
        start, quantified = end + 1, True
        end = _base_np_end(doc, start, t.i)
    base = doc[start:end]
    head = base[-1]
    if any(w.tag_.startswith("VB") or w.tag_ == "MD" for w in base):
        return head, False, quantified
    if head.tag_ in (*_NOUN_TAGS, "PRP"):
        return head, True, quantified
    one_word_name = (len(base) == 1 and head.is_alpha and head.text[0].isupper()
                     and head.pos_ not in (*_FUNCTION_POS, "VERB"))
    return head, one_word_name, quantified


def _sva_cue(doc: Any, t: Any) -> _Cue:
    """Subject head noun of the target verb/auxiliary ``t`` (rpsv, darn).

    * ``dep``: the nsubj/nsubjpass child of ``t`` (of the verb ``t`` attaches to when ``t`` is an
      auxiliary) to the left of ``t``, not a determiner or other function word (``All`` in a
      misparsed ``All drivers ...``), followed to the head of its compound; ``dep_lot_of`` when
      that subject is ``lot`` in ``a lot of N`` (cue N). The subject must be the head found by
      position (:func:`_positional_subject`), else the pair is dropped (``unreliable_parse``);
    * ``np_head`` / ``np_head_lot_of``: with no such direct subject (e.g. the verb tagged as a
      noun, so the parser builds one long noun phrase), the positional head when its tags
      support it (``trusted``), else the pair is dropped (``unreliable_parse``).

    :func:`_annotate_rows` then drops the pair with ``blimp_label_error`` when the cue's number
    (:func:`_noun_number`) is known and differs from the good verb's number (the label): BLiMP's
    "good" sentence is then ungrammatical itself.
    """
    verb = t.head if t.dep_ in ("aux", "auxpass") and t.head.i != t.i else t
    pos_head, trusted, quantified = _positional_subject(doc, t)
    subj = next((c for c in verb.children if c.dep_ in _SUBJECT_DEPS and c.i < t.i
                 and c.pos_ not in _FUNCTION_POS), None)
    if subj is not None:
        noun = _quantified_noun(subj)
        head, rule = (noun, "dep_lot_of") if noun is not None else (_compound_head(subj), "dep")
        if pos_head is None or pos_head.i != head.i:
            return _Cue(None, None, "unreliable_parse")
        return _Cue([head.i], rule)
    if pos_head is None or not trusted:
        return _Cue(None, None, "unreliable_parse")
    return _Cue([pos_head.i], "np_head_lot_of" if quantified else "np_head")


def _det_cue(doc: Any, t: Any) -> _Cue:
    """Head noun of the noun phrase that the determiner ``t`` introduces (dna, dnaa).

    * ``dep``: the determiner's dependency head, a noun to the right of ``t``; in a compound the
      cue is the compound's head (``that old train station`` -> ``station``, rule
      ``dep_compound_head``);
    * ``next_noun``: otherwise the first noun after the determiner, again followed to the head of
      its compound (``next_noun_compound_head``).
    """
    head, rule = t.head, "dep"
    if not (head.i > t.i and head.pos_ in ("NOUN", "PROPN")):
        head = next((tok for tok in doc[t.i + 1:] if tok.pos_ in ("NOUN", "PROPN")), None)
        rule = "next_noun"
        if head is None:
            return _Cue(None, None, "cue_not_found")
    top = _compound_head(head)
    if top.i != head.i:
        rule += "_compound_head"
    return _Cue([top.i], rule)


def _anaphor_cue(doc: Any, t: Any) -> _Cue:
    """Antecedent phrase of the reflexive ``t``: the subject of the closest clause above ``t``
    (see :func:`_find_subject`, starting at the reflexive's head), as the subject noun plus its
    det/predet/nummod/amod/compound/quantmod dependents to its left (possessors, prepositional and
    relative modifiers are left out). For ``a lot of N`` the phrase is the span ``a lot of N``.
    With the ``first_noun`` fallback (parse without a subject), the phrase is the
    first noun with the determiners, adjectives and numerals right before it."""
    subj, rule = _find_subject(doc, t, t.head)
    if subj is None:
        return _Cue(None, None, "cue_not_found")
    noun = _quantified_noun(subj)
    if noun is not None:
        return _Cue(sorted(set(range(subj.left_edge.i, noun.i + 1))), rule)
    if rule == "first_noun":
        idx = [subj.i]
        k = subj.i - 1
        while k >= 0 and doc[k].pos_ in ("DET", "ADJ", "NUM"):
            idx.insert(0, k)
            k -= 1
        return _Cue(idx, rule)
    mods = [c.i for c in subj.children if c.dep_ in _NP_MODIFIER_DEPS and c.i < subj.i]
    return _Cue(sorted(mods + [subj.i]), rule)


_CUE_RULES = {"ana": _anaphor_cue, "dna": _det_cue, "dnaa": _det_cue, "darn": _sva_cue,
              "rpsv": _sva_cue}

#: Subsets whose target is a verb agreeing with its subject (checked for BLiMP label errors).
_SVA_SUBSETS = ("darn", "rpsv")

#: Functions whose source code is part of the annotation cache key (see :func:`annotate_blimp`).
_RULE_FUNCTIONS = (_first_noun, _quantified_noun, _find_subject, _compound_head, _noun_number,
                   _base_np_end, _positional_subject, _sva_cue, _det_cue, _anaphor_cue,
                   _verb_number, expand_contractions)


def _label_for(uid: str, target: str, foil: str) -> str | None:
    if uid == "ana":
        return _REFLEXIVE_NUMBER.get(target.lower())
    if uid in ("dna", "dnaa"):
        return _DETERMINER_NUMBER.get(target.lower())
    return _verb_number(target, foil)


def _annotate_rows(uid: str, rows: list[dict], nlp, progress: bool) -> list[dict]:
    from tqdm.auto import tqdm

    goods = [expand_contractions(r["sentence_good"]) for r in rows]
    bads = [expand_contractions(r["sentence_bad"]) for r in rows]
    docs = nlp.pipe(goods, batch_size=256)
    out = []
    for row, good, bad, doc in tqdm(zip(rows, goods, bads, docs), total=len(rows), disable=not progress,
                                    desc=f"spaCy parse {uid}", leave=False):
        words = [t.text for t in doc]
        bad_words = [t.text for t in nlp.tokenizer(bad)]
        rec = {"uid": uid, "pair_id": int(row["pairID"]), "sentence_good": good, "sentence_bad": bad,
               "words": words, "spaces": [bool(t.whitespace_) for t in doc],
               "target_word_index": None, "target_word": None, "foil_word": None,
               "cue_word_indices": None, "cue_rule": None, "label": None, "drop_reason": None}
        diff = [i for i, (a, b) in enumerate(zip(words, bad_words)) if a != b]
        if len(words) != len(bad_words) or len(diff) != 1:
            rec["drop_reason"] = "not_one_word_apart"
            out.append(rec)
            continue
        ti = diff[0]
        rec.update(target_word_index=ti, target_word=words[ti], foil_word=bad_words[ti])
        label = _label_for(uid, words[ti], bad_words[ti])
        cue = _CUE_RULES[uid](doc, doc[ti])
        if label is None:
            rec["drop_reason"] = "label_unknown"
        elif not cue.indices:
            rec["drop_reason"] = cue.drop_reason or "cue_not_found"
        else:
            cues = [c for c in cue.indices if c != ti]
            rec.update(label=label, cue_word_indices=cues, cue_rule=cue.rule)
            if not cues:
                rec["drop_reason"] = "cue_not_found"
            elif uid in _SVA_SUBSETS and _noun_number(doc[cues[-1]]) not in (None, label):
                rec["drop_reason"] = "blimp_label_error"
        out.append(rec)
    return out


def annotation_rules_hash() -> str:
    """SHA-256 (hex, 16 characters) of the source code of the BLiMP annotation rules and of
    _annotate_rows; part of the annotation cache key, so an edited rule never reuses an old
    cached annotation even when :data:`ANNOTATION_VERSION` was not bumped."""
    import inspect
    try:
        parts = [inspect.getsource(f) for f in (*_RULE_FUNCTIONS, _annotate_rows, _label_for)]
    except (OSError, TypeError):  # pragma: no cover - installed without source files
        parts = [ANNOTATION_VERSION]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# public entry points (the rules above keep their private names: see the module docstring)
# --------------------------------------------------------------------------------------------
def _rule(subset: str) -> Any:
    if subset not in _CUE_RULES:
        raise ValueError(f"unknown BLiMP agreement subset {subset!r}; use one of {list(_CUE_RULES)}")
    return _CUE_RULES[subset]


def annotate_pair(subset: str, good: str, bad: str, nlp: Any, pair_id: int = 0) -> dict:
    """Annotate one minimal pair exactly as :func:`~cmixlib.data.annotate_blimp` annotates each
    pair of ``subset`` (``ana``, ``dna``, ``dnaa``, ``darn`` or ``rpsv``), with the spaCy pipeline
    ``nlp`` (e.g. :func:`~cmixlib.data.load_spacy`). Returns one record of the same form
    (``drop_reason`` None when the pair is usable); nothing is cached."""
    _rule(subset)
    rows = [{"pairID": pair_id, "sentence_good": good, "sentence_bad": bad}]
    return _annotate_rows(subset, rows, nlp, progress=False)[0]


def cue_for(doc: Any, target_index: int, subset: str) -> Cue:
    """Run the cue rule of ``subset`` on a parsed sentence: ``doc`` is a spaCy ``Doc`` (from a
    pipeline, or built by hand with fixed tags, dependencies and heads to reproduce a parser
    mistake), ``target_index`` the position of the target word (verb, determiner or reflexive).
    The rules: :func:`_sva_cue` (rpsv, darn), :func:`_det_cue` (dna, dnaa), :func:`_anaphor_cue`
    (ana)."""
    return _rule(subset)(doc, doc[target_index])


def verb_number(good: str, bad: str) -> str | None:
    """:data:`SINGULAR` or :data:`PLURAL`: the number of the grammatical verb form ``good`` given
    its swapped form ``bad`` (``is``/``are``, ``walks``/``walk``), else None (the rule
    :func:`_verb_number` that labels the verb paradigms; the SVA inputs use it too)."""
    return _verb_number(good, bad)


def annotate_rows(uid: str, rows: list[dict], nlp: Any, progress: bool) -> list[dict]:
    """One record per pair of ``rows`` (``pairID``, ``sentence_good``, ``sentence_bad``) of subset
    ``uid``, parsed with ``nlp`` (the rule :func:`_annotate_rows`; what
    :func:`~cmixlib.data.annotate_blimp` caches)."""
    return _annotate_rows(uid, rows, nlp, progress)


def noun_number(token: Any) -> str | None:
    """:data:`SINGULAR` or :data:`PLURAL` for a spaCy noun token when its tag and its word form
    agree, else None (the check behind the ``blimp_label_error`` drop; see :func:`_noun_number`)."""
    return _noun_number(token)
