"""The reproduction status of every table and figure of the three papers, from this build's runs.

:data:`ITEMS` has one entry per table or figure (main text and appendices). Each either names
why it is not run here, or assesses our result with a stated rule (:mod:`cmixlib.verdicts`):

* numbers in the paper -> :func:`cmixlib.verdicts.ranking_verdict` ("reproduced" only when our
  model is the paper's and every value is within tolerance; else "same ranking", "same
  direction" or "differs" by the rank agreement of the methods);
* a figure with qualitative claims -> :func:`cmixlib.verdicts.claims_verdict` ("same ranking" when every claim
  holds, "same direction" when at least half do, else "differs");
* "not run" with the reason (an item about another model than the one the book's runs use,
  named; an analysis not built yet);
* "not scored": drawn in a chapter, but the paper states nothing a rule could test.

The runs come from :func:`cmixlib.book_runs.run`, so after the chapters have run every row is
read from the result cache. :func:`status_table` returns the table; the appendix renders it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from . import paper_numbers as pn
from .book_runs import CONDITION_LABELS, run
from .models import DEFAULT_MODEL
from .verdicts import alignment_claims, claims_verdict, describe_depth_trend, ranking_verdict

__all__ = ["Item", "ITEMS", "MAIN_MODEL", "status_table", "verdict_counts"]

#: The papers' main model (the library's default model): the only one whose numbers ours can
#: "reproduce".
MAIN_MODEL = DEFAULT_MODEL


@dataclass(frozen=True)
class Item:
    """One table or figure: what it shows, where the book treats it, and how it is assessed."""

    paper: str
    item: str
    shows: str
    chapter: str | None = None
    assess: Callable[[], dict] | None = None
    not_run: str = ""


def _short_model(description: str) -> str:
    """The model part of a run's description ("sst2: X (...) | sva: Y (...)" -> "sst2: X | sva:
    Y"), with "fine-tuned" kept when the description says so."""
    parts = []
    for part in str(description).split(" | "):
        name = part.split(" (")[0]
        if "fine-tuned" in part and "fine-tuned" not in name:
            name += " (fine-tuned)"
        parts.append(name)
    return " | ".join(parts)


def _row(res, verdict: tuple[str, str], paper: str = "", ours: str = "") -> dict:
    return {"verdict": verdict[0], "detail": verdict[1], "paper value": paper, "ours": ours,
            "model": _short_model(res.meta["model"]), "n": res.meta["data_size"]}


def _same_model(res) -> bool:
    """Rule: the run's model description names the papers' model and no offline fallback (the
    marker :meth:`cmixlib.ModelBundle.describe` writes)."""
    text = str(res.meta["model"])
    return MAIN_MODEL in text and "offline fallback" not in text


def _ranking(res, comp: pd.DataFrame, **kw) -> tuple[pd.DataFrame, tuple[str, str]]:
    """The rows of a comparison table with both values, indexed by method, and their
    :func:`cmixlib.verdicts.ranking_verdict` (``kw``: ``higher_is_better``)."""
    comp = comp.dropna(subset=["ours", "paper"]).drop_duplicates("cmix_method")
    comp = comp.set_index("cmix_method")
    return comp, ranking_verdict(comp["ours"], comp["paper"], same_model=_same_model(res), **kw)


# ---- Value Zeroing ---------------------------------------------------------------------------
def _dot_table(res) -> pd.DataFrame:
    r = res.result
    return r[r.metric == "dot"].pivot(index="layer", columns="method", values="mean")


def _vz_claims(condition: str) -> Callable[[], dict]:
    def assess() -> dict:
        from .experiments import GRADIENT_METHODS

        res = run("cue-alignment", condition)
        t = _dot_table(res)
        claims = alignment_claims(t, [m for m in t.columns if m in GRADIENT_METHODS])
        return _row(res, claims_verdict(claims), "heat map (no numbers)",
                    f"mean dot, Value Zeroing {t['value_zeroing'].mean():.3f}")
    return assess


def _vz_probes() -> dict:
    claims = {}
    for c in CONDITION_LABELS:
        res = run("cue-alignment", c)
        r = res.result
        mean = r[r.metric == "probes_needed"].groupby("method")["mean"].mean()
        claims[f"Value Zeroing needs the fewest probes ({CONDITION_LABELS[c]})"] = \
            mean.idxmin() == "value_zeroing"
    return _row(res, claims_verdict(pd.Series(claims)), "heat map (no numbers)")


def _vz_fig3() -> dict:
    claims, text = {}, []
    for c in CONDITION_LABELS:
        res = run("mdl-probing", c)
        comp = res.frames["compression"].set_index("layer")["compression"]
        sentence = describe_depth_trend(comp, f"{CONDITION_LABELS[c]} compression")
        claims[f"compression rises with depth ({CONDITION_LABELS[c]})"] = "rises" in sentence
        text.append(sentence)
    return _row(res, claims_verdict(pd.Series(claims)), "curves (no numbers)", " ".join(text))


def _vz_table(name: str, condition: str) -> Callable[[], dict]:
    def assess() -> dict:
        res = run(name, condition)
        comp, v = _ranking(res, res.comparison())
        best = comp["paper"].idxmax()
        return _row(res, v, f"{best}: {comp.loc[best, 'paper']:.2f}",
                    f"{best}: {comp.loc[best, 'ours']:.2f}")
    return assess


def _vz_distance() -> dict:
    res = run("distance-ablation")
    agree = res.frames["agreement"].groupby("variant")["spearman"].mean().drop("cosine",
                                                                                errors="ignore")
    claims = pd.Series({f"{v} ranks the [MASK] row like cosine (mean Spearman >= 0.7)":
                        bool(a >= 0.7) for v, a in agree.items()})
    return _row(res, claims_verdict(claims), "no numbers: 'the pattern did not change'",
                ", ".join(f"{v} {a:.2f}" for v, a in agree.items()))


# ---- ALTI ------------------------------------------------------------------------------------
def _alti_table2(task: str) -> Callable[[], dict]:
    def assess() -> dict:
        res = run("alti-table2")
        comp = res.comparison()
        comp, v = _ranking(res, comp[(comp.task == task) & (comp.paper_model == MAIN_MODEL)])
        return _row(res, v, f"ALTI {comp.loc['alti', 'paper']:.2f}",
                    f"ALTI {comp.loc['alti', 'ours']:.2f}")
    return assess


def _alti_fig6() -> dict:
    res = run("alti-fig6")
    comp, v = _ranking(res, res.comparison(), higher_is_better=False)
    return _row(res, v, f"ALTI {comp.loc['alti', 'paper']:.2f} (repository files)",
                f"ALTI {comp.loc['alti', 'ours']:.2f}")


def _alti_fig7() -> dict:
    res = run("alti-fig7")
    order = list(res.result.sort_values("mean", ascending=False)["method"])
    claims = pd.Series({"ALTI is the most consistent method": order[0] == "alti",
                        "grad-L2 follows ALTI": len(order) > 1 and order[1] == "grad_l2"})
    return _row(res, claims_verdict(claims), "bars (no numbers)", " > ".join(order))


def _alti_fig3() -> dict:
    from .experiments.alti import fig3_claims

    res = run("alti-fig3")
    r = res.result.set_index(["kind", "layer"])["mean"]
    return _row(res, claims_verdict(fig3_claims(res.result)),
                "curves (no numbers; the repository's BERT values in paper_numbers)",
                f"layer 1: transformed {r[('transformed', 1)]:.2f}, "
                f"token representations {r[('hidden', 1)]:.2f}")


# ---- GlobEnc ---------------------------------------------------------------------------------
def _globenc_table1(task: str) -> Callable[[], dict]:
    def assess() -> dict:
        from .experiments.globenc import variant_comparison

        res = run("globenc-correlations")                 # the raw rollout: the paper's code
        raw = res.comparison()
        comp, v = _ranking(res, raw[raw.task == task])
        norm = variant_comparison(res, "row-normalised")
        _, nv = _ranking(res, norm[norm.task == task])
        detail = f"{v[1]} (raw rollout, the paper's code); row-normalised rollout: {nv[0]}"
        return _row(res, (v[0], detail), f"GlobEnc {comp.loc['globenc_layer', 'paper']:.2f}",
                    f"GlobEnc {comp.loc['globenc_layer', 'ours']:.2f} (raw rollout)")
    return assess


def _globenc_fig4() -> dict:
    res = run("globenc-fig4")
    r = res.result
    mean = r[r.variant == "map_raw"].groupby("method")["mean"].mean()
    claims = pd.Series({"N-ResLN is below N-Res and N-Enc (whole maps)":
                        bool(mean["attn_norm_res_ln"] < min(mean["attn_norm_res"],
                                                            mean["globenc_layer"]))})
    return _row(res, claims_verdict(claims), "curves (no numbers)",
                ", ".join(f"{m} {v:.2f}" for m, v in mean.items()))


def _globenc_fig5() -> dict:
    from .experiments import run_experiment

    res = run_experiment("globenc-fig5-ln-outliers", progress=False)
    p = res.result["pearson"].dropna()
    claims = pd.Series({"the LN1/LN2 outlier gains correlate negatively in most layers":
                        bool((p < 0).sum() * 2 > len(p))})
    return _row(res, claims_verdict(claims), "bars (no numbers)",
                f"negative in {(p < 0).sum()} of {len(p)} layers")


def _other_model(*models: str) -> str:
    """The reason of an item about other models than the one the book's runs use
    (``$CMIX_MODEL``; in Colab these load, offline they do not)."""
    return f"not run (needs {' and '.join(models)}; the book's runs use one model)"


VZ, ALTI, GE = pn.VZ, pn.ALTI, pn.GE
ITEMS: list[Item] = [
    Item(VZ, "Figure 1", "layer-wise cue alignment, pre-trained", "09_cue_alignment",
         _vz_claims("pretrained")),
    Item(VZ, "Figure 2", "layer-wise cue alignment, fine-tuned", "09_cue_alignment",
         _vz_claims("finetuned")),
    Item(VZ, "Figure A.2", "probes needed per layer", "09_cue_alignment", _vz_probes),
    Item(VZ, "Figure A.1", "cue alignment with other distances", "09_cue_alignment",
         _vz_distance),
    Item(VZ, "Figure 3", "MDL compression per layer", "10_probing", _vz_fig3),
    Item(VZ, "Table 2 (pre-trained)", "alignment vs compression, Spearman", "10_probing",
         _vz_table("mdl-probing", "pretrained")),
    Item(VZ, "Table 2 (fine-tuned)", "alignment vs compression, Spearman", "10_probing",
         _vz_table("mdl-probing", "finetuned")),
    Item(VZ, "Table 3 (pre-trained)", "faithfulness to blank-out", "11_faithfulness",
         _vz_table("faithfulness", "pretrained")),
    Item(VZ, "Table 3 (fine-tuned)", "faithfulness to blank-out", "11_faithfulness",
         _vz_table("faithfulness", "finetuned")),
    Item(VZ, "Figure A.3", "cue alignment, RoBERTa", None, None,
         _other_model("roberta-base")),
    Item(VZ, "Figure A.4", "cue alignment, ELECTRA", None, None,
         _other_model("google/electra-base-discriminator")),
    Item(VZ, "Figure 4, Figures A.5-A.18", "maps of example sentences per layer and method",
         "14_paper_examples", None,
         "not scored: single-sentence maps of the fine-tuned MLM, no claim a rule can test"),
    Item(ALTI, "Table 2 (SST-2)", "final-layer relevance vs grad-L2", "12_alti_evaluations",
         _alti_table2("SST-2")),
    Item(ALTI, "Table 2 (SVA)", "final-layer relevance vs blank-out", "12_alti_evaluations",
         _alti_table2("SVA")),
    Item(ALTI, "Table 2 (DistilBERT, RoBERTa columns)", "the same for two more models", None,
         None, _other_model("distilbert-base-uncased", "roberta-base")),
    Item(ALTI, "Figure 6", "normalised rank of [CLS]/[SEP]/./,", "12_alti_evaluations",
         _alti_fig6),
    Item(ALTI, "Figure 7", "consistency of explanations across two models",
         "12_alti_evaluations", _alti_fig7),
    Item(ALTI, "Figure 3", "anisotropy of token representations and transformed vectors",
         "12_alti_evaluations", _alti_fig3),
    Item(ALTI, "Figure 5", "ALTI and rollout maps of one sentence", "06_alti", None,
         "not scored: one sentence's maps, no claim a rule can test"),
    Item(ALTI, "Tables 1, 3-9", "saliency maps of example sentences", "14_paper_examples",
         None, "not scored: saliency rows of example sentences (the BERT rows)"),
    Item(ALTI, "Tables 4-9 (RoBERTa, DistilBERT rows)", "the same for two more models", None,
         None, _other_model("roberta-base", "distilbert-base-uncased")),
    Item(GE, "Table 1 (SST-2)", "[CLS] rollout vs gradient×input", "13_globenc_evaluations",
         _globenc_table1("SST-2")),
    Item(GE, "Table 1 (MNLI)", "[CLS] rollout vs gradient×input", "13_globenc_evaluations",
         _globenc_table1("MNLI")),
    Item(GE, "Table 1 (HateXplain)", "[CLS] rollout vs gradient×input",
         "13_globenc_evaluations", _globenc_table1("HateXplain")),
    Item(GE, "Table 2", "individual layers vs rollout", "13_globenc_evaluations", None,
         "not scored: compared in the chapter column by column"),
    Item(GE, "Figure 3", "correlation per layer, rollout", "13_globenc_evaluations", None,
         "not scored: curves without numbers or a testable claim"),
    Item(GE, "Figure 4", "single layers vs HTA × input", "13_globenc_evaluations",
         _globenc_fig4),
    Item(GE, "Figure 5", "LayerNorm outlier weights", "13_globenc_evaluations", _globenc_fig5),
    Item(GE, "Table A.1", "Table 1 for BERT-large", None, None,
         _other_model("bert-large-uncased")),
    Item(GE, "Table A.2", "Table 1 for ELECTRA", None, None,
         _other_model("google/electra-base-discriminator")),
    Item(GE, "Figures A.1-A.4", "[CLS] attributions and maps of example sentences",
         "14_paper_examples", None, "not scored: maps of example sentences"),
    Item(GE, "Figures A.5-A.6", "the same for ELECTRA and BERT-large on MNLI", None, None,
         _other_model("google/electra-base-discriminator",
                      "bert-large-uncased fine-tuned on MNLI")),
]


def status_table(items: list[Item] | None = None) -> pd.DataFrame:
    """One row per item: paper, item, what it shows, chapter, paper value, ours, model, n,
    verdict and the rule's detail (see the module docstring)."""
    rows = []
    for it in items or ITEMS:
        base = {"paper": it.paper, "item": it.item, "shows": it.shows, "chapter": it.chapter}
        if it.assess is None:
            verdict = "not scored" if it.not_run.startswith("not scored") else "not run"
            rows.append({**base, "verdict": verdict, "detail": it.not_run})
        else:
            rows.append({**base, **it.assess()})
    cols = ["paper", "item", "shows", "paper value", "ours", "model", "n", "verdict", "detail",
            "chapter"]
    return pd.DataFrame(rows).reindex(columns=cols)


def verdict_counts(table: pd.DataFrame) -> pd.Series:
    """How many items got each verdict, in the order of :data:`cmixlib.verdicts.VERDICTS`."""
    from .verdicts import VERDICTS

    order = list(VERDICTS) + ["not scored"]
    return table["verdict"].value_counts().reindex(order, fill_value=0)
