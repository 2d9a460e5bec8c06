"""The tests of Value Zeroing's claims (``value_zeroing.json``), each on the book's runs.

Each test returns an :class:`~cmixlib.book.claims.compare.Outcome`; its docstring states the rule.
The runs are read through :func:`cmixlib.book.runs.run` (from the result cache once the book
has run). Layers are numbered from 1.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from cmixlib.book.claims.compare import (SE_NOTE, Z_NOISE, Outcome, combine, every_layer, gap_z,
                                         layers_text, not_tested, relation)
from cmixlib.book.depth_verdicts import pinned_variant
from cmixlib.book.identity import model_identities
from cmixlib.book.runs import CONDITION_LABELS, run
from cmixlib.book.verdicts import holds_every_layer
from cmixlib.methods.registry import method_label

__all__ = ["CONTEXT_MIXING", "GRADIENTS", "alignment_rows", "vz_best_among_mixing",
           "vz_attention_below_random", "vz_norm_above_attention", "vz_above_resln",
           "vz_gradients_early", "vz_rollout_benefit", "vz_probes_best_among_mixing",
           "vz_distance_agrees", "compression_steps", "vz_compression_rises", "vz_compression_jumps",
           "mdl_noise_alternative", "vz_table_best",
           "vz_table2_gradients_negative", "vz_table2_high", "vz_overall", "HIGHLY", "SAME_PATTERN", "ALIGNMENT_HEADLINE",
           "alignment_claims"]

#: "The other context mixing methods" of §5: the layer-wise context-mixing maps of the
#: cue-alignment run (not the Random baseline, not the gradient attributions).
CONTEXT_MIXING = ("attention", "attn_norm", "attn_norm_res", "attn_norm_res_ln", "globenc_layer",
                  "alti_layer")
#: The gradient-based methods of Figures 1-2 and Tables 2-3.
GRADIENTS = ("grad_x_input", "integrated_gradients", "deeplift")
_VZ = "value_zeroing"
_METRICS = {"dot": "dot product", "ap": "average precision"}
#: "highly positively/negatively correlated": ``|Spearman|`` at least this.
HIGHLY = 0.5
#: "the same pattern" (Figure A.1): the variant's [MASK] rows rank like cosine's, mean Spearman
#: over layers at least this.
SAME_PATTERN = 0.7


#: The headline claim of :func:`alignment_claims` (Value Zeroing's Figures 1-2).
ALIGNMENT_HEADLINE = ("Value Zeroing is above the other context-mixing methods in every "
                      "layer")


def alignment_claims(table: pd.DataFrame, gradient_methods: list[str] | None = None,
                     label: Any = str) -> pd.Series:
    """Value Zeroing's claims about its Figures 1-2 (§5), tested on one condition's layer x method
    table of mean dot products (rows: layers in order; columns: method names).

    Rules: Value Zeroing is above every other **context-mixing** column in every layer (the
    paper: "In comparison with the other context mixing methods ... across all layers"; not
    Random, not the gradient methods; :func:`holds_every_layer`, not a mean); raw attention is
    below the random baseline in every layer ("always perform worse than even random scores");
    on the means over layers, as signs of differences: N is above raw attention; N-ResLN is
    below N; single-layer GlobEnc and ALTI are below Value Zeroing; each gradient method is
    higher in the first third of the layers than in the last third. Returns one boolean per
    claim (index = the claim's text; the first is the headline, :data:`ALIGNMENT_HEADLINE`).
    The status page tests the same claims with their uncertainty and on both metrics
    (:mod:`cmixlib.book.claims.rules_vz`)."""
    grads = [m for m in (gradient_methods or []) if m in table]
    mixing = [c for c in table.columns if c not in ("random", "value_zeroing", *grads)]
    mean = table.mean()
    third = max(1, len(table) // 3)
    first, last = table.iloc[:third].mean(), table.iloc[-third:].mean()
    out = {
        ALIGNMENT_HEADLINE: holds_every_layer(
            table, lambda row: row["value_zeroing"] > row[mixing].max()),
        "raw attention is below the random baseline in every layer": holds_every_layer(
            table, lambda row: row["attention"] < row["random"]),
        "N (attn-norm) is above raw attention": mean["attn_norm"] - mean["attention"] > 0,
        "N-ResLN is below N": mean["attn_norm_res_ln"] - mean["attn_norm"] < 0,
        "single-layer GlobEnc and ALTI are below Value Zeroing":
            max(mean["globenc_layer"], mean["alti_layer"]) - mean["value_zeroing"] < 0,
    }
    for g in grads:
        out[f"{label(g)} is higher in the first third of the layers than in the last"] = \
            bool(first[g] - last[g] > 0)
    return pd.Series({k: bool(v) for k, v in out.items()})


def _run(name: str, condition: str | None = None):
    return run(name, condition)


def alignment_rows(condition: str, metric: str) -> pd.DataFrame:
    """The cue-alignment rows of one condition and metric, layers numbered from 1."""
    r = _run("cue-alignment", condition).result
    r = r[r.metric == metric].copy()
    r["layer"] = r["layer"].astype(int) + 1
    return r


def _per_metric(condition: str, a: str, others, what: str, metrics=("dot", "ap"),
                higher_is_better: bool = True) -> Outcome:
    parts, texts = [], []
    for m in metrics:
        o, t = every_layer(alignment_rows(condition, m), a, list(others), what=_METRICS.get(m, m),
                           higher_is_better=higher_is_better)
        parts.append(o)
        texts.append(t)
    return Outcome(combine(parts), f"{what}. " + " | ".join(texts), SE_NOTE)


def _random_fact(condition: str) -> str:
    """The layers where Value Zeroing is at or below Random (point estimates), per metric."""
    out = []
    for m in ("dot", "ap"):
        t = alignment_rows(condition, m).pivot(index="layer", columns="method", values="mean")
        low = t.index[t[_VZ] <= t["random"]]
        out.append(f"{_METRICS[m]}: " + (f"at or below Random in layer(s) {layers_text(low)}"
                                         if len(low) else "above Random in every layer"))
    return "Value Zeroing vs Random (not a context-mixing method): " + "; ".join(out)


def vz_best_among_mixing(condition: str) -> Outcome:
    """§5's headline, per layer, on dot product and average precision: Value Zeroing above each
    other context-mixing method (:data:`CONTEXT_MIXING`) in every layer
    (:func:`~cmixlib.book.claims.compare.every_layer`; both metrics must hold). The layers where it is
    at or below Random are printed beside (the claim does not name Random)."""
    o = _per_metric(condition, _VZ, CONTEXT_MIXING, "Value Zeroing vs the context-mixing methods")
    return Outcome(o.outcome, f"{o.ours} || {_random_fact(condition)}", o.uncertainty)


def vz_attention_below_random(condition: str) -> Outcome:
    """"Attn always perform worse than even random scores": Random above raw attention in every
    layer, on both metrics (per layer, never on a mean over layers)."""
    return _per_metric(condition, "random", ["attention"], "Random vs Attn (Attn below = holds)")


def vz_norm_above_attention(condition: str) -> Outcome:
    """"a significant improvement for Attn-norm": Attn-norm above Attn in every layer, on both
    metrics (:func:`~cmixlib.book.claims.compare.every_layer`)."""
    return _per_metric(condition, "attn_norm", ["attention"], "Attn-norm vs Attn")


def vz_above_resln(condition: str) -> Outcome:
    """"our method shows the model does indeed use the cue words" where N-ResLN seems not to:
    Value Zeroing above Attn-norm + RES + LN in every layer, on both metrics."""
    return _per_metric(condition, _VZ, ["attn_norm_res_ln"], "Value Zeroing vs N-ResLN")


def vz_gradients_early(condition: str) -> Outcome:
    """"The gradient-based scores highlight the cue words only in the earlier layers": per
    gradient method, the dot product of the first third of the layers (mean of the layer means)
    against the last third's, by :func:`~cmixlib.book.claims.compare.relation` (standard errors of
    the layer means combined as independent); holds when it is "above" for every method."""
    r = alignment_rows(condition, "dot")
    L = int(r.layer.max())
    k = max(1, L // 3)
    parts, texts = [], []
    for g in GRADIENTS:
        d = r[r.method == g].set_index("layer")
        se2 = d["std"] ** 2 / d["n"]
        first, last = d.loc[1:k], d.loc[L - k + 1:L]
        a = pd.Series({"mean": first["mean"].mean(), "std": (se2.loc[1:k].sum()) ** .5 / k, "n": 1})
        b = pd.Series({"mean": last["mean"].mean(), "std": (se2.loc[L - k + 1:L].sum()) ** .5 / k,
                       "n": 1})
        gap, z = gap_z(a, b)
        rel = relation(gap, z)
        parts.append({"above": "holds", "below": "fails", "tie": "tie"}[rel])
        texts.append(f"{method_label(g)} layers 1-{k} {a['mean']:.3f} vs {L - k + 1}-{L} "
                     f"{b['mean']:.3f} (z = {z:+.1f})")
    return Outcome(combine(parts), "; ".join(texts), SE_NOTE)


def vz_rollout_benefit() -> Outcome:
    """"GlobEnc and ALTI benefit from the rollout aggregation": on ``rollout-depth`` (the
    cue-alignment run holds single-layer maps only), at the last layer, in the pinned
    evaluation variant, the rollout of GlobEnc's and of ALTI's layer maps against the single
    layer, by Spearman with blank-out; holds when the rollout is above for both methods in both
    conditions (:func:`~cmixlib.book.claims.compare.relation`)."""
    parts, texts = [], []
    for c in CONDITION_LABELS:
        d = pinned_variant(_run("rollout-depth", c).result)
        L = int(d.layer.max())
        for m in ("globenc_layer", "alti_layer"):
            cell = lambda agg: d[(d.method == m) & (d.aggregation == agg)  # noqa: E731
                                 & (d.layer == L)].iloc[0]
            roll, single = cell("rollout"), cell("single")
            gap, z = gap_z(roll, single)
            rel = relation(gap, z)
            parts.append({"above": "holds", "below": "fails", "tie": "tie"}[rel])
            texts.append(f"{CONDITION_LABELS[c]} {method_label(m)}: rollout {roll['mean']:+.2f} "
                         f"vs single layer {single['mean']:+.2f} at layer {L} (z = {z:+.1f})")
    return Outcome(combine(parts), "; ".join(texts) + " (scope: faithfulness to blank-out, "
                   "not cue alignment: the cue-alignment run has no rollout rows)", SE_NOTE)


def vz_probes_best_among_mixing() -> Outcome:
    """Footnote 4's "the same pattern" on probes needed (fewer is better): Value Zeroing below
    each other context-mixing method in every layer, in both conditions."""
    parts, texts = [], []
    for c in CONDITION_LABELS:
        o, t = every_layer(alignment_rows(c, "probes_needed"), _VZ, list(CONTEXT_MIXING),
                           higher_is_better=False, what=CONDITION_LABELS[c])
        parts.append(o)
        texts.append(t)
    return Outcome(combine(parts), "probes needed, Value Zeroing vs the context-mixing methods. "
                   + " | ".join(texts), SE_NOTE)


def vz_distance_agrees(variants: list[str]) -> Outcome:
    """Appendix A.1 ("no noticeable difference", "the same pattern"): each variant's [MASK]
    rows rank like cosine's, mean Spearman over layers at least :data:`SAME_PATTERN`; the
    lowest layer is printed beside."""
    agree = _run("distance-ablation").frames["agreement"]
    parts, texts = [], []
    for v in variants:
        a = agree[agree.variant == v]
        if a.empty:
            return not_tested(f"the distance-ablation run has no variant {v!r}")
        mean = float(a["spearman"].mean())
        parts.append("holds" if mean >= SAME_PATTERN else "fails")
        texts.append(f"{v}: mean Spearman with cosine {mean:.2f} (lowest layer "
                     f"{a['spearman'].min():.2f})")
    return Outcome(combine(parts), "; ".join(texts),
                   "agreement per layer only (no per-example values to resample)")


def _compression_table(condition: str) -> tuple[pd.DataFrame, int]:
    """``(layer x seed table of compression, the model's layer count)`` of one condition's
    ``mdl-probing`` run: frame ``compression_seeds`` (one column per probe seed), or the single
    seed of frame ``compression`` in a run made before the seeds."""
    res = _run("mdl-probing", condition)
    d = res.frames.get("compression_seeds", res.frames["compression"].assign(seed=0))
    table = d.pivot(index="layer", columns="seed", values="compression").sort_index()
    return table, int(model_identities(res.meta)[0].get("layers") or table.index.max())


def compression_steps(table: pd.DataFrame) -> pd.DataFrame:
    """The steps of compression from layer k-1 to k of a layer x seed table, paired by seed.

    Per step (index: k): ``mean`` and ``std`` (sample std, ddof 1) over the seeds of
    compression_k - compression_{k-1}, ``n`` seeds, ``se`` = std / sqrt(n), ``z`` = mean / se
    (+-inf when se is 0 and the mean is not; NaN with one seed: no noise estimate) and
    ``kind``: "rise" when the mean is above 0 (whatever its size); "fall" when the mean is below
    0 by more than :data:`~cmixlib.book.claims.compare.Z_NOISE` standard errors (outside the
    probe's run-to-run noise); else "tie" (a fall, or no change, within noise)."""
    diff = table.diff().iloc[1:]
    n = int(table.shape[1])
    mean = diff.mean(axis=1)
    std = diff.std(axis=1, ddof=1) if n > 1 else mean * np.nan
    se = std / np.sqrt(n)
    z = pd.Series([np.nan if np.isnan(s) else m / s if s > 0 else np.sign(m) * np.inf
                   if m else 0.0 for m, s in zip(mean, se)], index=mean.index)
    kind = ["rise" if m > 0 else "fall" if zz < -Z_NOISE else "tie" for m, zz in zip(mean, z)]
    return pd.DataFrame({"mean": mean, "std": std, "n": n, "se": se, "z": z, "kind": kind})


def _step_text(k: int, step: pd.Series) -> str:
    return (f"layer {k - 1}->{k} {step['mean']:+.2f} (se {step['se']:.2f}, "
            f"z = {step['z']:+.1f})")


def _seeds_note(n: int) -> str:
    return (f"{n} probe seed{'s' if n != 1 else ''} per layer; paired by seed; a fall is outside "
            f"noise when its mean over the seeds is below 0 by more than {Z_NOISE:g} standard "
            "errors (std of the paired differences / sqrt(seeds))"
            + ("; one seed: no noise estimate, a fall is a tie" if n < 2 else ""))


def vz_compression_rises() -> Outcome:
    """"the probing score goes up monotonically along the layers", per condition on the probe
    seeds' steps (:func:`compression_steps`): "holds" when every step from layer k-1 to k rises
    (mean difference over the seeds above 0, whatever its size); "fails" when some step falls
    outside noise (below 0 by more than 2 standard errors); else "tie" (some fall within noise).
    The conditions are combined by :func:`~cmixlib.book.claims.compare.combine`. Printed: the
    mean compression per layer over the seeds (± their std) and each falling step's mean
    difference, standard error and z."""
    parts, texts, ns = [], [], []
    for c in CONDITION_LABELS:
        table, _ = _compression_table(c)
        steps = compression_steps(table)
        ns.append(table.shape[1])
        kinds = set(steps["kind"])
        parts.append("fails" if "fall" in kinds else "tie" if "tie" in kinds else "holds")
        sd = table.std(axis=1, ddof=1) if table.shape[1] > 1 else None
        means = ", ".join(f"{m:.2f}" + (f" ± {sd[l]:.2f}" if sd is not None else "")
                          for l, m in table.mean(axis=1).items())
        down = steps[steps["kind"] != "rise"]
        texts.append(f"{CONDITION_LABELS[c]}: {means}" + (
            "; rises at every step" if down.empty else "; " + "; ".join(
                f"{'falls outside noise' if s['kind'] == 'fall' else 'within noise'} at "
                + _step_text(int(k), s) for k, s in down.iterrows())))
    return Outcome(combine(parts), "mean compression by layer from "
                   + str(int(table.index.min())) + " (± std over the seeds): " + "; ".join(texts),
                   _seeds_note(min(ns)))


def vz_compression_jumps() -> Outcome:
    """The fine-tuned jumps "at layers 4 and 9" of BERT's 12 layers. On a 12-layer model: the
    rises (mean over the probe seeds) at layers 4 and 9 are each above the median rise over
    layers 1..12 ("holds"), else "fails". On a model of another depth "not tested": where
    BERT's layers 4 and 9 fall in it is not defined; our fine-tuned rises per layer (mean ± std
    over the seeds of the paired differences) are printed."""
    table, layers = _compression_table("finetuned")
    steps = compression_steps(table)
    rises = steps["mean"]
    if layers != 12:
        return Outcome("not tested", f"a {layers}-layer model; fine-tuned rise of compression "
                       f"at each layer (mean ± std over {table.shape[1]} probe seeds): "
                       + ", ".join(f"{int(k)} {s['mean']:+.2f}" + (f" ± {s['std']:.2f}" if
                                   s["n"] > 1 else "") for k, s in steps.iterrows()),
                       f"names BERT's layers 4 and 9 of 12; a {layers}-layer model has "
                       + ("no layer 9 and " if layers < 9 else "") + "no defined counterpart "
                       "of them")
    at = [4, 9]
    ok = all(rises[l] > rises.median() for l in at)
    return Outcome("holds" if ok else "fails",
                   f"rises at layers {at[0]} and {at[1]} of {layers}: "
                   f"{rises[at[0]]:+.2f}, {rises[at[1]]:+.2f}; median rise {rises.median():+.2f}",
                   _seeds_note(table.shape[1]))


def mdl_noise_alternative() -> str:
    """The alternative cause of a fall of compression from one layer to the next: the
    run-to-run noise of the MDL estimate (probe initialisation and data order), and the
    measurement that tells it apart: the probe repeated with several seeds per layer, each step
    paired by seed (:func:`compression_steps`). Per condition, each falling step (mean
    difference below 0; none falling: the last layer's step) with its mean difference, standard
    error and z; rule: below 0 by more than 2 standard errors -> "outside noise: the fall is
    real on this model"; a fall within 2 -> "within noise: a tie, not a fall"; a rise -> "a
    rise"."""
    parts, n = [], 0
    for c in CONDITION_LABELS:
        table, _ = _compression_table(c)
        n = table.shape[1]
        steps = compression_steps(table)
        show = steps[steps["mean"] < 0] if (steps["mean"] < 0).any() else steps.iloc[[-1]]
        notes = []
        for k, s in show.iterrows():
            verdict = ("a rise" if s["mean"] > 0 else "one probe seed: the noise is not "
                       "measured" if n < 2 else "outside noise: the fall is real on this model"
                       if s["kind"] == "fall" else "within noise: a tie, not a fall")
            notes.append(f"{_step_text(int(k), s)}: {verdict}")
        parts.append(f"{CONDITION_LABELS[c]}, " + "; ".join(notes))
    return ("the run-to-run noise of the MDL estimate (probe initialisation and data order); "
            f"told apart by repeating the probe with {n} seeds per layer and pairing each step "
            f"by seed (a fall is outside noise when its mean difference is below 0 by more than "
            f"{Z_NOISE:g} standard errors): " + " | ".join(parts))


def _table(run: str, condition: str) -> pd.DataFrame:
    r = _run(run, condition).result
    return r.rename(columns={"spearman": "mean"})


def vz_table_best(run: str, condition: str) -> Outcome:
    """Value Zeroing's value is the highest of the table (Table 2: the Spearman over layers of
    each method; Table 3: the mean Spearman with blank-out, Value Zeroing's rollout). Table 3:
    against the best other method by :func:`~cmixlib.book.claims.compare.relation` ("tie" within 2
    standard errors); Table 2 (one number per method, no per-example values): ties within
    0.005."""
    t = _table(run, condition).set_index("method")
    vz = "value_zeroing_rollout" if "value_zeroing_rollout" in t.index else _VZ
    others = t.drop(index=[vz])
    best = str(others["mean"].idxmax())
    if "std" in t.columns:
        gap, z = gap_z(t.loc[vz], t.loc[best])
        rel, unc = relation(gap, z), f"z = {z:+.1f}; {SE_NOTE}"
    else:
        gap = float(t.loc[vz, "mean"] - t.loc[best, "mean"])
        rel = "above" if gap > 0.005 else "below" if gap < -0.005 else "tie"
        unc = "Spearman over the layer means (no per-example values); tie within 0.005"
    return Outcome({"above": "holds", "below": "fails", "tie": "tie"}[rel],
                   f"{method_label(vz)} {t.loc[vz, 'mean']:+.2f}; best other "
                   f"{method_label(best)} {t.loc[best, 'mean']:+.2f}", unc)


def vz_table2_high(condition: str) -> Outcome:
    """"alignment according to Value Zeroing is highly positively correlated with the probing
    performance": Value Zeroing's Spearman over layers is at least :data:`HIGHLY`; the best
    other method is printed beside (the claim is about Value Zeroing's value, not its rank)."""
    t = _table("mdl-probing", condition).set_index("method")["mean"]
    others = t.drop(index=[_VZ])
    best = str(others.idxmax())
    return Outcome("holds" if t[_VZ] >= HIGHLY else "fails",
                   f"{method_label(_VZ)} {t[_VZ]:+.2f} (best other {method_label(best)} "
                   f"{others[best]:+.2f})",
                   f"Spearman over {int(_table('mdl-probing', condition)['n_layers'].iloc[0])} "
                   "layer means (no per-example values)")


def vz_table2_gradients_negative(condition: str) -> Outcome:
    """"a highly negative correlation with probing results" for the gradient methods: each one's
    Spearman over layers is at most -:data:`HIGHLY`."""
    t = _table("mdl-probing", condition).set_index("method")["mean"]
    vals = {g: float(t[g]) for g in GRADIENTS if g in t.index}
    ok = all(v <= -HIGHLY for v in vals.values())
    return Outcome("holds" if ok else "fails",
                   ", ".join(f"{method_label(g)} {v:+.2f}" for g, v in vals.items()),
                   f"Spearman over {int(_table('mdl-probing', condition)['n_layers'].iloc[0])} "
                   "layer means (no per-example values)")


def vz_overall() -> Outcome:
    """§9's overall claim, "outperforms others in three different evaluation setups": the
    headline of each evaluation in both conditions -- Figures 1-2 (among the context-mixing
    methods, every layer, both metrics), Table 2 (highly correlated) and Table 3 (the highest
    value) --
    combined by :func:`~cmixlib.book.claims.compare.combine`."""
    parts = {}
    for c in CONDITION_LABELS:
        lab = CONDITION_LABELS[c]
        parts[f"cue alignment ({lab})"] = vz_best_among_mixing(c).outcome
        parts[f"probing, Table 2 ({lab})"] = vz_table2_high(c).outcome
        parts[f"faithfulness, Table 3 ({lab})"] = vz_table_best("faithfulness", c).outcome
    return Outcome(combine(list(parts.values())),
                   "; ".join(f"{k}: {v}" for k, v in parts.items()),
                   "each part's uncertainty: its own row")
