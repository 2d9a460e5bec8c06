"""Sentences about ``vz-rollout-depth`` (chapter 11, "Rollout on a small model"), each generated
from the run's values by the rule in its docstring, and the one-sentence reason the reproduction
status gives for Value Zeroing's Table 3 (:func:`table3_reason`).

The frames are those of the experiment ``vz-rollout-depth`` (:mod:`cmixlib.experiments.vz_rollout`): ``result``
(condition, method, aggregation, layer, replacement, exclude, mean, std, n), ``profile``
(rows, method, layer, offset, weight) and ``nearness`` (method, aggregation, layer, mean, std,
n: each [MASK] row's Spearman with the nearness control, blank-out's as method "blank-out").
A difference of two means "counts" when it exceeds :data:`SE_FACTOR` combined standard errors
(:func:`clear_difference`); the controls are random and nearness (``-|j - t|``).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from cmixlib.methods.registry import method_label
from cmixlib.metrics.statistics import spearman

__all__ = ["DEFAULT_VARIANT", "pinned_variant", "SE_FACTOR", "TABLE3_AGGREGATION",
           "clear_difference", "depth_curves", "neighbour_layers", "describe_depth_faithfulness",
           "describe_offset_profile", "describe_identity_effect", "describe_sensitivity",
           "describe_drift", "final_variants", "table3_reason", "table3_alternatives"]

#: The evaluation's pinned choices (chapter 11): [UNK] replacement, [CLS]/[SEP]/[MASK] dropped.
DEFAULT_VARIANT = {"replacement": "unk", "exclude": "special+target"}
#: A difference of means counts when it exceeds this many combined standard errors.
SE_FACTOR = 2.0
#: Table 3's aggregation of each layer-wise method: attention rollout adds the identity, the
#: others do not (chapter 11); with the Table 3 method each one becomes.
TABLE3_AGGREGATION = {"attention": ("rollout+I", "attention_rollout"),
                      "attn_norm": ("rollout", "rollout:attn_norm"),
                      "attn_norm_res": ("rollout", "rollout:attn_norm_res"),
                      "attn_norm_res_ln": ("rollout", "rollout:attn_norm_res_ln"),
                      "globenc_layer": ("rollout", "globenc"), "alti_layer": ("rollout", "alti"),
                      "value_zeroing": ("rollout", "value_zeroing_rollout")}


def pinned_variant(result: pd.DataFrame,
                   variant: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The rows of ``result`` in the pinned variant (:data:`DEFAULT_VARIANT`), or with the
    choices in ``variant`` changed."""
    v = {**DEFAULT_VARIANT, **(variant or {})}
    return result[(result.replacement == v["replacement"]) & (result.exclude == v["exclude"])]


def _cell(d: pd.DataFrame, method: str, aggregation: str, layer: int) -> pd.Series:
    row = d[(d.method == method) & (d.aggregation == aggregation) & (d.layer == layer)]
    if len(row) != 1:
        raise KeyError(f"no single row for {method}/{aggregation}/layer {layer}")
    return row.iloc[0]


def clear_difference(a: pd.Series, b: pd.Series) -> bool:
    r"""Rule: mean a is clearly above mean b iff
    :math:`\bar a - \bar b > k \sqrt{s_a^2/n_a + s_b^2/n_b}` with :math:`k` =
    :data:`SE_FACTOR` (rows with ``mean``, ``std``, ``n``; population stds as the runs store
    them)."""
    se = np.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"])
    return bool(a["mean"] - b["mean"] > SE_FACTOR * se)


def depth_curves(result: pd.DataFrame, method: str,
                 variant: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Mean Spearman with blank-out per layer (rows) and aggregation (columns) of one method,
    in the pinned variant (or ``variant``); a display table, no rule."""
    d = pinned_variant(result, variant)
    d = d[(d.method == method) & (d.aggregation != "control")]
    return d.pivot(index="layer", columns="aggregation", values="mean")


def describe_depth_faithfulness(result: pd.DataFrame, method: str = "value_zeroing") -> str:
    """A sentence on how faithfulness changes with depth for one method (pinned variant).

    Rule: the single-layer maps' range over layers 1..L (min to max); the rollout's value at
    layer 1 and at layer L, and "falls with depth" iff Spearman's rho of the rollout curve with
    the layer index is <= -0.5 ("rises" iff >= 0.5, else "no clear trend"); the rollout at layer
    L is compared with the nearness control by :func:`clear_difference` ("below", "above" or
    "level with")."""
    d = pinned_variant(result)
    c = depth_curves(result, method)
    L = int(c.index.max())
    rho = spearman(np.asarray(c.index, float), c["rollout"].to_numpy())
    trend = ("falls with depth" if rho <= -0.5 else "rises with depth" if rho >= 0.5
             else "has no clear trend with depth")
    roll, near = _cell(d, method, "rollout", L), _cell(d, "nearness", "control", 0)
    where = ("below" if clear_difference(near, roll) else "above" if clear_difference(roll, near)
             else "level with")
    return (f"{method_label(method)}: the single-layer maps correlate with blank-out at "
            f"{c['single'].min():+.2f} to {c['single'].max():+.2f} over layers 1-{L}; the "
            f"rollout starts at {c['rollout'].iloc[0]:+.2f} and {trend} (Spearman with the "
            f"layer index {rho:+.2f}) to {roll['mean']:+.2f} at layer {L}, {where} the nearness "
            f"control ({near['mean']:+.2f}).")


def neighbour_layers(profile: pd.DataFrame, method: str, rows: str = "context") -> pd.Series:
    """Per layer: whether the mean weight at offset -1 or +1 exceeds the weight at offset 0
    (the token itself), over ``rows`` ("context": the non-special rows; "mask")."""
    p = profile[(profile.method == method) & (profile.rows == rows)]
    t = p.pivot(index="layer", columns="offset", values="weight")
    return t[[-1, 1]].max(axis=1) > t[0]


def describe_offset_profile(profile: pd.DataFrame, methods: list[str],
                            rows: str = "context") -> str:
    """A sentence per method on where its layer maps put their weight.

    Rule: the mean over layers of the weight at offset 0 and of the larger of offsets -1, +1;
    the number of layers where a neighbour outweighs the token itself
    (:func:`neighbour_layers`)."""
    parts = []
    for m in methods:
        p = profile[(profile.method == m) & (profile.rows == rows)]
        t = p.pivot(index="layer", columns="offset", values="weight")
        k = int(neighbour_layers(profile, m, rows).sum())
        parts.append(f"{method_label(m)}: self {t[0].mean():.2f}, nearest neighbour "
                     f"{t[[-1, 1]].max(axis=1).mean():.2f}; a neighbour outweighs the token "
                     f"itself in {k} of {len(t)} layers")
    return "; ".join(parts) + "."


def describe_identity_effect(result: pd.DataFrame, methods: list[str]) -> str:
    """A sentence on adding the identity (0.5 C + 0.5 I) before rolling out, at layer L.

    Rule: per method, rollout and rollout+I at layer L; "lifts" iff rollout+I is clearly above
    rollout (:func:`clear_difference`), "lowers" iff clearly below, else "no clear change";
    and whether rollout+I is clearly above the nearness control."""
    d = pinned_variant(result)
    L = int(d.layer.max())
    near = _cell(d, "nearness", "control", 0)
    parts = []
    for m in methods:
        a, b = _cell(d, m, "rollout", L), _cell(d, m, "rollout+I", L)
        effect = ("lifts" if clear_difference(b, a) else "lowers" if clear_difference(a, b)
                  else "no clear change")
        beat = "above" if clear_difference(b, near) else "not above"
        parts.append(f"{method_label(m)} {a['mean']:+.2f} -> {b['mean']:+.2f} ({effect}; "
                     f"{beat} nearness)")
    return (f"Adding the identity before rolling out, at layer {L}: " + "; ".join(parts)
            + f". Nearness: {near['mean']:+.2f}.")


def final_variants(result: pd.DataFrame, method: str) -> pd.DataFrame:
    """Layer-L rollout (Table 3's, and the raw product) of ``method`` against nearness in every
    replacement x exclusion of the run: columns replacement, exclude, normalisation, mean,
    nearness, above (clearly above nearness, :func:`clear_difference`)."""
    L = int(result.layer.max())
    rows = []
    for (rep, exc), d in result.groupby(["replacement", "exclude"], sort=False):
        near = _cell(d, "nearness", "control", 0)
        for agg, norm in (("rollout", "row-normalised"), ("raw product", "none")):
            c = _cell(d, method, agg, L)
            rows.append({"replacement": rep, "exclude": exc, "normalisation": norm,
                         "mean": c["mean"], "nearness": near["mean"],
                         "above": clear_difference(c, near)})
    return pd.DataFrame(rows)


def describe_sensitivity(result: pd.DataFrame, method: str = "value_zeroing") -> str:
    """A sentence on the open choices for one method's layer-L rollout: blank-out replacement
    x positions kept x normalisation (:func:`final_variants`). Rule: the range of its mean over
    the variants, and in how many variants it is clearly above the nearness control of the same
    variant (:func:`clear_difference`)."""
    v = final_variants(result, method)
    return (f"Over the {len(v)} variants of the open choices (replacement "
            f"{', '.join(map(repr, v.replacement.unique()))}; positions "
            f"{', '.join(map(repr, v.exclude.unique()))}; rollout normalised or not), "
            f"{method_label(method)} rollout ranges from {v['mean'].min():+.2f} to "
            f"{v['mean'].max():+.2f}, clearly above the nearness control in {int(v.above.sum())}"
            f" of {len(v)}.")


def _nearness_cell(frames: Mapping[str, pd.DataFrame], method: str, aggregation: str,
                   layer: int) -> pd.Series:
    return _cell(frames["nearness"], method, aggregation, layer)


def describe_drift(frames: Mapping[str, pd.DataFrame], methods: list[str]) -> str:
    """A sentence on where the rolled-out [MASK] row puts its weight: its Spearman with the
    nearness control (``-|j - t|``) at layer 1 and at layer L, per method, beside blank-out's.

    Rule: "moves away from the [MASK]" iff the layer-L value is clearly below blank-out's
    (:func:`clear_difference`), "not clearly further from the [MASK] than blank-out"
    otherwise."""
    n = frames["nearness"]
    L = int(n.layer.max())
    bo = n[n.method == "blank-out"].iloc[0]
    parts = []
    for m in methods:
        a, b = _nearness_cell(frames, m, "rollout", 1), _nearness_cell(frames, m, "rollout", L)
        where = ("moves away from the [MASK]" if clear_difference(bo, b)
                 else "not clearly further from the [MASK] than blank-out")
        parts.append(f"{method_label(m)} {a['mean']:+.2f} -> {b['mean']:+.2f} ({where})")
    return (f"Spearman of the rollout's [MASK] row with nearness, layer 1 -> layer {L}: "
            + "; ".join(parts) + f". Blank-out's: {bo['mean']:+.2f}.")


def table3_reason(frames: Mapping[str, pd.DataFrame], method: str = "value_zeroing") -> str:
    """The investigated reason, in one sentence, for ``method``'s Table 3 value on one condition
    (``frames``: a ``vz-rollout-depth`` run).

    Rule, pinned variant, layer L; the clauses are chosen by the numbers --

    * always: the single-layer maps' best layer and value, and the rollout at layer L;
    * "its layer maps give the [MASK] itself w on average and a neighbour outweighs the token
      itself in k of L layers" when k >= L/2 (:func:`neighbour_layers` on the non-special rows;
      w: offset 0 of the [MASK] row, mean over layers);
    * "the product without the identity moves the [MASK] row away from the [MASK]'s neighbours
      (Spearman with nearness a at layer 1, b at layer L; blank-out's c)" when b is clearly
      below c (:func:`clear_difference`), else "the rollout is not clearly further from the
      [MASK] than blank-out (b; c)";
    * "adding 0.5 I lifts it to x" when rollout+I is clearly above the rollout, else "adding
      0.5 I does not clearly lift it (x)";
    * "no replacement/position/normalisation variant puts it clearly above nearness" when none
      does (:func:`final_variants`), else how many do."""
    r = frames["result"]
    d = pinned_variant(r)
    L = int(d.layer.max())
    c = depth_curves(r, method)
    best = int(c["single"].idxmax())
    b = _cell(d, method, "single", best)
    roll, plus = _cell(d, method, "rollout", L), _cell(d, method, "rollout+I", L)
    text = (f"{method_label(method)}'s single-layer maps reach {b['mean']:+.2f} (layer {best}) "
            f"but its rollout gives {roll['mean']:+.2f} at layer {L}")
    clauses = []
    k = int(neighbour_layers(frames["profile"], method).sum())
    if 2 * k >= L:
        p = frames["profile"]
        own = p[(p.method == method) & (p.rows == "mask") & (p.offset == 0)]["weight"].mean()
        clauses.append(f"its layer maps give the [MASK] itself {own:.2f} on average and a "
                       f"neighbour outweighs the token itself in {k} of {L} layers")
    n1, nL = _nearness_cell(frames, method, "rollout", 1), _nearness_cell(frames, method,
                                                                           "rollout", L)
    nb = frames["nearness"][frames["nearness"].method == "blank-out"].iloc[0]
    clauses.append(
        f"the product without the identity moves the [MASK] row away from the [MASK]'s "
        f"neighbours (Spearman with nearness {n1['mean']:+.2f} at layer 1, {nL['mean']:+.2f} at "
        f"layer {L}; blank-out's {nb['mean']:+.2f})" if clear_difference(nb, nL) else
        f"the rollout is not clearly further from the [MASK] than blank-out (Spearman with "
        f"nearness {nL['mean']:+.2f} at layer {L}; blank-out's {nb['mean']:+.2f})")
    clauses.append(f"adding 0.5 I lifts it to {plus['mean']:+.2f}" if clear_difference(plus, roll)
                   else f"adding 0.5 I does not clearly lift it ({plus['mean']:+.2f})")
    v = final_variants(r, method)
    clauses.append("no replacement/position/normalisation variant puts it clearly above nearness"
                   if not v.above.any() else
                   f"{int(v.above.sum())} of {len(v)} evaluation variants put it clearly above "
                   "nearness")
    return text + ": " + "; ".join(clauses) + "."


def table3_alternatives(frames: Mapping[str, pd.DataFrame], table3: pd.Series, n_row: int,
                        paper_value: float, method: str = "value_zeroing") -> str:
    """The numbers behind :func:`table3_reason` and the alternative causes it must beat, in
    sentences generated from the runs (``frames``: ``vz-rollout-depth``; ``table3``: the
    ``vz-faithfulness`` row values by Table 3 method, on ``n_row`` pairs; ``paper_value``: the
    paper's value for ``method``'s rollout). Rule, pinned variant, layer L:

    * the numbers: the [MASK] row's self weight in the layer maps (offset 0, mean over layers);
      the rollout's value on the depth run's pairs beside the row's value on ``n_row`` pairs;
    * alternative 1, the layer maps themselves: the single layer-L map's value -- "as low as"
      the rollout when not clearly above it (:func:`clear_difference`), else "above it";
    * alternative 2, drift: the methods whose rolled-out [MASK] row moves away from the [MASK]
      at least as much as ``method``'s (Spearman with nearness, layer 1 minus layer L) and
      their Table 3 values: drift alone does not explain a low value when they score higher;
    * the mechanism's prediction: a deeper model drifts more, yet the paper's 12-layer BERT
      scores ``paper_value``."""
    r, p, n = frames["result"], frames["profile"], frames["nearness"]
    d = pinned_variant(r)
    L = int(d.layer.max())
    own = p[(p.method == method) & (p.rows == "mask") & (p.offset == 0)]["weight"].mean()
    roll, single = _cell(d, method, "rollout", L), _cell(d, method, "single", L)
    name = TABLE3_AGGREGATION[method][1]
    nums = (f"Numbers: the [MASK] row's self weight in {method_label(method)}'s layer maps "
            f"{own:.2f} (mean over layers); its rollout {roll['mean']:+.2f} on these "
            f"{int(roll['n'])} pairs, {table3[name]:+.2f} on the row's {n_row:,}.")
    alt1 = (f" Alternative 1, the layer maps themselves: the single layer-{L} map scores "
            f"{single['mean']:+.2f}, "
            + ("above the rollout: the aggregation lowers it." if clear_difference(single, roll)
               else "not clearly above the rollout: the maps, not the aggregation, may be "
                    "the cause."))
    drift = {}
    for m in TABLE3_AGGREGATION:
        if m in set(n.method):
            a, b = _cell(n, m, "rollout", 1), _cell(n, m, "rollout", L)
            drift[m] = float(a["mean"] - b["mean"])
    peers = [m for m in drift if m != method and drift[m] >= drift[method]
             and TABLE3_AGGREGATION[m][1] in table3.index]
    alt2 = (f" Alternative 2, drift away from the [MASK] ({method_label(method)}: "
            f"{drift[method]:+.2f} from layer 1 to {L}): "
            + ("; ".join(f"{method_label(m)} drifts {drift[m]:+.2f} and scores "
                         f"{table3[TABLE3_AGGREGATION[m][1]]:+.2f}" for m in peers)
               if peers else "no other method drifts as much")
            + ("; drift alone does not explain the low value."
               if any(table3[TABLE3_AGGREGATION[m][1]] > table3[name] for m in peers) else "."))
    mech = (f" The mechanism predicts that a deeper model drifts more, yet the paper's "
            f"12-layer BERT scores {paper_value:+.2f}: the depth of our {L}-layer model does not "
            "explain the gap by itself.")
    return nums + alt1 + alt2 + mech
