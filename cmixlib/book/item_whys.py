"""Which *why* each status item prints (:mod:`cmixlib.book.reproduction`): the investigation
functions of :mod:`cmixlib.book.differences` bound to the book's runs, and the items decided by
their claims (:func:`cmixlib.book.claims.status.claims_why`)."""
from __future__ import annotations

from cmixlib.book.claims.alternatives_alti import (sva_accuracy, sva_probabilities,
                                                   sva_right_wrong, sva_why)
from cmixlib.book.claims.rules_alti import FIG6_OTHERS
from cmixlib.book.claims.rules_globenc import TABLE2_METHODS
from cmixlib.book.claims.rules_vz import CONTEXT_MIXING
from cmixlib.book.claims.status import claims_why as claims_outcome_why
from cmixlib.book.differences import (fig7_why, globenc_table2_why, mixing_alignment_why,
                                      probes_vs_n_why, rollout_vs_single_why,
                                      special_ranks_why)
from cmixlib.book.notebook import quick_mode
from cmixlib.book.runs import CONDITION_LABELS, run
from cmixlib.data import paper_numbers as pn

__all__ = ["ITEM_WHYS", "ALWAYS_WHY"]


def _vz_alignment(condition: str):
    def why():
        res = run("cue-alignment", condition)
        text, ev = mixing_alignment_why(res.result, list(CONTEXT_MIXING),
                                        pairs=res.frames.get("pairs"))
        item = {"pretrained": "Figure 1", "finetuned": "Figure 2"}[condition]
        other, _ = claims_outcome_why("Value Zeroing", item, "cue-alignment", condition,
                                      secondary_only=True)
        if other.startswith("no claim fails"):
            return text, ev
        if text.endswith("no layer to explain."):          # the headline holds: the others
            return f"The headline holds. Other claims: {other}", ev
        return f"{text} Other claims: {other}", ev
    return why


def _vz_probes():
    return probes_vs_n_why({CONDITION_LABELS[c]: run("cue-alignment", c).result
                            for c in CONDITION_LABELS})


def _alti_fig7():
    return fig7_why(run("alti-fig7"))


def _alti_fig6():
    repo = pn.alti_repo_special_token_ranks()
    repo = repo[repo["model"] == "bert-base-uncased"]
    return special_ranks_why(run("alti-fig6").result, FIG6_OTHERS, repo)


def _alti_sva():
    p = pn.alti_table2()
    paper = p[(p.task == "SVA") & (p.cmix_method == "alti")
              & (p.model == "bert-base-uncased")]["value"].iloc[0]
    res = run("alti-table2")
    per = res.frames.get("per_example")
    right_wrong = (sva_right_wrong(per, sva_probabilities(quick_mode()))[0]
                   if per is not None else "")
    text, ev = sva_why(res.result, float(paper), sva_accuracy(quick_mode()), right_wrong)
    claims, _ = claims_outcome_why("ALTI", "Table 2 (SVA)", "alti-table2")
    return (text if claims.startswith("no claim fails") else f"{text} Claims: {claims}"), ev


def _globenc_table2():
    res = run("globenc-correlations")
    text, ev = globenc_table2_why(res.result, pn.globenc_table2(), TABLE2_METHODS)
    text2, ev2 = rollout_vs_single_why(res.frames["variants"], list(TABLE2_METHODS))
    return f"{text} Over every task and rollout variant: {text2}", ev


def _claims(paper: str, item: str, *run):
    def why():
        return claims_outcome_why(paper, item, *run)
    return why


#: Items whose why is printed whatever their verdict: ALTI's SVA column, decided by claims
#: about ranks and "lower" values that hold, while its values sit far below the paper's.
ALWAYS_WHY = {("ALTI", "Table 2 (SVA)")}
#: The investigation of each item that can differ, by (paper, item) as in
#: :data:`cmixlib.book.reproduction.ITEMS`: a function returning ``(sentence, evidence)``.
#: Value Zeroing's Table 3 has its own (:func:`cmixlib.book.reproduction.table3_why`, chapter 11).
ITEM_WHYS = {
    ("Value Zeroing", "Figure 1"): _vz_alignment("pretrained"),
    ("Value Zeroing", "Figure 2"): _vz_alignment("finetuned"),
    ("Value Zeroing", "Figure A.2"): _vz_probes,
    ("ALTI", "Figure 6"): _alti_fig6,
    ("ALTI", "Figure 7"): _alti_fig7,
    ("ALTI", "Table 2 (SVA)"): _alti_sva,
    ("GlobEnc", "Table 2"): _globenc_table2,
    **{(p, i): _claims(p, i, *run) for p, i, run in (
        ("Value Zeroing", "Table 1", ("paper-examples",)),
        ("Value Zeroing", "Figure 4, Figures A.5-A.18", ("paper-examples",)),
        ("ALTI", "Tables 1, 3-9", ("paper-examples",)),
        ("Value Zeroing", "Figure 3", ("mdl-probing", "finetuned")),
        ("Value Zeroing", "Figure A.1", ("distance-ablation",)),
        ("Value Zeroing", "Table 2 (pre-trained)", ("mdl-probing", "pretrained")),
        ("Value Zeroing", "Table 2 (fine-tuned)", ("mdl-probing", "finetuned")),
        ("ALTI", "Table 2 (SST-2)", ("alti-table2",)),
        *(("GlobEnc", f"Table 1 ({t})", ("globenc-correlations",))
          for t in ("SST-2", "MNLI", "HateXplain")),
        ("Value Zeroing", "Text §5", ("rollout-depth", "pretrained")),
        ("Value Zeroing", "Text §9", ("cue-alignment", "pretrained")),
        ("ALTI", "Figure 3", ("alti-fig3",)), ("ALTI", "Figures 8-10", ("alti-figs8-10",)),
        ("ALTI", "Text §5", ("alti-table2",)), ("ALTI", "Text §6", ("alti-table2",)),
        ("GlobEnc", "Figure 1", ("globenc-correlations",)),
        ("GlobEnc", "Figures A.1-A.4", ("globenc-correlations",)),
        ("GlobEnc", "Figure 3", ("globenc-correlations",)),
        ("GlobEnc", "Figure 4", ("globenc-fig4",)),
        ("GlobEnc", "Figure 5", ("globenc-correlations",)))},
}
