"""Tokenized inputs for the ALTI / GlobEnc evaluations.

Owns :func:`load_sst2_inputs` (SST-2 sentences, the classification token as target) and
:func:`load_sva` (subject-verb agreement from the Linzen data, verb masked).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from cmixlib.data.blimp_rules import verb_number
from cmixlib.data.loaders import load_linzen, load_sst2
from cmixlib.data.words import encode_words_batch, single_token_id


def load_sst2_inputs(tokenizer: Any, split: str = "dev", limit: int | None = None,
                     max_length: int | None = None) -> list[dict]:
    """SST-2 sentences tokenized for attribution, in file order.

    Each dict has ``idx`` (row in the file), ``sentence``, ``label`` (0/1; None for the unlabelled
    ``"test"`` split), ``input_ids`` (with
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
        out.append({"idx": idx, "sentence": sentence, "label": None if label is None else int(label),
                    "input_ids": list(ids),
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
        label = verb_number(good, bad)
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
        target_id = single_token_id(tokenizer, enc, vi)
        foil_id = single_token_id(tokenizer, enc_bad, vi)
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
