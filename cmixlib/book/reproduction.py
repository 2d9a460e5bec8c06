"""The reproduction status of every table and figure of the three papers, from this build's runs.

:data:`ITEMS` has one entry per table or figure (main text and appendices) and one per tested
claim of the papers' text. Each row shows the item's claims in the paper's words
(:mod:`cmixlib.book.claims`: quote, location, outcome, our numbers and their uncertainty) and a
verdict by one stated rule (:mod:`cmixlib.book.claims.rules`):

* an item with printed numbers -> :func:`cmixlib.book.verdicts.ranking_verdict` of our values against
  the paper's ("reproduced" only when our model is the paper's and every value is within
  tolerance; else "same ranking", "same direction", "too few methods" or "differs"), weighted by
  the item's headline claim (:func:`cmixlib.book.claims.rules.table_verdict`): a failed or reversed
  headline makes it "differs"; with too few methods to rank, the headline decides. Only the
  paper's printed values are ranked (the authors' repository values get their own line in the
  detail);
* an item without printed numbers (claims only, labelled so in the "paper value" column) ->
  :func:`cmixlib.book.claims.rules.claims_verdict` of its claims, the headline weighted ("claims
  hold", "headline holds", "not decided", "differs", "reversed"): a figure ranks nothing, so it
  never gets a ranking word;
* a run on another model than the paper's (exact model ids, :func:`same_model_id`): the verdict
  ends in "(other model)" (:func:`cmixlib.book.verdicts.with_model_condition`);
* "not run" with the reason (an item about another model than the one the book's runs use,
  named as the paper names it);
* "no claim to test" (:data:`cmixlib.book.reproduction_examples.NO_CLAIM`): a diagram, or example
  maps about which the paper states nothing;
* "why" (items that differ): one sentence from the run's values, with the numbers it cites and
  an alternative cause (:data:`cmixlib.book.item_whys.ITEM_WHYS`; Value Zeroing's Table 3:
  :func:`table3_why`).

Each row also gives the run's size beside the paper's (:data:`PAPER_RUN_SIZES`) and the
accuracy of the model that ran (classifiers, MLMs; the paper's where it prints one).
The runs come from :func:`cmixlib.book.runs.run`, so after the chapters have run every row is
read from the result cache. :func:`status_table` returns the table; the appendix renders it.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from cmixlib.book.claims import load_claims
from cmixlib.book.claims.rules import CLAIM_ONLY, CLAIM_VERDICTS
from cmixlib.book.claims.rules_globenc import FIG3_HEADLINE as GLOBENC_FIG3_HEADLINE
from cmixlib.book.claims.rules_globenc import TABLE2_HEADLINE as GLOBENC_TABLE2_HEADLINE
from cmixlib.book.claims.rules_globenc import TABLE2_METHODS as GLOBENC_TABLE2_METHODS
from cmixlib.book.claims.rules_globenc import almost_every_layer
from cmixlib.book.claims.rules_globenc import fig3_claims as globenc_fig3_claims
from cmixlib.book.claims.rules_globenc import table2_claims as globenc_table2_claims
from cmixlib.book.claims.runs import (MAIN_MODEL, PAPER_RUN_SIZES, accuracies, same_model_id,
                                      show_size)
from cmixlib.book.claims.runs import same_model as _same_model
from cmixlib.book.claims.runs import short_model as _short_model  # noqa: F401 (named here too)
from cmixlib.book.claims.runs import status_row as _row
from cmixlib.book.claims.status import (claim_rows, claims_item, claims_text, fig7_models,
                                        with_claims)
from cmixlib.book.depth_verdicts import table3_alternatives, table3_reason
from cmixlib.book.claims.alternatives_alti import sva_accuracy
from cmixlib.book.item_whys import ALWAYS_WHY, ITEM_WHYS
from cmixlib.book.notebook import quick_mode
from cmixlib.book.reproduction_examples import NO_CLAIM, no_claim
from cmixlib.book.runs import CONDITION_LABELS, run
from cmixlib.book.verdicts import (OTHER_MODEL, SANITY_BASELINES, VERDICTS,
                                   below_sanity_baselines, ranking_verdict)
from cmixlib.data import paper_numbers as pn
from cmixlib.experiments import REGISTRY
from cmixlib.experiments.globenc import variant_comparison
from cmixlib.methods.registry import method_label

__all__ = ["Item", "ITEMS", "MAIN_MODEL", "same_model_id", "status_table", "verdict_counts",
           "almost_every_layer", "globenc_fig3_claims", "globenc_table2_claims",
           "GLOBENC_TABLE2_METHODS", "GLOBENC_FIG3_HEADLINE", "GLOBENC_TABLE2_HEADLINE",
           "NUMBERED_ITEMS", "covered_items", "show_size", "sanity_note", "table3_why",
           "TABLE3_WHY_LINK", "PAPER_RUN_SIZES", "claim_rows", "accuracies"]



@dataclass(frozen=True)
class Item:
    """One table or figure: what it shows, where the book treats it, and how it is assessed."""

    paper: str
    item: str
    shows: str
    chapter: str | None = None
    assess: Callable[[], dict] | None = None
    not_run: str = ""


def _ranking(res, comp: pd.DataFrame, **kw) -> tuple[pd.DataFrame, tuple[str, str]]:
    """The rows of a comparison table with both values, indexed by method, and their
    :func:`cmixlib.book.verdicts.ranking_verdict` (``kw``: ``higher_is_better``)."""
    comp = comp.dropna(subset=["ours", "paper"]).drop_duplicates("cmix_method")
    comp = comp.set_index("cmix_method")
    ours, paper = (comp[c].rename(index=method_label) for c in ("ours", "paper"))  # labels
    return comp, ranking_verdict(ours, paper, same_model=_same_model(res), **kw)


def sanity_note(values) -> str:
    """The detail's clause on the sanity baselines of a table (``values``: method -> our value,
    the baselines among them): "; not above the sanity baselines (Random, Nearness): A, B" for
    the methods :func:`cmixlib.book.verdicts.below_sanity_baselines` flags, "" when none is flagged
    or no baseline is in the table."""
    values = pd.Series(values, dtype=float)
    flagged = below_sanity_baselines(values)
    present = [method_label(b) for b in SANITY_BASELINES if b in values.index]
    if not (present and flagged):
        return ""
    return (f"; not above the sanity baselines ({', '.join(present)}): "
            + ", ".join(method_label(m) for m in flagged))


#: Where chapter 11 investigates Value Zeroing rollout's Table 3 value (the status page's link).
TABLE3_WHY_LINK = "11_faithfulness.html#rollout-on-a-small-model"


def table3_why(condition: str) -> str:
    """The "why" of a Table 3 row: :func:`cmixlib.book.depth_verdicts.table3_reason` on the
    ``rollout-depth`` run of ``condition``, the numbers it cites and the alternative causes it
    must beat (:func:`cmixlib.book.depth_verdicts.table3_alternatives`, against the row's own
    ``faithfulness`` run and the paper's value), with a link to chapter 11's section."""
    res = run("rollout-depth", condition)
    faith = run("faithfulness", condition)
    table3 = faith.result.set_index("method")["mean"]
    paper = pn.vz_table3()
    pv = paper[(paper.cmix_method == "value_zeroing_rollout")
               & (paper.condition == CONDITION_LABELS[condition])]["value"].iloc[0]
    return (f"{CONDITION_LABELS[condition]}, {show_size(res.meta['data_size'])} test pairs: "
            f"{table3_reason(res.frames)} "
            f"{table3_alternatives(res.frames, table3, int(faith.meta['data_size']), pv)} "
            f'<a href="{TABLE3_WHY_LINK}">(chapter 11, Rollout on a small model)</a>')


def _alti_table2(task: str) -> Callable[[], dict]:
    """ALTI Table 2: the ranking uses the paper's printed values only (``table == "Table 2"``);
    the authors' repository JSON (which adds raw attention) is ranked separately, in the
    detail -- the two sources are never mixed in one comparison."""
    def assess() -> dict:
        res = run("alti-table2")
        exp, paper = REGISTRY[res.meta["experiment"]], res.paper

        def compared(rows: pd.DataFrame) -> pd.DataFrame:
            comp = exp.compare(res.frames, rows)
            return comp[(comp.task == task) & (comp.paper_model == MAIN_MODEL)]

        comp, v = _ranking(res, compared(paper[paper["table"] == "Table 2"]))
        repo = paper[paper["table"].astype(str).str.startswith("repo")]
        r = res.result
        detail = v[1] + sanity_note(r[r.task == task].set_index("method")["mean"])
        if len(repo):
            _, rv = _ranking(res, compared(repo))
            detail += (". Authors' repository JSON (not the paper; with raw attention): "
                       f"{rv[0]}, {rv[1]}")
        row = _row(res, (v[0], detail), f"ALTI {comp.loc['alti', 'paper']:.2f}",
                   f"ALTI {comp.loc['alti', 'ours']:.2f}")
        if task == "SVA":                 # the masked LM's, on the sentences used

            acc, n = sva_accuracy(quick_mode())
            row["accuracy"] = f"{row['accuracy']}, sva LM {acc:.2f} on {n:,} sentences"
        return row
    return assess


def _globenc_table1(task: str) -> Callable[[], dict]:
    def assess() -> dict:
        res = run("globenc-correlations")                 # the raw rollout: the paper's code
        raw = res.comparison()
        comp, v = _ranking(res, raw[raw.task == task])
        norm = variant_comparison(res, "row-normalised")
        _, nv = _ranking(res, norm[norm.task == task])
        detail = f"{v[1]} (raw rollout, the paper's code); row-normalised rollout: {nv[0]}"
        if "controls" in res.frames:                     # the sanity baselines of the same task
            c = res.frames["controls"]
            ours = raw[raw.task == task].dropna(subset=["ours"]).drop_duplicates("cmix_method")
            ours = ours.set_index("cmix_method")["ours"]
            detail += sanity_note(pd.concat([ours, c[c.task == task].set_index("method")["mean"]]))
        return _row(res, (v[0], detail), f"GlobEnc {comp.loc['globenc_layer', 'paper']:.2f}",
                    f"GlobEnc {comp.loc['globenc_layer', 'ours']:.2f} (raw rollout)")
    return assess


def _other_model(*models: str) -> str:
    """The reason of an item about other models than the one the book's runs use
    (``$CMIX_MODEL``; in Colab these load, offline they do not)."""
    return f"not run (needs {' and '.join(models)}; the book's runs use one model)"


def _vz_table(name: str, condition: str) -> Callable[[], dict]:
    def assess() -> dict:
        res = run(name, condition)
        comp, v = _ranking(res, res.comparison())
        best = comp.index[comp["paper"].to_numpy().argmax()]     # the frame's order, not names
        r = res.result
        if {"method", "mean"} <= set(r.columns):
            v = (v[0], v[1] + sanity_note(r.set_index("method")["mean"]))
        row = _row(res, v, f"{method_label(best)}: {comp.loc[best, 'paper']:.2f}",
                   f"{method_label(best)}: {comp.loc[best, 'ours']:.2f}")
        if name == "faithfulness":
            row["why"] = table3_why(condition)
        return row
    return assess




VZ, ALTI, GE = pn.VZ, pn.ALTI, pn.GE
def _printed_in_quote(paper: str, claim_id: str) -> str:
    """The numbers a claim's quote prints, read from the quote itself ("layers 4 (1.52 ->
    1.72)" -> "layer 4: 1.52 -> 1.72"), for the paper-value column of an item without a table."""
    quote = next(c.quote for c in load_claims(paper) if c.id == claim_id)
    pairs = re.findall(r"(\d+) \((\d+\.\d+)\s+\$\\rightarrow\$\s+(\d+\.\d+)\)", quote)
    return ("printed in the text (fine-tuned compression): "
            + ", ".join(f"layer {k}: {a} -> {b}" for k, a, b in pairs)
            + "; the claims compare layers, not values")


_C = claims_item
_VZT2, _VZT3 = "alignment vs compression, Spearman", "faithfulness to blank-out"
ITEMS: list[Item] = [
    Item(VZ, "Figure 1", "layer-wise cue alignment, pre-trained", "09_cue_alignment",
         _C(VZ, "Figure 1", "cue-alignment", "pretrained")),
    Item(VZ, "Figure 2", "layer-wise cue alignment, fine-tuned", "09_cue_alignment",
         _C(VZ, "Figure 2", "cue-alignment", "finetuned")),
    Item(VZ, "Figure A.2", "probes needed per layer", "09_cue_alignment",
         _C(VZ, "Figure A.2", "cue-alignment", ("pretrained", "finetuned"))),
    Item(VZ, "Figure A.1", "cue alignment with other distances", "09_cue_alignment",
         _C(VZ, "Figure A.1", "distance-ablation")),
    Item(VZ, "Text §5", "GlobEnc and ALTI benefit from rollout", "11_faithfulness",
         _C(VZ, "Text §5", "rollout-depth", ("pretrained", "finetuned"))),
    Item(VZ, "Figure 3", "MDL compression per layer", "10_probing",
         _C(VZ, "Figure 3", "mdl-probing", ("pretrained", "finetuned"),
            paper_value=_printed_in_quote(VZ, "vz-fig3-jumps-alignment"))),
    Item(VZ, "Table 2 (pre-trained)", _VZT2, "10_probing",
         with_claims(VZ, "Table 2 (pre-trained)", _vz_table("mdl-probing", "pretrained"))),
    Item(VZ, "Table 2 (fine-tuned)", _VZT2, "10_probing",
         with_claims(VZ, "Table 2 (fine-tuned)", _vz_table("mdl-probing", "finetuned"))),
    Item(VZ, "Table 3 (pre-trained)", _VZT3, "11_faithfulness",
         with_claims(VZ, "Table 3 (pre-trained)", _vz_table("faithfulness", "pretrained"))),
    Item(VZ, "Table 3 (fine-tuned)", _VZT3, "11_faithfulness",
         with_claims(VZ, "Table 3 (fine-tuned)", _vz_table("faithfulness", "finetuned"))),
    Item(VZ, "Text §9", "the overall claim over the three evaluations", None,
         _C(VZ, "Text §9", "cue-alignment", ("pretrained", "finetuned"))),
    Item(VZ, "Table 1", "examples of the BLiMP tasks with the cue annotation", "09_cue_alignment",
         _C(VZ, "Table 1", "paper-examples", paper_models=None)),
    Item(VZ, "Figure A.3", "cue alignment, RoBERTa", None, None,
         _other_model("roberta-base")),
    Item(VZ, "Figure A.4", "cue alignment, ELECTRA (the paper: the generator)", None, None,
         _other_model("google/electra-base-generator (the paper's \"ELECTRA (generator, "
                      "Clark et al., 2020)\")")),
    Item(VZ, "Figure 4, Figures A.5-A.18", "one example's aggregated rows (Figure 4) and its "
         "maps per layer (A.5-A.18)", "14_paper_examples",
         _C(VZ, "Figure 4, Figures A.5-A.18", "paper-examples")),
    Item(ALTI, "Table 2 (SST-2)", "final-layer relevance vs grad-L2", "12_alti_evaluations",
         with_claims(ALTI, "Table 2 (SST-2)", _alti_table2("SST-2"))),
    Item(ALTI, "Table 2 (SVA)", "final-layer relevance vs blank-out", "12_alti_evaluations",
         with_claims(ALTI, "Table 2 (SVA)", _alti_table2("SVA"))),
    Item(ALTI, "Text §5", "Attn Rollout's depth explanation", "12_alti_evaluations",
         _C(ALTI, "Text §5", "alti-table2")),
    Item(ALTI, "Table 2 (DistilBERT, RoBERTa columns)", "the same for two more models", None,
         None, _other_model("distilbert-base-uncased", "roberta-base")),
    Item(ALTI, "Figure 6", "normalised rank of [CLS]/[SEP]/./,", "12_alti_evaluations",
         _C(ALTI, "Figure 6", "alti-fig6",
            paper_value=CLAIM_ONLY + "; the repository's values are not ranked")),
    Item(ALTI, "Figure 7", "consistency of explanations across two models",
         "12_alti_evaluations",
         _C(ALTI, "Figure 7", "alti-fig7", paper_models=(MAIN_MODEL, "distilbert-base-uncased"),
            model=fig7_models)),
    Item(ALTI, "Figure 3", "anisotropy of token representations and transformed vectors",
         "12_alti_evaluations", _C(ALTI, "Figure 3", "alti-fig3")),
    Item(ALTI, "Figures 1, 2, 4", "a layer's modules, an attention graph, anisotropy sketched",
         "06_alti", None, no_claim("diagrams of the method; chapter 6 explains each")),
    Item(ALTI, "Figures 8-10", "rollout, norm rollout and ALTI relevancies across layers",
         "12_alti_evaluations", _C(ALTI, "Figures 8-10", "alti-figs8-10")),
    Item(ALTI, "Figure 5", "ALTI's relevance matrix of one sentence and its [CLS] row", "06_alti",
         None, no_claim("an illustration of R^L (the text states nothing about it); chapter 6 "
                        "draws the same for a sentence of ours")),
    Item(ALTI, "Tables 1, 3-9", "saliency rows of example sentences (the BERT rows)",
         "14_paper_examples", _C(ALTI, "Tables 1, 3-9", "paper-examples")),
    Item(ALTI, "Tables 4-9 (RoBERTa, DistilBERT rows)", "the same for two more models", None,
         None, _other_model("roberta-base", "distilbert-base-uncased")),
    Item(ALTI, "Text §6", "the overall claim (Table 2 and Figure 7)", None,
         _C(ALTI, "Text §6", "alti-table2")),
    *(Item(GE, f"Table 1 ({t})", "[CLS] rollout vs gradient×input", "13_globenc_evaluations",
           with_claims(GE, f"Table 1 ({t})", _globenc_table1(t)))
      for t in ("SST-2", "MNLI", "HateXplain")),
    Item(GE, "Table 2", "individual layers vs rollout", "13_globenc_evaluations",
         _C(GE, "Table 2", "globenc-correlations",
            paper_value="numbers printed; decided by its claim (rollout vs single layer)")),
    Item(GE, "Figure 3", "correlation per layer, rollout", "13_globenc_evaluations",
         _C(GE, "Figure 3", "globenc-correlations")),
    Item(GE, "Figure 4", "single layers vs HTA × input", "13_globenc_evaluations",
         _C(GE, "Figure 4", "globenc-fig4")),
    Item(GE, "Figure 5", "LayerNorm outlier weights", "13_globenc_evaluations",
         _C(GE, "Figure 5", "globenc-fig5")),
    Item(GE, "Figure 1", "N-Enc [CLS] rows of SST-2 examples", "14_paper_examples",
         _C(GE, "Figure 1", "globenc-correlations")),
    Item(GE, "Figure 2", "the encoder layer sketched", "05_globenc", None,
         no_claim("a diagram of the encoder layer; chapter 5 derives each part")),
    Item(GE, "Table A.1", "Table 1 for BERT-large", None, None,
         _other_model("bert-large-uncased")),
    Item(GE, "Table A.2", "Table 1 for ELECTRA", None, None,
         _other_model("google/electra-base-discriminator")),
    Item(GE, "Figures A.1-A.4", "[CLS] attributions and maps of example sentences (A.2: every "
         "method across layers; A.3: the whole layer-12 maps)", "14_paper_examples",
         _C(GE, "Figures A.1-A.4", "globenc-correlations")),
    Item(GE, "Figures A.5-A.6", "the same for ELECTRA and BERT-large on MNLI", None, None,
         _other_model("google/electra-base-discriminator",
                      "bert-large-uncased fine-tuned on MNLI")),
]


#: Every numbered table and figure of the three papers (main text and appendices), transcribed
#: from their captions: the status page has a row for each (tests/test_verdicts.py).
NUMBERED_ITEMS: dict[str, tuple[str, ...]] = {
    pn.VZ: ("Table 1", "Table 2", "Table 3", "Figure 1", "Figure 2", "Figure 3", "Figure 4",
            *(f"Figure A.{k}" for k in range(1, 19))),
    pn.ALTI: (*(f"Table {k}" for k in range(1, 10)), *(f"Figure {k}" for k in range(1, 11))),
    pn.GE: ("Table 1", "Table 2", "Table A.1", "Table A.2",
            *(f"Figure {k}" for k in range(1, 6)), *(f"Figure A.{k}" for k in range(1, 7))),
}

_ITEM_REF = re.compile(r"(Tables?|Figures?)\s+((?:A\.)?\d+(?:\s*-\s*(?:A\.)?\d+)?"
                       r"(?:\s*,\s*(?:A\.)?\d+(?:\s*-\s*(?:A\.)?\d+)?)*)")


def covered_items(item: str) -> set[str]:
    """The numbered items one status row names: "Figure 4, Figures A.5-A.18" -> Figure 4,
    Figure A.5, ..., Figure A.18; "Tables 1, 3-9" -> Table 1, Table 3, ..., Table 9."""
    out: set[str] = set()
    for kind, refs in _ITEM_REF.findall(item):
        kind = kind.rstrip("s")
        for ref in re.split(r"\s*,\s*", refs):
            lo, _, hi = (x.strip() for x in ref.partition("-"))
            prefix = "A." if lo.startswith("A.") else ""
            a, b = int(lo.removeprefix("A.")), int((hi or lo).removeprefix("A."))
            out.update(f"{kind} {prefix}{k}" for k in range(a, b + 1))
    return out


def _a_claim_fails(row: dict) -> bool:
    """Whether one of the row's claims fails or is reversed (its why is then printed even where
    the headline holds)."""
    return any(k in str(row.get("claims") or "") for k in ("-> FAILS", "-> REVERSED"))


def status_table(items: list[Item] | None = None) -> pd.DataFrame:
    """One row per item: paper, item, what it shows, chapter, paper value, ours, model, n,
    verdict, the rule's detail and, where investigated, why (Value Zeroing's Table 3:
    :func:`table3_why`); see the module docstring."""
    rows = []
    for it in items or ITEMS:
        base = {"paper": it.paper, "item": it.item, "shows": it.shows, "chapter": it.chapter}
        if it.assess is None:
            verdict = NO_CLAIM if it.not_run.startswith(NO_CLAIM) else "not run"
            claims = claim_rows(it.paper, it.item)
            rows.append({**base, "verdict": verdict, "detail": it.not_run,
                         "claims": claims_text(claims)})
        else:
            row = {**base, **it.assess()}
            why = ITEM_WHYS.get((it.paper, it.item))
            if why is not None and "why" not in row and (str(row["verdict"]).startswith(
                    ("differs", "reversed", "not decided")) or _a_claim_fails(row)
                    or (it.paper, it.item) in ALWAYS_WHY):
                row["why"] = why()[0]
            rows.append(row)
    cols = ["paper", "item", "shows", "paper value", "ours", "model", "accuracy", "n",
            "paper n", "verdict", "detail", "claims", "why", "chapter"]
    return pd.DataFrame(rows).reindex(columns=cols)


def verdict_counts(table: pd.DataFrame) -> pd.Series:
    """How many items got each verdict, in the order of :data:`cmixlib.book.verdicts.VERDICTS`."""
    claims = [w for b in CLAIM_VERDICTS for w in ((b,) if b == "not run" else (b, b + OTHER_MODEL))]
    order = list(dict.fromkeys([*VERDICTS, *claims, NO_CLAIM]))
    return table["verdict"].value_counts().reindex(order, fill_value=0)
