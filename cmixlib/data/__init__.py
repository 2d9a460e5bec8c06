"""Datasets and evaluation inputs for the book: ``from cmixlib import data`` then ``data.X``.

Everything here returns plain Python objects or pandas DataFrames. What is where:

* :mod:`.loaders`: the data folder (:func:`data_dir`, :func:`data_file`, the ``CMIX_DATA``
  environment variable, the errors for missing or malformed files) and the raw loaders
  :func:`load_sst2`, :func:`load_mnli`, :func:`load_hatexplain`, :func:`load_linzen`,
  :func:`load_blimp`;
* :mod:`.words`: word -> sub-token mapping for any Hugging Face tokenizer
  (:func:`encode_words`, :func:`encode_words_batch`, :class:`EncodedWords`,
  :func:`single_token_id`);
* :mod:`.blimp_rules`: the spaCy rules that find target, label and cue of one BLiMP pair
  (:func:`annotate_pair`, :func:`cue_for`, :func:`noun_number`; :func:`annotation_rules_hash`
  keys the annotation cache by their source code), on the terms of :mod:`.blimp_terms`
  (:func:`expand_contractions`, :class:`Cue`, :data:`SINGULAR`, :data:`PLURAL`);
* :mod:`.blimp`: the Value Zeroing agreement set built from five BLiMP paradigms:
  :func:`annotate_blimp` (word level, cached on disk), :func:`load_blimp_agreement` (tokenizer
  level, with the train/test split), :func:`blimp_agreement_counts` and
  :func:`blimp_annotation_audit`;
* :mod:`.inputs`: tokenized inputs for the ALTI / GlobEnc evaluations, :func:`load_sst2_inputs`
  and :func:`load_sva`.

Seams for tests and experiments: ``CMIX_DATA`` (another data folder), ``CMIX_CACHE`` (another
cache folder), ``nlp=`` (a loaded spaCy pipeline) on the BLiMP functions.
"""
from __future__ import annotations

from cmixlib.cache import CACHE_ENV_VAR
from cmixlib.cache import cache_root as cache_dir
from cmixlib.data.blimp import (PAPER_BLIMP_AGREEMENT_TOTAL, SPACY_MODEL, annotate_blimp,
                                annotation_cache_file, blimp_agreement_counts,
                                blimp_annotation_audit, load_blimp_agreement, load_spacy)
from cmixlib.data.blimp_rules import (ANNOTATION_VERSION, annotate_pair, annotation_rules_hash,
                                      cue_for, noun_number)
from cmixlib.data.blimp_terms import PLURAL, SINGULAR, Cue, expand_contractions
from cmixlib.data.inputs import load_sst2_inputs, load_sva
from cmixlib.data.hatexplain import load_hatexplain_rationale_inputs, load_hatexplain_rationales  # noqa: F401
from cmixlib.data.loaders import (BLIMP_AGREEMENT_SUBSETS, DATA_ENV_VAR, HATEXPLAIN_LABELS,
                                  HATEXPLAIN_SPLITS, MNLI_LABEL2ID, SST2_SPLITS, DataError,
                                  DataFileNotFoundError, MalformedDataError, data_dir, data_file,
                                  load_blimp, load_hatexplain, load_linzen, load_mnli, load_sst2)
from cmixlib.data.words import EncodedWords, encode_words, encode_words_batch, single_token_id

__all__ = [
    "ANNOTATION_VERSION", "BLIMP_AGREEMENT_SUBSETS", "CACHE_ENV_VAR", "Cue", "DATA_ENV_VAR",
    "DataError", "DataFileNotFoundError", "EncodedWords", "HATEXPLAIN_LABELS", "HATEXPLAIN_SPLITS",
    "MNLI_LABEL2ID", "MalformedDataError", "PAPER_BLIMP_AGREEMENT_TOTAL", "PLURAL", "SINGULAR",
    "SPACY_MODEL", "SST2_SPLITS", "annotate_blimp", "annotate_pair", "annotation_cache_file",
    "annotation_rules_hash", "blimp_agreement_counts", "blimp_annotation_audit", "cache_dir",
    "cue_for", "data_dir", "data_file", "encode_words", "encode_words_batch",
    "expand_contractions", "load_blimp", "load_blimp_agreement", "load_hatexplain",
    "load_hatexplain_rationale_inputs", "load_hatexplain_rationales", "load_linzen",
    "load_mnli", "load_spacy", "load_sst2", "load_sst2_inputs", "load_sva", "noun_number",
    "single_token_id",
]
