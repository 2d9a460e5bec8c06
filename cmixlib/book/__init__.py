"""The book: what the chapters need beside the library (presentation only; no computing module
imports it, so editing it never changes a result's code version).

- :mod:`~cmixlib.book.notebook`: the chapters' setup cell, quick mode, the model line and the
  footer (re-exported here: ``from cmixlib.book import setup_notebook``);
- :mod:`~cmixlib.book.runs` and :mod:`~cmixlib.book.costs`: the runs behind the evaluation
  chapters, their sizes, and what each will cost before it starts;
- the status page: :mod:`~cmixlib.book.reproduction` (one row per numbered item),
  :mod:`~cmixlib.book.claims` (the papers' claims in their own words and the rules that test
  them), :mod:`~cmixlib.book.verdicts`, :mod:`~cmixlib.book.differences` and
  :mod:`~cmixlib.book.depth_verdicts` (sentences generated from computed values);
- :mod:`~cmixlib.book.decoder_report` and :mod:`~cmixlib.book.model_examples` (chapters 14-16).
"""
from cmixlib.book.notebook import (REPO_URL, COLAB_CLONE, QUICK_ENV_VAR, DRY_RUN_ENV_VAR,
                                  COLAB_NODEPS_PACKAGES, COLAB_PACKAGES, COLAB_EXTRAS,
                                  quick_mode, sized, in_colab, colab_install,
                                  setup_notebook, short_model, model_line, hardware,
                                  chapter_footer)
