"""HateXplain with its annotators' rationales (val and test splits), for plausibility.

Owns :func:`load_hatexplain_rationales` (the raw posts, one row per post, with the majority
label and the majority rationale) and :func:`load_hatexplain_rationale_inputs` (the same posts
tokenized for attribution, every word mapped to its sub-tokens). The files are
``data/hatexplain/rationales_{val,test}.jsonl`` (Hugging Face's conversion of HateXplain's
``dataset.json``; see data/hatexplain/README.md). **The text is offensive.**

Rules, written down once:

* **majority label**: the label given by at least 2 of a post's 3 annotators (HateXplain keeps no
  post without one in its splits); class ids are those of the committed classifier and of the
  file: 0 hatespeech, 1 normal, 2 offensive (:data:`RATIONALE_LABELS`);
* **ground-truth rationale**: word w is in it when more than half of the post's annotators marked
  it, :math:`r_w = [\\,2 \\sum_a m_{aw} > A\\,]` with :math:`m_{aw}` annotator a's 0/1 mark and
  A the number of annotators (3). Only annotators who did not label the post ``normal`` give a
  rationale, so with two rationales both must mark the word, with three any two. Posts whose
  majority label is ``normal`` have no rationale.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from cmixlib.data.loaders import MalformedDataError, read_jsonl, data_file
from cmixlib.data.words import encode_words_batch

__all__ = ["RATIONALE_SPLITS", "RATIONALE_LABELS", "load_hatexplain_rationales",
           "load_hatexplain_rationale_inputs", "majority_rationale"]

#: Splits with rationales in data/hatexplain/ (HateXplain's train rationales are not shipped).
RATIONALE_SPLITS = ("val", "test")
#: Class ids of the rationale files (and of ``cmixlib.load_classifier("hatexplain")``).
RATIONALE_LABELS = ("hatespeech", "normal", "offensive")
_ALIASES = {"validation": "val", "dev": "val"}


def _check_split(split: Any) -> str:
    if not isinstance(split, str):
        raise TypeError(f"split must be a string, one of {RATIONALE_SPLITS}; got {type(split).__name__}.")
    name = _ALIASES.get(split, split)
    if name not in RATIONALE_SPLITS:
        raise ValueError(f"split must be one of {RATIONALE_SPLITS} (or 'validation'/'dev'), not "
                         f"{split!r}: HateXplain's train rationales are not shipped.")
    return name


def majority_rationale(marks: list[list[int]], n_annotators: int) -> list[int]:
    r"""The ground-truth rationale of one post: :math:`r_w = [\,2\sum_a m_{aw} > A\,]`, ``marks``
    one 0/1 list per annotator who gave a rationale, ``A = n_annotators`` (all the post's
    annotators, also those who gave none). Empty ``marks`` gives an empty list."""
    if not isinstance(n_annotators, int) or n_annotators < 1:
        raise ValueError(f"n_annotators must be an integer >= 1, got {n_annotators!r}")
    if not marks:
        return []
    if len({len(m) for m in marks}) != 1:
        raise ValueError("every annotator's marks must have one entry per word")
    return [int(2 * sum(col) > n_annotators) for col in zip(*marks)]


def load_hatexplain_rationales(split: str = "test") -> pd.DataFrame:
    """HateXplain posts of ``split`` (``"val"``/``"validation"``/``"dev"`` or ``"test"``), in file
    order (= the official ``post_id_divisions.json`` order): columns ``id``, ``post_tokens``
    (words), ``annotator_labels`` (list of ids), ``label`` (majority class id, see the module
    docstring), ``label_name``, ``marks`` (one 0/1 list per annotator who gave a rationale) and
    ``rationale`` (the majority rationale, one 0/1 per word; empty for ``normal`` posts)."""
    split = _check_split(split)
    path = data_file("hatexplain", f"rationales_{split}.jsonl")
    rows = []
    for n, row in enumerate(read_jsonl(path, ("id", "annotators", "rationales", "post_tokens")), 1):
        words, labels = row["post_tokens"], (row["annotators"] or {}).get("label")
        if (not isinstance(words, list) or not labels
                or any(len(m) != len(words) for m in row["rationales"])):
            raise MalformedDataError(f"{path}, line {n}: expected post_tokens, annotators.label and "
                                     "one mark per word in every rationale. Restore the file from git.")
        top = max(set(labels), key=labels.count)
        if labels.count(top) * 2 <= len(labels) or top not in range(len(RATIONALE_LABELS)):
            raise MalformedDataError(f"{path}, line {n}: post {row['id']} has no majority label.")
        rows.append({"id": row["id"], "post_tokens": list(words), "annotator_labels": list(labels),
                     "label": int(top), "label_name": RATIONALE_LABELS[top],
                     "marks": [list(map(int, m)) for m in row["rationales"]],
                     "rationale": majority_rationale(row["rationales"], len(labels))})
    return pd.DataFrame(rows)


def load_hatexplain_rationale_inputs(tokenizer: Any, split: str = "test", limit: int | None = None,
                                     *, only_rationales: bool = True,
                                     max_length: int = 512) -> list[dict]:
    """Posts of ``split`` tokenized for attribution (the words joined by single spaces, as the
    classifier was trained: :func:`cmixlib.data.encode_words_batch`), in file order.

    Each dict has ``idx`` (row of :func:`load_hatexplain_rationales`), ``id``, ``post_tokens``,
    ``label`` (majority class id), ``label_name``, ``rationale`` (one 0/1 per word), ``input_ids``
    (with ``[CLS]``/``[SEP]``), ``word_to_tokens`` (the sub-token positions of each word; special
    tokens belong to no word), ``word_ids`` (per sub-token: its word, -1 for special tokens) and
    ``target_index`` 0 (the ``[CLS]`` row is attributed). ``only_rationales`` (default) keeps the
    posts whose majority rationale marks at least one word (the hateful and offensive posts less
    those where no word has a majority); ``limit`` keeps the first ``limit`` of those; posts of more
    than ``max_length`` sub-tokens are dropped (none in val or test at 512)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be None or an integer >= 1, got {limit!r}")
    if not isinstance(only_rationales, bool):
        raise TypeError(f"only_rationales must be True or False, got {only_rationales!r}")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 3:
        raise ValueError(f"max_length must be an integer >= 3, got {max_length!r}")
    if tokenizer is None or not callable(tokenizer):
        raise TypeError("tokenizer must be a Hugging Face tokenizer (callable), got "
                        f"{type(tokenizer).__name__}")
    df = load_hatexplain_rationales(split)
    keep = [i for i, r in enumerate(df["rationale"]) if not only_rationales or sum(r) > 0]
    encoded = encode_words_batch(tokenizer, [df["post_tokens"][i] for i in keep])
    out = []
    for i, enc in zip(keep, encoded):
        if limit is not None and len(out) >= limit:
            break
        if len(enc.input_ids) > max_length:
            continue
        word_ids = [-1] * len(enc.input_ids)
        for w, positions in enumerate(enc.word_to_tokens):
            for k in positions:
                word_ids[k] = w
        row = df.iloc[i]
        out.append({"idx": i, "id": row["id"], "post_tokens": list(row["post_tokens"]),
                    "label": int(row["label"]), "label_name": row["label_name"],
                    "rationale": list(row["rationale"]), "input_ids": list(enc.input_ids),
                    "word_to_tokens": [list(p) for p in enc.word_to_tokens], "word_ids": word_ids,
                    "target_index": 0})
    return out
