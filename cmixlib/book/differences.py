"""Why an item differs from its paper: one sentence from the run's values, and its evidence.

The reproduction status (:mod:`cmixlib.book.reproduction`) marks an item "differs" when its headline
claim fails or its ranking disagrees. Each function here locates the failure in the run's own
numbers and checks it against sampling noise or the run's other variants (tasks, rollout
variants, model conditions), returning ``(sentence, evidence)``: the sentence states only what
the evidence table shows, by the rule in the function's docstring; the status page prints the
sentence beside the verdict and the table in its appendix section.

Layers are numbered from 1 (the first layer's output) in every sentence and table.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from cmixlib.book.claims import claims_for
from cmixlib.book.claims.alternatives import alternative_text
from cmixlib.book.claims.compare import paired_gap_z
from cmixlib.book.claims.status import claims_why as claims_outcome_why
from cmixlib.methods.registry import method_label

__all__ = ["alignment_why", "consistency_why", "rollout_vs_single_why",
           "mixing_alignment_why", "probes_vs_n_why", "globenc_table2_why",
           "fig7_why", "special_ranks_why", "Z_NOISE"]

#: A gap of at most this many standard errors is called "within sampling noise".
Z_NOISE = 2.0


def _layers(values) -> str:
    """[1, 2, 3, 5] -> "1-3 and 5"."""
    v = sorted(int(x) for x in values)
    runs, start = [], None
    for i, x in enumerate(v):
        start = x if start is None else start
        if i + 1 == len(v) or v[i + 1] != x + 1:
            runs.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return runs[0] if len(runs) == 1 else ", ".join(runs[:-1]) + " and " + runs[-1]


def _labels(methods) -> str:
    return ", ".join(method_label(m) for m in methods)


def alignment_why(result: pd.DataFrame, *, metric: str = "dot", method: str = "value_zeroing",
                  context_mixing: list[str] | None = None,
                  pairs: pd.DataFrame | None = None) -> tuple[str, pd.DataFrame]:
    """Where "``method`` has the highest alignment in every layer" fails, on a ``vz-cue-alignment``
    result (columns method, layer (0-based), metric, mean, std, n).

    Evidence: per layer, ``method``'s mean, the best other method and its mean, the gap and its
    size in standard errors, z = gap / sqrt(s_a^2/n_a + s_b^2/n_b) (unpaired: the examples are
    the same, so this is conservative when the two scores correlate positively); with ``pairs``
    (the run's paired differences, layers from 0) the paired gap and z
    (:func:`cmixlib.book.claims.compare.paired_gap_z`). Rule for the
    sentence: the layers where a method is above ``method`` and which; the largest gap and its z
    ("within sampling noise" iff z <= :data:`Z_NOISE`); and, when ``context_mixing`` is given,
    in how many layers ``method`` is above every one of those methods."""
    r = result[result["metric"] == metric].copy()
    r["layer"] = r["layer"].astype(int) + 1
    mean = r.pivot(index="layer", columns="method", values="mean").sort_index()
    std = r.pivot(index="layer", columns="method", values="std").sort_index()
    n = r.pivot(index="layer", columns="method", values="n").sort_index()
    if pairs is not None:
        pairs = pairs[pairs["metric"] == metric].assign(layer=pairs["layer"].astype(int) + 1)
    rows = []
    for layer in mean.index:
        others = mean.loc[layer].drop(method)
        best = str(others.idxmax())
        gap = float(others[best] - mean.loc[layer, method])
        se = float(np.sqrt(std.loc[layer, best] ** 2 / n.loc[layer, best]
                           + std.loc[layer, method] ** 2 / n.loc[layer, method]))
        z = gap / se if se > 0 else np.inf
        paired = paired_gap_z(pairs, int(layer), best, method)
        if paired is not None:
            gap, z = paired
        above = [m for m in others.index if others[m] > mean.loc[layer, method]]
        rows.append({"layer": layer, method_label(method): mean.loc[layer, method],
                     "best other": method_label(best), "its value": others[best], "gap": gap,
                     "z": z, "above it": _labels(above) or "none"})
    ev = pd.DataFrame(rows).set_index("layer")
    bad = ev.index[ev["gap"] > 0]
    if not len(bad):
        close = ev.index[-ev["z"] <= Z_NOISE]            # ahead, but within sampling noise
        if not len(close):
            return f"{method_label(method)} is above every other method in every layer.", ev
        least = ev.loc[close, "gap"].idxmax()            # the smallest lead
        return (f"{method_label(method)} is above every other method in every layer, but within "
                f"sampling noise of the next in layer(s) {_layers(close)} (smallest lead "
                f"{-ev.loc[least, 'gap']:.3f} over {ev.loc[least, 'best other']} in layer "
                f"{least}, z = {-ev.loc[least, 'z']:.1f}): a tie there.", ev)
    worst = ev.loc[bad, "gap"].idxmax()
    clear = [l for l in bad if ev.loc[l, "z"] > Z_NOISE]
    tied = [l for l in bad if ev.loc[l, "z"] <= Z_NOISE]
    leaders = sorted({m for s in ev.loc[clear or bad, "above it"] for m in s.split(", ")})
    z = ev.loc[worst, "z"]
    noise = "within sampling noise" if z <= Z_NOISE else "far outside sampling noise"
    where = (f"beyond noise in layer(s) {_layers(clear)}" if clear else "") + (
        "; " if clear and tied else "") + (f"within noise (a tie) in layer(s) {_layers(tied)}"
                                           if tied else "")
    text = (f"{', '.join(leaders)} score(s) higher than {method_label(method)} {where} of "
            f"{len(ev)} (largest gap: {method_label(method)} minus "
            f"{ev.loc[worst, 'best other']} {-ev.loc[worst, 'gap']:.3f} in layer {worst}, "
            f"z = {-z:.1f}: {noise})")
    if context_mixing:
        cm = [m for m in context_mixing if m in mean.columns and m != method]
        lead = int((mean[method] > mean[cm].max(axis=1)).sum())
        text += (f"; among the context-mixing methods it is the best-aligned in {lead} of "
                 f"{len(ev)} layers")
    return text + ".", ev


def consistency_why(result: pd.DataFrame, vs_reference: pd.DataFrame,
                    reference: str = "alti") -> tuple[str, pd.DataFrame]:
    """Why "``reference`` is the most consistent method" (ALTI Figure 7) fails: from
    ``alti-fig7-consistency``'s ``result`` (method, mean, ...) and ``vs_alti`` (paired
    differences method - reference over the same sentences, with a 95% CI). Rule: name each method
    whose mean consistency is above the reference's with its paired difference and CI, and say
    whether the CI excludes 0."""
    ev = vs_reference.set_index("method")[["mean_diff", "ci_low", "ci_high", "n"]]
    ev.insert(0, "consistency", result.set_index("method")["mean"])
    above = ev[ev["mean_diff"] > 0]
    ref = float(result.set_index("method").loc[reference, "mean"])
    if above.empty:
        return f"{method_label(reference)} is the most consistent method.", ev.rename(
            index=method_label)
    parts = [f"{method_label(m)} ({r.consistency:.3f}, paired difference {r.mean_diff:+.3f}, "
             f"95% CI {r.ci_low:+.3f} to {r.ci_high:+.3f}"
             + (", excluding 0)" if r.ci_low > 0 else ", including 0)")
             for m, r in above.iterrows()]
    text = (f"{method_label(reference)} ({ref:.3f}) is less consistent than " + "; ".join(parts)
            + f", over the same {int(above['n'].iloc[0])} sentences.")
    return text, ev.rename(index=method_label)


def rollout_vs_single_why(variants: pd.DataFrame, methods: list[str]
                          ) -> tuple[str, pd.DataFrame]:
    """Where "rollout correlates more than the single layer" (GlobEnc Table 2) fails, checked on
    every task and both rollout variants of ``globenc-correlations``'s frame ``variants``.
    Evidence: at the last layer, per method, task and variant, rollout minus single layer. Rule
    for the sentence: the methods for which rollout is below the single layer in every task and
    variant, those for which it is above in every one, and the rest ("mixed")."""
    v = variants[variants["method"].isin(methods)]
    last = v[v["layer"] == v["layer"].max()]
    t = last.pivot_table(index=["method", "task", "rollout"], columns="aggregation",
                         values="mean")
    t["rollout - single"] = t["rollout"] - t["individual"]
    d = t["rollout - single"].unstack(["task", "rollout"])
    below = [m for m in methods if (d.loc[m] < 0).all()]
    above = [m for m in methods if (d.loc[m] > 0).all()]
    mixed = [m for m in methods if m not in below + above]
    parts = []
    if below:
        parts.append(f"at the last layer the rollout is below the single layer for "
                     f"{_labels(below)} on every task and both rollout variants")
    if above:
        parts.append(f"above it for {_labels(above)} on every one")
    for m in mixed:
        per = [f"{int((d.loc[m].xs(var, level='rollout') > 0).sum())} of "
               f"{d.loc[m].xs(var, level='rollout').size} tasks with the {var} rollout"
               for var in d.columns.get_level_values("rollout").unique()]
        parts.append(f"for {method_label(m)} above it on {' and on '.join(per)}")
    ev = d.rename(index=method_label)
    return "; ".join(parts) + f" ({d.shape[1]} task x variant cases).", ev


# ---- the status page's whys: numbers cited, an alternative cause, the measurement -----------
def _alt(cause: str, measurement: str, result: str) -> str:
    """The clause every why ends with: "Alternative cause: ...; told apart by ...: ..."."""
    return f" Alternative cause: {cause}; told apart by {measurement}: {result}."


def mixing_alignment_why(result: pd.DataFrame, context_mixing: list[str],
                         method: str = "value_zeroing", pairs: pd.DataFrame | None = None
                         ) -> tuple[str, pd.DataFrame]:
    """Where "``method`` above the other context-mixing methods in every layer" fails, on both
    metrics the paper plots (dot product, average precision): per metric the layers and the
    method that ties or beats it (:func:`alignment_why` restricted to ``context_mixing``), and
    the layers where it is at or below Random. Alternative cause: sampling noise, told apart by
    the gap in standard errors (z, the evidence table, paired where the run keeps ``pairs``;
    ``|z| <=`` :data:`Z_NOISE` cannot be told from noise)."""
    keep = [*context_mixing, method]
    parts, evs, noise, ties = [], [], [], 0
    for metric in ("dot", "ap"):
        r = result[result["method"].isin(keep)]
        text, ev = alignment_why(r, metric=metric, method=method, pairs=pairs)
        rnd = result[(result["metric"] == metric) & result["method"].isin([method, "random"])]
        t = rnd.pivot(index="layer", columns="method", values="mean")
        low = [int(l) + 1 for l in t.index[t[method] <= t["random"]]]
        parts.append(f"{metric}: {text.rstrip('.')}"
                     + (f"; at or below Random in layer(s) {_layers(low)}" if low else ""))
        bad = ev[ev["gap"] > 0]
        noise += [bool(z <= Z_NOISE) for z in bad["z"]]
        ties += int(((ev["gap"] <= 0) & (-ev["z"] <= Z_NOISE)).sum())
        evs.append(ev.assign(metric=metric))
    verdict = ("every such layer is within noise" if noise and all(noise) else
               f"{noise.count(False)} of {len(noise)} such layer-metric gaps are outside noise: "
               "not sampling noise" if noise else
               f"no layer where another method leads; {ties} layer-metric lead(s) within noise "
               "(ties)" if ties else "no layer to explain")
    return ("; ".join(parts) + "." + _alt("sampling noise", "the gap in standard errors (z)",
                                           verdict), pd.concat(evs))


def probes_vs_n_why(results: dict[str, pd.DataFrame], method: str = "value_zeroing",
                    rival: str = "attn_norm") -> tuple[str, pd.DataFrame]:
    """Figure A.2 (probes needed, fewer is better): per condition, the layers where ``rival``
    (N) needs as few probes as ``method`` or fewer, with both means. Alternative cause: the
    gradient methods (an earlier reading) -- told apart by restricting the comparison to the
    context-mixing methods: the rival is one of them."""
    rows, parts = [], []
    for cond, r in results.items():
        p = r[r["metric"] == "probes_needed"]
        t = p.pivot(index="layer", columns="method", values="mean")
        t.index = t.index.astype(int) + 1
        worse = [int(l) for l in t.index if t.loc[l, rival] <= t.loc[l, method]]
        parts.append(f"{cond}: {method_label(rival)} needs as few probes as "
                     f"{method_label(method)} or fewer in {len(worse)} of {len(t)} layers"
                     + (f" ({_layers(worse)}; e.g. layer {worse[0]}: {t.loc[worse[0], rival]:.2f}"
                        f" vs {t.loc[worse[0], method]:.2f})" if worse else ""))
        rows.append(t[[method, rival]].rename(columns=method_label).assign(condition=cond))
    ev = pd.concat(rows)
    return ("; ".join(parts) + "." + _alt(
        "the gradient methods needing fewer probes", "the same comparison among the "
        "context-mixing methods only", f"{method_label(rival)}, a context-mixing method, is "
        "the one level with or ahead"), ev)


def globenc_table2_why(result: pd.DataFrame, paper: pd.DataFrame,
                       methods: tuple[str, ...]) -> tuple[str, pd.DataFrame]:
    """GlobEnc Table 2 against the paper's values at the last layer (ours L, the paper's 12):
    per method and aggregation, ours, the paper's and the difference; the cell furthest from
    the paper's is named, and whether each rollout is within 0.10 of the paper's. Alternative
    cause: "rollout is weaker on our model" -- told apart by comparing each cell with the
    paper's: the outlier is the cell far from its paper value."""
    r = result[(result.task == "SST-2") & (result.layer == result.layer.max())
               & result.method.isin(methods)]
    ours = r.pivot(index="method", columns="aggregation", values="mean")
    pv = paper[(paper.condition == "L12") & paper.cmix_method.isin(methods)].copy()
    pv["aggregation"] = pv["metric"].str.rsplit("_", n=1).str[-1]
    theirs = pv.pivot(index="cmix_method", columns="aggregation", values="value")
    rows = [{"method": method_label(m), "aggregation": a, "ours": ours.loc[m, a],
             "paper (layer 12)": theirs.loc[m, a], "ours - paper": ours.loc[m, a]
             - theirs.loc[m, a]} for m in methods for a in ("individual", "rollout")]
    ev = pd.DataFrame(rows)
    far = ev.loc[ev["ours - paper"].abs().idxmax()]
    near = ev[(ev.aggregation == "rollout") & (ev["ours - paper"].abs() <= 0.10)]
    text = (f"At our last layer {int(result.layer.max())} the cell furthest from the paper's "
            f"layer 12 is {far['method']} {far['aggregation']} ({far['ours']:+.2f} vs "
            f"{far['paper (layer 12)']:+.2f}); rollouts within 0.10 of the paper's: "
            + (", ".join(f"{m} ({o:+.2f} vs {p:+.2f})" for m, o, p in
                         zip(near["method"], near["ours"], near["paper (layer 12)"])) or "none")
            + ".")
    alt = ("the single layer" if far["aggregation"] == "individual" else "the rollout")
    return text + _alt("a weaker rollout on our model", "each cell against the paper's value",
                       f"the outlier is {alt}"), ev


def fig7_why(res) -> tuple[str, pd.DataFrame]:
    """ALTI Figure 7: :func:`consistency_why`; then the headline claim's declared alternative
    cause (model B distilled from A on the task itself,
    :func:`cmixlib.book.claims.alternatives_alti.fig7_distillation_alternative`) and the other
    claims that fail. (IG's step count, checked by the run's frame ``ig_check``, cannot explain
    grad-L2 above ALTI: IG is below ALTI at either step count.)"""
    text, ev = consistency_why(res.result, res.frames["vs_alti"])
    head = next(c for c in claims_for("ALTI", "Figure 7") if c.headline)
    alt = alternative_text(head)
    other, _ = claims_outcome_why("ALTI", "Figure 7", "alti-fig7", secondary_only=True)
    text += f" {alt}." if alt else ""
    if not other.startswith("no claim fails"):
        text += f" Other claims: {other.split(' Alternative cause', 1)[0]}"
    return text, ev


def special_ranks_why(result: pd.DataFrame, others: tuple[str, ...],
                      repo: pd.DataFrame | None = None) -> tuple[str, pd.DataFrame]:
    """ALTI Figure 6: ALTI's mean normalised rank of the special tokens against each method the
    claim names, with z. Alternative cause: sampling noise, told apart by z; where a method is
    below ALTI outside noise and ``repo`` (the authors' repository's values for BERT: columns
    cmix_method, value) is given, the model instead, told apart by the same quantity on BERT
    (every named method above ALTI there: the model is what differs)."""
    t = result.set_index("method")
    rows = []
    for m in others:
        gap = float(t.loc[m, "mean"] - t.loc["alti", "mean"])
        se = float(np.sqrt(t.loc[m, "std"] ** 2 / t.loc[m, "n"]
                           + t.loc["alti", "std"] ** 2 / t.loc["alti", "n"]))
        rows.append({"method": method_label(m), "rank": t.loc[m, "mean"],
                     "ALTI": t.loc["alti", "mean"], "method - ALTI": gap,
                     "z": gap / se if se else np.inf})
    ev = pd.DataFrame(rows).set_index("method")
    below = ev.index[ev["method - ALTI"] < 0]
    text = (f"ALTI gives the special tokens a mean normalised rank of "
            f"{t.loc['alti', 'mean']:.3f}; " + ", ".join(
                f"{m} {r['rank']:.3f}" for m, r in ev.iterrows())
            + (f": {', '.join(below)} below ALTI" if len(below) else ": all above ALTI") + ".")
    within = bool(len(below)) and bool((ev.loc[below, "z"].abs() <= Z_NOISE).all())
    if within or repo is None or not len(below):
        return text + _alt("sampling noise", "z", "within noise" if within else
                           "outside noise" if len(below) else "nothing to explain"), ev
    r = repo.set_index("cmix_method")["value"]
    same = [m for m in others if m in r.index and "alti" in r.index and r[m] > r["alti"]]
    return text + _alt(
        "our model rather than the method (the same quantity on the paper's BERT)",
        "the authors' repository's values for BERT", f"ALTI {r['alti']:.2f}, " + ", ".join(
            f"{method_label(m)} {r[m]:.2f}" for m in others if m in r.index)
        + (f": on BERT every named method is above ALTI, as the paper says; on our model "
           f"{', '.join(below)} fall(s) below ALTI (ALTI {t.loc['alti', 'mean']:.2f} against "
           f"BERT's {r['alti']:.2f}): the model, not sampling noise" if len(same) == len(
               [m for m in others if m in r.index]) else ": BERT's values do not show the "
           "claim either")), ev
