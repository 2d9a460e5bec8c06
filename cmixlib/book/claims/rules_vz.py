"""The tests of Value Zeroing's claims (``value_zeroing.json``), each on the book's runs.

Each test returns an :class:`~cmixlib.book.claims.compare.Outcome`; its docstring states the rule.
The runs are read through :func:`cmixlib.book.runs.run` (from the result cache once the book
has run). Layers are numbered from 1.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from cmixlib.book.claims.compare import (PAIRED_NOTE, SE_NOTE, Outcome, combine,
                                         every_layer, gap_z, layer_states, layers_text, not_tested,
                                         relation)
from cmixlib.book.depth_verdicts import pinned_variant
from cmixlib.book.runs import CONDITION_LABELS, run
from cmixlib.book.verdicts import holds_every_layer
from cmixlib.methods.registry import method_label

__all__ = ["CONTEXT_MIXING", "GRADIENTS", "alignment_rows", "vz_best_among_mixing",
           "vz_attention_below_random", "vz_norm_above_attention", "vz_above_resln",
           "vz_gradients_early", "vz_rollout_benefit", "vz_layerwise_not_good", "alignment_pairs",
           "vz_probes_best_among_mixing", "vz_distance_agrees", "vz_table_best", "vz_overall",
           "HIGHLY", "SAME_PATTERN", "ALIGNMENT_HEADLINE", "alignment_claims"]

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


def alignment_pairs(condition: str, metric: str) -> pd.DataFrame | None:
    """The cue-alignment run's paired differences of one condition and metric (layers numbered
    from 1; :func:`cmixlib.metrics.paired.paired_alignment`), None for a run without them."""
    frame = _run("cue-alignment", condition).frames.get("pairs")
    if frame is None or frame.empty:
        return None
    frame = frame[frame.metric == metric].copy()
    frame["layer"] = frame["layer"].astype(int) + 1
    return frame


def _per_metric(condition: str, a: str, others, what: str, metrics=("dot", "ap"),
                higher_is_better: bool = True) -> Outcome:
    parts, texts, paired = [], [], True
    for m in metrics:
        pairs = alignment_pairs(condition, m)
        paired = paired and pairs is not None
        o, t = every_layer(alignment_rows(condition, m), a, list(others), what=_METRICS.get(m, m),
                           higher_is_better=higher_is_better, pairs=pairs)
        parts.append(o)
        texts.append(t)
    return Outcome(combine(parts), f"{what}. " + " | ".join(texts),
                   PAIRED_NOTE if paired else SE_NOTE)


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
    """"GlobEnc and ALTI benefit from the rollout aggregation method to provide a global view":
    on ``rollout-depth`` (the cue-alignment run holds single-layer maps only), in the pinned
    evaluation variant, by Spearman with blank-out, the global view (the rollout of the layer
    maps up to the last layer) against the same layer's single map and against the run's
    positional control (Nearness: a benefit a position-only score matches is no global view),
    for GlobEnc's and ALTI's maps in both conditions
    (:func:`~cmixlib.book.claims.compare.relation`, both comparisons combined); the best single
    layer of any depth is printed beside."""
    parts, texts = [], []
    for c in CONDITION_LABELS:
        d = pinned_variant(_run("rollout-depth", c).result)
        L = int(d.layer.max())
        near = d[d.method == "nearness"].iloc[0]
        for m in ("globenc_layer", "alti_layer"):
            rows = d[d.method == m]
            roll = rows[(rows.aggregation == "rollout") & (rows.layer == L)].iloc[0]
            single = rows[rows.aggregation == "single"].set_index("layer")
            best = int(single["mean"].idxmax())
            gap, z = gap_z(roll, single.loc[L])
            gap_n, z_n = gap_z(roll, near)
            rel = {"above": "holds", "below": "fails", "tie": "tie"}
            parts += [rel[relation(gap, z)], rel[relation(gap_n, z_n)]]
            texts.append(f"{CONDITION_LABELS[c]} {method_label(m)}: rollout {roll['mean']:+.2f} "
                         f"vs layer {L}'s single map {single.loc[L, 'mean']:+.2f} (z = {z:+.1f})"
                         f" and vs Nearness {near['mean']:+.2f} (z = {z_n:+.1f}); best single "
                         f"layer {best}: {single.loc[best, 'mean']:+.2f}")
    return Outcome(combine(parts), "; ".join(texts) + " (scope: faithfulness to blank-out, "
                   "not cue alignment: the cue-alignment run has no rollout rows)", SE_NOTE)


def vz_layerwise_not_good() -> Outcome:
    """"but they do not seem to provide good layerwise scores (without rollout)" (Figures 1-2):
    GlobEnc's and ALTI's single-layer maps below Attn-norm (N, the norm-based map both build on)
    in every layer, on both metrics and in both conditions
    (:func:`~cmixlib.book.claims.compare.every_layer`)."""
    parts, texts = [], []
    for c in CONDITION_LABELS:
        for m in ("globenc_layer", "alti_layer"):
            o = _per_metric(c, "attn_norm", [m], f"{CONDITION_LABELS[c]}: N vs {method_label(m)}")
            parts.append(o.outcome)
            texts.append(o.ours)
    return Outcome(combine(parts), " || ".join(texts), o.uncertainty)


def vz_probes_best_among_mixing() -> Outcome:
    """Footnote 4's "the results show the same pattern" (probes needed against average
    precision): per condition and layer, Value Zeroing's standing against the other
    context-mixing methods (:func:`~cmixlib.book.claims.compare.layer_states`: above every one,
    below one, or a tie; paired errors) on probes needed (fewer is better) and on average
    precision. Rule: the same pattern when no layer has Value Zeroing above on one metric and
    below on the other (a tie is compatible with either) -> holds; a layer with opposite
    standings -> fails."""
    parts, texts, paired = [], [], True
    for c in CONDITION_LABELS:
        states = {}
        for metric, better in (("ap", True), ("probes_needed", False)):
            pairs = alignment_pairs(c, metric)
            paired = paired and pairs is not None
            states[metric], _ = layer_states(alignment_rows(c, metric), _VZ,
                                             list(CONTEXT_MIXING), higher_is_better=better,
                                             pairs=pairs)
        clash = [l for l in states["ap"] if {states["ap"][l], states["probes_needed"][l]}
                 == {"above", "below"}]
        parts.append("fails" if clash else "holds")
        texts.append(f"{CONDITION_LABELS[c]}: " + ", ".join(
            f"layer {l} {states['ap'][l]}/{states['probes_needed'][l]}" for l in states["ap"])
            + f" (compatible in {len(states['ap']) - len(clash)} of {len(states['ap'])} layers"
            + (f"; opposite in layer(s) {layers_text(clash)})" if clash else ")"))
    return Outcome(combine(parts), "Value Zeroing against the context-mixing methods, average "
                   "precision / probes needed: " + " | ".join(texts),
                   PAIRED_NOTE if paired else SE_NOTE)


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


def vz_overall() -> Outcome:
    """§9's overall claim, "outperforms others in three different evaluation setups": in each
    evaluation and both conditions, Value Zeroing above the others -- Figures 1-2 (among the
    context-mixing methods, every layer, both metrics), Table 2 and Table 3 (the highest value,
    :func:`vz_table_best`) --
    combined by :func:`~cmixlib.book.claims.compare.combine`."""
    parts = {}
    for c in CONDITION_LABELS:
        lab = CONDITION_LABELS[c]
        parts[f"cue alignment ({lab})"] = vz_best_among_mixing(c).outcome
        parts[f"probing, Table 2 ({lab})"] = vz_table_best("mdl-probing", c).outcome
        parts[f"faithfulness, Table 3 ({lab})"] = vz_table_best("faithfulness", c).outcome
    return Outcome(combine(list(parts.values())),
                   "; ".join(f"{k}: {v}" for k, v in parts.items()),
                   "each part's uncertainty: its own row")
