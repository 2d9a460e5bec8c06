"""The papers' example tables and figures, scored by the claims their captions and text make.

The three papers show single sentences (saliency rows, one sentence's maps) and say something
about each; this run tests what they say, on the same sentences, with the models of the book's
runs (chapter 14 draws the maps):

* Value Zeroing, Table 1: the automated cue annotation (spaCy + :mod:`cmixlib.data.blimp_rules`)
  marks the paper's underlined cue words in its five examples (:data:`VZ_TABLE1`);
* Value Zeroing, Figure 4 (and A.5-A.18, the same example per layer): on "The pictures of some hat
  [MASK] scaring Marcus." (target *were*, foil *is*) in the prompt-fine-tuned MLM, §5.3's claims:
  the model prefers *were*; Value Zeroing's rollout puts its largest weight on the cue *pictures*;
  blank-out's largest score is on *pictures*; the gradient methods rank the attractor *hat* above
  *pictures*; attention rollout's largest weight is on [CLS];
* ALTI, Tables 1 and 3-9: Table 1's caption (the gradient methods rank the irrelevant "179", "-"
  and "on" higher than ALTI does) and the prediction each table names (the SST-2 class, or the
  verb form chosen at [MASK]), on the tables' sentences (:data:`ALTI_TABLE_SENTENCES`).

GlobEnc's Figure 1 is not here: its claims (the paper's own words, :mod:`cmixlib.book.claims`)
are tested on its two sentences by :func:`cmixlib.book.claims.rules_globenc.ge_fig1`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from cmixlib.data import load_spacy
from cmixlib.data.blimp_rules import annotate_pair
from cmixlib.experiments.declaration import Experiment
from cmixlib.experiments.runner import Context
from cmixlib.experiments.common import predicted_classes
from cmixlib.experiments.saliency import (ALTI_GRADIENTS, example_rows, experiment_inputs,
                                          experiment_settings, find_example,
                                          target_probabilities, text_example)
from cmixlib.methods.registry import method_label
from cmixlib.training.classifiers import LABELS

__all__ = ["EXAMPLES", "VZ_TABLE1", "ALTI_TABLE_SENTENCES", "EXAMPLE_HEADLINES",
           "example_claims"]

#: Value Zeroing's Table 1, transcribed: per BLiMP subset the example with the [MASK] filled by
#: the target word, target, foil and the underlined cue words.
VZ_TABLE1 = (
    {"uid": "ana", "good": "Many teenagers were helping themselves.", "target": "themselves",
     "foil": "herself", "cues": ("Many", "teenagers")},
    {"uid": "dna", "good": "Jeffrey has not passed these museums.", "target": "these",
     "foil": "this", "cues": ("museums",)},
    {"uid": "dnaa", "good": "Sara noticed these white hospitals.", "target": "these",
     "foil": "this", "cues": ("white", "hospitals")},
    {"uid": "darn", "good": "The pictures of Martha do not disgust Anne.", "target": "do",
     "foil": "does", "cues": ("pictures",)},
    {"uid": "rpsv", "good": "Kristen has fixed this chair.", "target": "has", "foil": "have",
     "cues": ("Kristen",)},
)

#: ALTI's example tables (BERT rows), transcribed: the sentence (SST-2's tokenisation), and the
#: prediction the table names: an SST-2 class, or the verb form the MLM picks at [MASK] over the
#: other form.
ALTI_TABLE_SENTENCES = (
    {"tables": "Tables 1, 5", "text": "a remarkable 179-minute meditation on the nature of "
     "revolution .", "label": "positive"},
    {"tables": "Table 4", "text": "an engaging overview of johnson 's eccentric career .",
     "label": "positive"},
    {"tables": "Table 6", "text": "it turns out to be a cut above the norm , thanks to some "
     "clever writing and sprightly acting .", "label": "positive"},
    {"tables": "Table 7", "text": "this may be the dumbest , sketchiest movie on record about an "
     "aspiring writer 's coming-of-age .", "label": "negative"},
    {"tables": "Tables 3, 9", "text": "a 1770s map of philadelphia's naval defenses [MASK] a fort "
     "on the island , but it is unidentified .", "target": "shows", "foil": "show"},
    {"tables": "Table 8", "text": "certainly the tracks listed on the chart all [MASK] to be very "
     "obscure .", "target": "appear", "foil": "appears"},
)

#: The headline claim of each item (the one a verdict better than "differs" needs).
EXAMPLE_HEADLINES = {
    "VZ Table 1": "the annotation marks each example's cue noun (the head the target agrees "
                  "with)",
    "VZ Figure 4": "Value Zeroing's rollout puts its largest weight on the cue 'pictures'",
    "ALTI Tables 1, 3-9": "every gradient method ranks '179', '-' and 'on' higher than ALTI "
                          "(Table 1)",
}

_GRADIENTS_T1 = ("grad_l2", "grad_x_input_abs", "integrated_gradients")


def _ranks(v: np.ndarray) -> np.ndarray:
    """1 = the highest score (ties by position, stable)."""
    return np.argsort(np.argsort(-np.asarray(v), kind="stable"), kind="stable") + 1


def _top(tokens: list[str], v: np.ndarray, skip: int | None = None) -> str:
    keep = [j for j in range(len(tokens)) if j != skip]
    return tokens[keep[int(np.argmax(np.asarray(v)[keep]))]]


def _claim(item: str, claim: str, value, op: str, expected, evidence: str) -> dict:
    """One claim's measurement: ``value`` (what the run measured), ``op`` and ``expected``
    (what the claim says it should be); whether it holds is decided by the status page's rules
    (:func:`cmixlib.book.claims.rules.example_holds`), not here."""
    return {"item": item, "claim": claim, "value": value, "op": op, "expected": expected,
            "evidence": evidence, "headline": claim == EXAMPLE_HEADLINES[item]}


def _vz_table1() -> list[dict]:
    """One claim per example (exactly the paper's underlined words), and the headline: the cue
    noun (the paper's last underlined word: the head the target agrees with) is marked in all."""
    nlp, item, claims, nouns = load_spacy(), "VZ Table 1", [], []
    for ex in VZ_TABLE1:
        bad = ex["good"].replace(f" {ex['target']}", f" {ex['foil']}", 1)
        rec = annotate_pair(ex["uid"], ex["good"], bad, nlp)
        cues = tuple(rec["words"][i] for i in rec.get("cue_word_indices") or ())
        usable = rec["drop_reason"] is None
        nouns.append(usable and ex["cues"][-1] in cues)
        claims.append(_claim(item, f"{ex['uid']}: the annotation marks exactly "
                                   f"'{' '.join(ex['cues'])}'",
                             " ".join(cues) if usable else "", "==", " ".join(ex["cues"]),
                             f"ours: {' '.join(cues) or rec['drop_reason']}"))
    found = "; ".join(f"{ex['uid']} {c['evidence'].removeprefix('ours: ')}"
                      for ex, c in zip(VZ_TABLE1, claims))
    return [_claim(item, EXAMPLE_HEADLINES[item], int(sum(nouns)), "==", len(VZ_TABLE1),
                   found), *claims]


def _vz_figure4(ctx: Context) -> tuple[list[dict], str]:
    exp = "vz-faithfulness"
    s = experiment_settings(exp, ctx.settings[exp])
    bundle, _, blimp = experiment_inputs(exp, s, model=ctx.model, sources=ctx.sources)
    ex = find_example(blimp, "The pictures of some hat were scaring Marcus.")
    methods = ["value_zeroing_rollout", "attention_rollout", "grad_x_input",
               "integrated_gradients", "deeplift", "blank_out"]
    rows = example_rows(bundle, ex, methods, s, replacement=s["replacement"])
    tok, t = list(ex["tokens"]), int(ex["target_index"])
    cue, attractor = tok.index("pictures"), tok.index("hat")
    p = float(target_probabilities(bundle, [ex])[0])
    grads = ["grad_x_input", "integrated_gradients", "deeplift"]
    above = [m for m in grads if rows[m][attractor] > rows[m][cue]]
    item = "VZ Figure 4"
    vz_top = _top(tok, rows["value_zeroing_rollout"], t)
    bo_top, att_top = _top(tok, rows["blank_out"], t), _top(tok, rows["attention_rollout"], t)
    claims = [
        _claim(item, EXAMPLE_HEADLINES[item], vz_top, "==", "pictures", f"top: {vz_top}"),
        _claim(item, "the model prefers the target 'were' over 'is'", p, ">", 0.5,
               f"p = {p:.3f}"),
        _claim(item, "blank-out's largest score is on 'pictures'", bo_top, "==", "pictures",
               f"top: {bo_top}"),
        _claim(item, "most gradient methods rank the attractor 'hat' above 'pictures'",
               len(above), ">", len(grads) / 2, f"{len(above)} of {len(grads)}"),
        _claim(item, "attention rollout's largest weight is on [CLS]", att_top, "==", tok[0],
               f"top: {att_top}"),
    ]
    return claims, bundle.describe()


def _alti_tables(ctx: Context) -> tuple[list[dict], str]:
    exp, exp7 = "alti-table2", "alti-fig7-consistency"
    run = {"model": ctx.model, "sources": ctx.sources, "data": False}
    clf, _, _ = experiment_inputs(exp, ctx.settings[exp], "sst2", **run)
    mlm, _, _ = experiment_inputs(exp, ctx.settings[exp], "sva", **run)
    ig = experiment_settings(exp7, ctx.settings[exp7])["ig_steps"]
    settings = {**ALTI_GRADIENTS, "ig_steps": ig}
    item, claims = "ALTI Tables 1, 3-9", []
    first = ALTI_TABLE_SENTENCES[0]
    ex = text_example(clf.tokenizer, first["text"])
    rows = example_rows(clf, ex, [*_GRADIENTS_T1, "alti"], settings)
    pos = [ex["tokens"].index(w) for w in ("179", "-", "on")]
    mean_rank = {m: float(_ranks(v)[pos].mean()) for m, v in rows.items()}
    claims.append(_claim(item, EXAMPLE_HEADLINES[item],
                         sum(mean_rank[m] < mean_rank["alti"] for m in _GRADIENTS_T1), "==",
                         len(_GRADIENTS_T1),
                         "mean rank " + ", ".join(f"{method_label(m)} {r:.1f}"
                                                  for m, r in mean_rank.items())))
    for sent in ALTI_TABLE_SENTENCES:
        if "label" in sent:
            ex = text_example(clf.tokenizer, sent["text"])
            got = LABELS["sst2"][int(predicted_classes(clf, [ex])[0])]
            claims.append(_claim(item, f"{sent['tables']}: the classifier predicts "
                                       f"{sent['label']}", got, "==", sent["label"], f"{got}"))
        else:
            ex = text_example(mlm.tokenizer, sent["text"], target_word=sent["target"],
                              foil_word=sent["foil"])
            p = float(target_probabilities(mlm, [ex])[0])
            claims.append(_claim(item, f"{sent['tables']}: the MLM picks '{sent['target']}' "
                                       f"over '{sent['foil']}'", p, ">", 0.5, f"p = {p:.3f}"))
    return claims, f"sst2: {clf.describe()} | sva: {mlm.describe()}"


def example_claims(ctx: Context) -> dict[str, pd.DataFrame]:
    """Every claim of the module docstring, on the papers' own example sentences (typed from the
    papers), with the models other experiments read, loaded with the settings given for them
    (one setting per experiment, the book run's settings,
    :class:`~cmixlib.book.runs.BookRun` ``borrows``; each merged with that experiment's
    defaults), as measurements: what each claim is about (``value``) beside what the claim says
    it is (``op``, ``expected``); the status page's rules decide whether it holds. The
    fine-tuned MLM of
    ``vz-faithfulness`` (VZ Figure 4), the SST-2 classifier and pre-trained MLM of
    ``alti-table2`` with IG at ``alti-fig7-consistency``'s steps (ALTI Tables 1, 3-9). Frame
    ``result``: item, claim, value, op, expected, evidence, headline, model (the bundle's
    description; empty for the annotation)."""
    rows = [{**c, "model": ""} for c in _vz_table1()]      # no model: the annotation rules
    models = []
    for part in (_vz_figure4, _alti_tables):
        claims, desc = part(ctx)
        rows += [{**c, "model": desc} for c in claims]
        models.append(desc)
    ctx.info["model_description"] = " | ".join(dict.fromkeys(models))
    ctx.info["data_size"] = len(VZ_TABLE1) + 1 + len(ALTI_TABLE_SENTENCES)
    return {"result": pd.DataFrame(rows)}


EXAMPLES = Experiment(
    name="paper-example-claims",
    title="The claims the papers make about their example sentences, on those sentences",
    paper="Value Zeroing (Table 1, Figure 4), ALTI (Tables 1, 3-9)",
    compute=example_claims,
    defaults={"vz-faithfulness": {"condition": "finetuned"}, "alti-table2": {},
              "alti-fig7-consistency": {}})
