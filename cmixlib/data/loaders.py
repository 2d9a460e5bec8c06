"""The data folder and the raw dataset loaders.

Owns where the datasets are found (:func:`data_dir`, :func:`data_file`), the errors raised for a
missing or malformed file, the small file readers, and one loader per dataset:
:func:`load_sst2`, :func:`load_mnli`, :func:`load_hatexplain`, :func:`load_linzen` and
:func:`load_blimp`. Each loader returns a pandas DataFrame in file order; nothing here tokenizes.

Data files live in the repository's ``data/`` folder (one sub-folder per dataset, each with a
README giving source, license and format). Where the folder is looked for, in order:

1. the environment variable ``CMIX_DATA`` (must point to an existing folder);
2. ``data/`` next to the ``cmixlib`` package (a clone, or an editable install);
3. ``data/`` in the current working directory or one of its parents (a non-editable
   ``pip install`` run from inside a clone).

A missing or malformed file raises :class:`DataFileNotFoundError` or :class:`MalformedDataError`;
both messages name the file and say what to do.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import pandas as pd

#: Environment variable naming the data folder (first place :func:`data_dir` looks).
DATA_ENV_VAR = "CMIX_DATA"

#: Short ids (as in the Value Zeroing paper, Table 1) -> BLiMP paradigm file names.
BLIMP_AGREEMENT_SUBSETS: dict[str, str] = {
    "ana": "anaphor_number_agreement",
    "dna": "determiner_noun_agreement_2",
    "dnaa": "determiner_noun_agreement_with_adj_2",
    "darn": "distractor_agreement_relational_noun",
    "rpsv": "regular_plural_subject_verb_agreement_1",
}

SST2_SPLITS = ("train", "dev", "test")

HATEXPLAIN_SPLITS = ("train", "val", "test")

HATEXPLAIN_LABELS = ("normal", "hatespeech", "offensive")

#: GLUE / Hugging Face label ids for MNLI.
MNLI_LABEL2ID = {"entailment": 0, "neutral": 1, "contradiction": 2}


# --------------------------------------------------------------------------------------------
# errors and paths
# --------------------------------------------------------------------------------------------
class DataError(RuntimeError):
    """Base class of the errors raised by :mod:`cmixlib.data`."""


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
    here = Path(__file__).resolve().parents[2] / "data"  # cmixlib/data/loaders.py -> repo
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


def data_file(*parts: str) -> Path:
    """The file ``data_dir()/parts[0]/parts[1]/...``; raises :class:`DataFileNotFoundError` (naming
    the file and how to restore it) when it is missing. Honours ``CMIX_DATA``."""
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


def read_jsonl(path: Path, required: Sequence[str]) -> list[dict]:
    """The rows of a JSON-lines file (blank lines skipped), each a dict with every key of
    ``required``; a :class:`MalformedDataError` naming the line otherwise."""
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
    """GLUE SST-2 as a DataFrame with columns ``sentence`` (str) and ``label`` (int, or None).

    ``split`` is ``"dev"`` (872 sentences, the GLUE validation set used by GlobEnc), ``"train"``
    (67,349 phrases) or ``"test"`` (1,821 sentences, **unlabelled**: ``label`` is None; the
    split ALTI's experiments draw from). The labels are 0 = negative, 1 = positive. Sentences are
    lower-cased and PTB-tokenised as in GLUE; the trailing space GLUE leaves before the tab is
    stripped. Row order follows the file.
    """
    if split not in SST2_SPLITS:
        raise ValueError(f"split must be one of {SST2_SPLITS}, not {split!r}")
    path = data_file("sst2", f"{split}.tsv")
    lines = _read_lines(path)
    header, form = (("index\tsentence", "'index<TAB>sentence'") if split == "test"
                    else ("sentence\tlabel", "'sentence<TAB>0|1'"))
    if not lines or lines[0].rstrip("\r") != header:
        raise MalformedDataError(f"{path}: the first line must be the header {header!r}. "
                                 "Restore the file from git.")
    sentences, labels = [], []
    for n, line in enumerate(lines[1:], start=2):
        parts = line.rstrip("\r").split("\t")
        ok = len(parts) == 2 and (parts[0].isdigit() if split == "test" else parts[1] in ("0", "1"))
        if not ok:
            raise MalformedDataError(f"{path}, line {n}: expected {form}, got {line[:80]!r}. "
                                     "Restore the file from git.")
        if split == "test":
            sentences.append(parts[1].strip())
            labels.append(None)
        else:
            sentences.append(parts[0].strip())
            labels.append(int(parts[1]))
    return pd.DataFrame({"sentence": sentences, "label": pd.Series(labels, dtype=object)
                         if split == "test" else labels})


def load_mnli() -> pd.DataFrame:
    """MultiNLI dev-matched (9,815 pairs): columns ``premise``, ``hypothesis``, ``label``.

    ``label`` is the gold label as a string (``entailment``, ``neutral``, ``contradiction``); use
    :data:`MNLI_LABEL2ID` for the GLUE / Hugging Face ids. Text is kept as in the file (including
    stray trailing spaces). Row order follows GLUE dev_matched.
    """
    path = data_file("mnli", "dev_matched.jsonl")
    rows = read_jsonl(path, ("premise", "hypothesis", "label"))
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
    path = data_file("hatexplain", f"{split}.json")
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
    text_path = data_file("linzen_agreement", "subj_agr_filtered.text")
    gold_path = data_file("linzen_agreement", "subj_agr_filtered.gold")
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
    path = data_file("blimp", f"{name}.jsonl")
    return pd.DataFrame(read_jsonl(path, ("sentence_good", "sentence_bad", "pairID")))
