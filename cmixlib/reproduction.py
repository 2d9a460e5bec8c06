"""The reproduction status of every table and figure of the three papers, from this build's runs.

:data:`ITEMS` has one entry per table or figure (main text and appendices). Each either names
why it is not run here, or assesses our result with a stated rule (:mod:`cmixlib.verdicts`):

* numbers in the paper -> :func:`cmixlib.verdicts.ranking_verdict` ("reproduced" only when our
  model is the paper's and every value is within tolerance; else "same ranking", "same
  direction", "too few methods" or "differs" by Spearman's rho, its exact permutation p-value
  and the best method); only the paper's printed values enter the ranking, the authors'
  repository values (ALTI Table 2) get their own verdict in the detail;
* a figure with qualitative claims -> :func:`cmixlib.verdicts.claims_verdict` with the paper's
  headline claim for the figure ("differs" when it fails; "same ranking" when every claim
  holds, "same direction" when the headline and at least half of the others do);
* a run on another model than the paper's (exact model ids, :func:`same_model_id`): the verdict
  ends in "(other model)" (:func:`cmixlib.verdicts.with_model_condition`);
* "not run" with the reason (an item about another model than the one the book's runs use,
  named; an analysis not built yet);
* "no claim to test" (:data:`cmixlib.reproduction_examples.NO_CLAIM`): a diagram, or example
  maps about which the paper states nothing; the detail says what it shows and where the book
  draws its own. The papers' example items that do carry claims (Value Zeroing's Table 1 and
  Figure 4, ALTI's Tables 1 and 3-9, GlobEnc's Figure 1) are scored by them
  (:mod:`cmixlib.reproduction_examples`);
* "why" (items that differ): one sentence from the run's values that locates the failure and
  tests it against noise or the run's variants (:data:`cmixlib.differences.ITEM_WHYS`; Value
  Zeroing's Table 3: :func:`table3_why`).

The runs come from :func:`cmixlib.book_runs.run`, so after the chapters have run every row is
read from the result cache. :func:`status_table` returns the table; the appendix renders it.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from . import paper_numbers as pn
from .book_runs import CONDITION_LABELS, run
from .models import DEFAULT_MODEL
from .registry import method_label
from .differences import ITEM_WHYS
from .reproduction_examples import NO_CLAIM, alti_figs8_10, example_item, no_claim
from .verdicts import (ALIGNMENT_HEADLINE, SANITY_BASELINES, alignment_claims,
                       below_sanity_baselines, claims_verdict, describe_depth_trend,
                       ranking_verdict, with_model_condition)

__all__ = ["Item", "ITEMS", "MAIN_MODEL", "same_model_id", "status_table", "verdict_counts",
           "almost_every_layer", "globenc_fig3_claims", "globenc_table2_claims",
           "GLOBENC_TABLE2_METHODS", "GLOBENC_FIG3_HEADLINE", "GLOBENC_TABLE2_HEADLINE",
           "NUMBERED_ITEMS", "covered_items", "show_size", "sanity_note", "table3_why",
           "TABLE3_WHY_LINK"]

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
    """The model part of a run's description, for reading: "sst2: X (...) | sva: Y (...)" ->
    "sst2: X | sva: Y", with "fine-tuned" kept when the description says so; parts that name
    the same model are merged ("X (fine-tuned; sst2, mnli)"), and a "sentence-transformers/"
    organisation is dropped (display only: the verdicts compare the full ids)."""
    parts = []
    for part in str(description).split(" | "):
        name = part.split(" (")[0]
        if "fine-tuned" in part and "fine-tuned" not in name:
            name += " (fine-tuned)"
        parts.append(name.replace("sentence-transformers/", ""))
    keyed = [p.partition(": ") for p in parts]
    if len(parts) > 1 and all(sep for _, sep, _ in keyed) and len({m for *_, m in keyed}) == 1:
        model, keys = keyed[0][2], ", ".join(k for k, _, _ in keyed)
        return (model[:-1] + f"; {keys})" if model.endswith(")") else f"{model} ({keys})")
    return " | ".join(parts)


def _row(res, verdict: tuple[str, str], paper: str = "", ours: str = "") -> dict:
    return {"verdict": verdict[0], "detail": verdict[1], "paper value": paper, "ours": ours,
            "model": _short_model(res.meta["model"]), "n": show_size(res.meta["data_size"])}


def show_size(size) -> str:
    """A run's data size for reading: 1106 -> "1,106"; {"sst2": 500, "sva": 500} -> "sst2 500,
    sva 500" (never a dict repr); None -> ""."""
    if size is None:
        return ""
    if isinstance(size, dict):
        return ", ".join(f"{k} {show_size(v)}" for k, v in size.items())
    return f"{size:,}" if isinstance(size, int) else str(size)


#: Organisations the Hub moved the papers' legacy model ids under ("bert-base-uncased" is now
#: also "google-bert/bert-base-uncased"): the only prefix ``_model_id`` drops.
_LEGACY_ORGS = ("google-bert", "distilbert", "FacebookAI", "openai-community")


def _model_id(name: str) -> str:
    """A Hub model id without a legacy organisation prefix (``_LEGACY_ORGS``)."""
    name = name.strip()
    org, _, rest = name.partition("/")
    return rest if rest and org in _LEGACY_ORGS else name


def same_model_id(a: str, b: str) -> bool:
    """Rule: two model ids name the same model iff they are equal after dropping a legacy
    organisation prefix -- never a substring test ("bert-base-uncased" is inside
    "distilbert-base-uncased")."""
    return _model_id(a) == _model_id(b)


def _run_models(description: str) -> list[str]:
    """The model ids of a run's description, one per part ("sst2: X (...) | sva: Y (...)" ->
    [X, Y]; "A: X (...) | B: Y (...)" -> [X, Y]): a part's "key: " prefix (one word) and
    everything from its " (" on are dropped."""
    ids = []
    for part in str(description).split(" | "):
        key, sep, rest = part.partition(": ")
        if sep and " " not in key and "(" not in key:
            part = rest
        ids.append(part.split(" (")[0].strip())
    return ids


def _same_model(res, paper_models: str | tuple[str, ...] = MAIN_MODEL) -> bool:
    """Rule: the run is of the paper's model iff its description has no offline fallback (the
    marker :meth:`cmixlib.ModelBundle.describe` writes) and each part's model id is exactly the
    paper's (:func:`same_model_id`): with one id, every part must be it; with a tuple, part i
    must be ``paper_models[i]`` (ALTI Figure 7: BERT, then DistilBERT)."""
    text = str(res.meta["model"])
    if "offline fallback" in text:
        return False
    ids = _run_models(text)
    want = (paper_models,) * len(ids) if isinstance(paper_models, str) else paper_models
    return len(ids) == len(want) and all(same_model_id(a, b) for a, b in zip(ids, want))


def _claims_row(res, claims: pd.Series, headline: str, paper: str, ours: str = "",
                paper_models: str | tuple[str, ...] = MAIN_MODEL) -> dict:
    """The row of a claims item: :func:`claims_verdict` with the headline, marked "(other
    model)" when the run's model is not the paper's."""
    v, detail = claims_verdict(claims, headline=headline)
    return _row(res, (with_model_condition(v, _same_model(res, paper_models)), detail), paper,
                ours)


def _ranking(res, comp: pd.DataFrame, **kw) -> tuple[pd.DataFrame, tuple[str, str]]:
    """The rows of a comparison table with both values, indexed by method, and their
    :func:`cmixlib.verdicts.ranking_verdict` (``kw``: ``higher_is_better``)."""
    comp = comp.dropna(subset=["ours", "paper"]).drop_duplicates("cmix_method")
    comp = comp.set_index("cmix_method")
    ours, paper = (comp[c].rename(index=method_label) for c in ("ours", "paper"))  # labels
    return comp, ranking_verdict(ours, paper, same_model=_same_model(res), **kw)


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
        return _claims_row(res, claims, ALIGNMENT_HEADLINE, "heat map (no numbers)",
                           f"mean dot, Value Zeroing {t['value_zeroing'].mean():.3f}")
    return assess


def _vz_probes() -> dict:
    claims = {}
    for c in CONDITION_LABELS:
        res = run("cue-alignment", c)
        r = res.result
        mean = r[r.metric == "probes_needed"].groupby("method")["mean"].mean()
        claims[f"Value Zeroing needs the fewest probes ({CONDITION_LABELS[c]})"] = \
            bool(mean["value_zeroing"] <= mean.min())          # a tie counts, not broken by name
    headline = f"Value Zeroing needs the fewest probes ({CONDITION_LABELS['pretrained']})"
    return _claims_row(res, pd.Series(claims), headline, "heat map (no numbers)")


def _vz_fig3() -> dict:
    claims, text = {}, []
    for c in CONDITION_LABELS:
        res = run("mdl-probing", c)
        comp = res.frames["compression"].set_index("layer")["compression"]
        sentence = describe_depth_trend(comp, f"{CONDITION_LABELS[c]} compression")
        claims[f"compression rises with depth ({CONDITION_LABELS[c]})"] = "rises" in sentence
        text.append(sentence)
    headline = f"compression rises with depth ({CONDITION_LABELS['pretrained']})"
    return _claims_row(res, pd.Series(claims), headline, "curves (no numbers)", " ".join(text))


def sanity_note(values) -> str:
    """The detail's clause on the sanity baselines of a table (``values``: method -> our value,
    the baselines among them): "; not above the sanity baselines (Random, Nearness): A, B" for
    the methods :func:`cmixlib.verdicts.below_sanity_baselines` flags, "" when none is flagged
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
    """The "why" of a Table 3 row: :func:`cmixlib.depth_verdicts.table3_reason` on the
    ``rollout-depth`` run of ``condition``, with a link to chapter 11's section."""
    from .depth_verdicts import table3_reason

    res = run("rollout-depth", condition)
    return (f"{CONDITION_LABELS[condition]}, {show_size(res.meta['data_size'])} test pairs: "
            f"{table3_reason(res.frames)} "
            f'<a href="{TABLE3_WHY_LINK}">(chapter 11, Rollout on a small model)</a>')


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


def _vz_distance() -> dict:
    res = run("distance-ablation")
    agree = res.frames["agreement"].groupby("variant")["spearman"].mean().drop("cosine",
                                                                                errors="ignore")
    claims = pd.Series({f"{v} ranks the [MASK] row like cosine (mean Spearman >= 0.7)":
                        bool(a >= 0.7) for v, a in agree.items()})
    headline = "every other distance ranks the [MASK] row like cosine (the pattern is unchanged)"
    claims = pd.concat([pd.Series({headline: bool(len(claims)) and bool(claims.all())}), claims])
    return _claims_row(res, claims, headline, "no numbers: 'the pattern did not change'",
                       ", ".join(f"{v} {a:.2f}" for v, a in agree.items()))


# ---- ALTI ------------------------------------------------------------------------------------
def _alti_table2(task: str) -> Callable[[], dict]:
    """ALTI Table 2: the ranking uses the paper's printed values only (``table == "Table 2"``);
    the authors' repository JSON (which adds raw attention) is ranked separately, in the
    detail -- the two sources are never mixed in one comparison."""
    def assess() -> dict:
        from .experiments import REGISTRY

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
        return _row(res, (v[0], detail), f"ALTI {comp.loc['alti', 'paper']:.2f}",
                    f"ALTI {comp.loc['alti', 'ours']:.2f}")
    return assess


def _alti_fig6() -> dict:
    res = run("alti-fig6")
    comp, v = _ranking(res, res.comparison(), higher_is_better=False)
    return _row(res, v, f"ALTI {comp.loc['alti', 'paper']:.2f} (repository files)",
                f"ALTI {comp.loc['alti', 'ours']:.2f}")


def _alti_fig7() -> dict:
    res = run("alti-fig7")
    mean = res.result.set_index("method")["mean"]
    rest = mean.drop("alti")
    order = list(mean.sort_values(ascending=False, kind="stable").index)
    headline = "ALTI is the most consistent method"
    claims = pd.Series({headline: bool((mean["alti"] > rest).all()),
                        "grad-L2 follows ALTI": "grad_l2" in rest
                        and bool((rest["grad_l2"] > rest.drop("grad_l2")).all())})
    return _claims_row(res, claims, headline, "bars (no numbers)", " > ".join(order),
                       paper_models=(MAIN_MODEL, "distilbert-base-uncased"))


def _alti_fig3() -> dict:
    from .experiments.alti import fig3_claims

    res = run("alti-fig3")
    r = res.result.set_index(["kind", "layer"])["mean"]
    claims = fig3_claims(res.result)
    return _claims_row(res, claims, claims.index[0],        # less anisotropic in every layer
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
        if "controls" in res.frames:                     # the sanity baselines of the same task
            c = res.frames["controls"]
            ours = raw[raw.task == task].dropna(subset=["ours"]).drop_duplicates("cmix_method")
            ours = ours.set_index("cmix_method")["ours"]
            detail += sanity_note(pd.concat([ours, c[c.task == task].set_index("method")["mean"]]))
        return _row(res, (v[0], detail), f"GlobEnc {comp.loc['globenc_layer', 'paper']:.2f}",
                    f"GlobEnc {comp.loc['globenc_layer', 'ours']:.2f} (raw rollout)")
    return assess


#: GlobEnc's Table 2 methods (N, N-Res, N-Enc), in the book's names.
GLOBENC_TABLE2_METHODS = ("attn_norm", "attn_norm_res", "globenc_layer")
GLOBENC_FIG3_HEADLINE = "N-Enc has the highest correlation in almost every layer"
GLOBENC_TABLE2_HEADLINE = ("rollout correlates more than the single layer at the last layer, "
                           "for N, N-Res and N-Enc")


def almost_every_layer(flags: pd.Series) -> bool:
    """Rule for "almost every layer" (GlobEnc's Figure 3): the claim holds in every layer but at
    most one (and in at least one)."""
    flags = pd.Series(flags).astype(bool)
    return bool(len(flags)) and int((~flags).sum()) <= 1


def globenc_fig3_claims(result: pd.DataFrame, task: str = "SST-2") -> pd.Series:
    """GlobEnc Figure 3's claims on ``globenc-correlations``'s result (rollout rows of ``task``):
    the caption's headline (``GLOBENC_FIG3_HEADLINE``, :func:`almost_every_layer`); "the
    norm-based settings (N and N-Res) attain higher correlation than the weight-based
    counterparts (W and W-Res) almost in all layers", one claim each; "the correlation curves
    flatten out after only a few layers": N-Enc rises less from the middle layer to the last
    than from the first to the middle (layers 1, ceil(L/2), L)."""
    r = result[(result.task == task) & (result.aggregation == "rollout")]
    t = r.pivot(index="layer", columns="method", values="mean").sort_index()
    enc = t["globenc_layer"]
    L, mid = int(t.index.max()), int(-(-t.index.max() // 2))
    return pd.Series({
        GLOBENC_FIG3_HEADLINE:
            almost_every_layer(enc > t.drop(columns="globenc_layer").max(axis=1)),
        "N above W in almost every layer": almost_every_layer(t["attn_norm"] > t["attention"]),
        "N-Res above W-Res in almost every layer":
            almost_every_layer(t["attn_norm_res"] > t["w_res"]),
        "the N-Enc curve flattens (rises less from the middle layer to the last than before)":
            bool(enc[L] - enc[mid] < enc[mid] - enc[1]),
    })


def globenc_table2_claims(result: pd.DataFrame, task: str = "SST-2") -> pd.Series:
    """GlobEnc Table 2's claim ("applying rollout ... results in higher correlations with the
    saliency scores than the raw single layer attribution maps, especially in deeper layers") on
    ``globenc-correlations``'s result, for N, N-Res and N-Enc (:data:`GLOBENC_TABLE2_METHODS`):
    rollout above the single layer at the last layer (the headline,
    ``GLOBENC_TABLE2_HEADLINE``), at the middle layer (the paper's layer 6 of 12: ours
    L // 2), and at the best layer of each (the table's MAX column)."""
    r = result[result.task == task]
    m = list(GLOBENC_TABLE2_METHODS)
    roll = r[r.aggregation == "rollout"].pivot(index="layer", columns="method",
                                               values="mean")[m]
    ind = r[r.aggregation == "individual"].pivot(index="layer", columns="method",
                                                 values="mean")[m]
    L, mid = int(roll.index.max()), max(1, int(roll.index.max()) // 2)
    return pd.Series({
        GLOBENC_TABLE2_HEADLINE: bool((roll.loc[L] > ind.loc[L]).all()),
        "... at the middle layer, for N, N-Res and N-Enc":
            bool((roll.loc[mid] > ind.loc[mid]).all()),
        "... at the best layer of each (MAX), for N, N-Res and N-Enc":
            bool((roll.max() > ind.max()).all()),
    })


def _globenc_fig3() -> dict:
    res = run("globenc-correlations")
    claims = globenc_fig3_claims(res.result)
    enc = res.result[(res.result.task == "SST-2") & (res.result.aggregation == "rollout")
                     & (res.result.method == "globenc_layer")].set_index("layer")["mean"]
    return _claims_row(res, claims, GLOBENC_FIG3_HEADLINE, "curves (no numbers)",
                       f"N-Enc rollout, layer 1 {enc.iloc[0]:.2f}, last {enc.iloc[-1]:.2f}")


def _globenc_table2() -> dict:
    res = run("globenc-correlations")
    claims = globenc_table2_claims(res.result)
    r = res.result
    last = r[(r.task == "SST-2") & (r.method == "globenc_layer") & (r.layer == r.layer.max())]
    val = last.set_index("aggregation")["mean"]
    paper = pn.globenc_table2()
    pv = paper[(paper.cmix_method == "globenc_layer") & (paper.condition == "L12")]
    pv = pv.set_index("metric")["value"]
    return _claims_row(res, claims, GLOBENC_TABLE2_HEADLINE,
                       "N-Enc layer 12: " + ", ".join(f"{k.rsplit('_', 1)[-1]} {v:.2f}"
                                                      for k, v in pv.items()),
                       f"N-Enc last layer: individual {val['individual']:.2f}, rollout "
                       f"{val['rollout']:.2f}")


def _globenc_fig4() -> dict:
    res = run("globenc-fig4")
    r = res.result
    mean = r[r.variant == "map_raw"].groupby("method")["mean"].mean()
    headline = "N-ResLN is below N-Res and N-Enc (whole maps)"
    claims = pd.Series({headline: bool(mean["attn_norm_res_ln"] < min(mean["attn_norm_res"],
                                                                      mean["globenc_layer"]))})
    return _claims_row(res, claims, headline, "curves (no numbers)",
                       ", ".join(f"{m} {v:.2f}" for m, v in mean.items()))


def _globenc_fig5() -> dict:
    from .experiments import run_experiment

    res = run_experiment("globenc-fig5-ln-outliers", progress=False)
    p = res.result["pearson"].dropna()
    headline = "the LN1/LN2 outlier gains correlate negatively in most layers"
    claims = pd.Series({headline: bool((p < 0).sum() * 2 > len(p))})     # signs, per layer
    return _claims_row(res, claims, headline, "bars (no numbers)",
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
    Item(VZ, "Table 1", "examples of the BLiMP tasks with the cue annotation", "09_cue_alignment",
         example_item("VZ Table 1")),
    Item(VZ, "Figure A.3", "cue alignment, RoBERTa", None, None,
         _other_model("roberta-base")),
    Item(VZ, "Figure A.4", "cue alignment, ELECTRA", None, None,
         _other_model("google/electra-base-discriminator")),
    Item(VZ, "Figure 4, Figures A.5-A.18", "one example's aggregated rows (Figure 4) and its "
         "maps per layer (A.5-A.18)", "14_paper_examples", example_item("VZ Figure 4")),
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
    Item(ALTI, "Figures 1, 2, 4", "a layer's modules, an attention graph, anisotropy sketched",
         "06_alti", None, no_claim("diagrams of the method; chapter 6 explains each")),
    Item(ALTI, "Figures 8-10", "rollout, norm rollout and ALTI relevancies across layers",
         "12_alti_evaluations", alti_figs8_10),
    Item(ALTI, "Figure 5", "ALTI's relevance matrix of one sentence and its [CLS] row", "06_alti",
         None, no_claim("an illustration of R^L (the text states nothing about it); chapter 6 "
                        "draws the same for a sentence of ours")),
    Item(ALTI, "Tables 1, 3-9", "saliency rows of example sentences (the BERT rows)",
         "14_paper_examples", example_item("ALTI Tables 1, 3-9")),
    Item(ALTI, "Tables 4-9 (RoBERTa, DistilBERT rows)", "the same for two more models", None,
         None, _other_model("roberta-base", "distilbert-base-uncased")),
    Item(GE, "Table 1 (SST-2)", "[CLS] rollout vs gradient×input", "13_globenc_evaluations",
         _globenc_table1("SST-2")),
    Item(GE, "Table 1 (MNLI)", "[CLS] rollout vs gradient×input", "13_globenc_evaluations",
         _globenc_table1("MNLI")),
    Item(GE, "Table 1 (HateXplain)", "[CLS] rollout vs gradient×input",
         "13_globenc_evaluations", _globenc_table1("HateXplain")),
    Item(GE, "Table 2", "individual layers vs rollout", "13_globenc_evaluations",
         _globenc_table2),
    Item(GE, "Figure 3", "correlation per layer, rollout", "13_globenc_evaluations",
         _globenc_fig3),
    Item(GE, "Figure 4", "single layers vs HTA × input", "13_globenc_evaluations",
         _globenc_fig4),
    Item(GE, "Figure 5", "LayerNorm outlier weights", "13_globenc_evaluations", _globenc_fig5),
    Item(GE, "Figure 1", "N-Enc [CLS] rows of SST-2 examples", "14_paper_examples",
         example_item("GlobEnc Figure 1")),
    Item(GE, "Figure 2", "the encoder layer sketched", "05_globenc", None,
         no_claim("a diagram of the encoder layer; chapter 5 derives each part")),
    Item(GE, "Table A.1", "Table 1 for BERT-large", None, None,
         _other_model("bert-large-uncased")),
    Item(GE, "Table A.2", "Table 1 for ELECTRA", None, None,
         _other_model("google/electra-base-discriminator")),
    Item(GE, "Figures A.1-A.4", "[CLS] attributions and maps of example sentences",
         "14_paper_examples", None,
         no_claim("example rows and maps (misclassified SST-2, every ablation, MNLI) about "
                  "which the text states nothing; chapter 14 recomputes them")),
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


def status_table(items: list[Item] | None = None) -> pd.DataFrame:
    """One row per item: paper, item, what it shows, chapter, paper value, ours, model, n,
    verdict, the rule's detail and, where investigated, why (Value Zeroing's Table 3:
    :func:`table3_why`); see the module docstring."""
    rows = []
    for it in items or ITEMS:
        base = {"paper": it.paper, "item": it.item, "shows": it.shows, "chapter": it.chapter}
        if it.assess is None:
            verdict = NO_CLAIM if it.not_run.startswith(NO_CLAIM) else "not run"
            rows.append({**base, "verdict": verdict, "detail": it.not_run})
        else:
            row = {**base, **it.assess()}
            why = ITEM_WHYS.get((it.paper, it.item))
            if why is not None and "why" not in row and str(row["verdict"]).startswith("differs"):
                row["why"] = why()[0]
            rows.append(row)
    cols = ["paper", "item", "shows", "paper value", "ours", "model", "n", "verdict", "detail",
            "why", "chapter"]
    return pd.DataFrame(rows).reindex(columns=cols)


def verdict_counts(table: pd.DataFrame) -> pd.Series:
    """How many items got each verdict, in the order of :data:`cmixlib.verdicts.VERDICTS`."""
    from .verdicts import VERDICTS

    order = list(VERDICTS) + [NO_CLAIM]
    return table["verdict"].value_counts().reindex(order, fill_value=0)
