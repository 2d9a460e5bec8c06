"""Why an item differs from its paper: one sentence from the run's values, and its evidence.

The reproduction status (:mod:`cmixlib.reproduction`) marks an item "differs" when its headline
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

from .registry import method_label

__all__ = ["alignment_why", "probes_why", "consistency_why", "rollout_vs_single_why",
           "claims_why", "Z_NOISE", "ITEM_WHYS"]

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
                  context_mixing: list[str] | None = None) -> tuple[str, pd.DataFrame]:
    """Where "``method`` has the highest alignment in every layer" fails, on a ``vz-cue-alignment``
    result (columns method, layer (0-based), metric, mean, std, n).

    Evidence: per layer, ``method``'s mean, the best other method and its mean, the gap and its
    size in standard errors, z = gap / sqrt(s_a^2/n_a + s_b^2/n_b) (unpaired: the examples are
    the same, so this is conservative when the two scores correlate positively). Rule for the
    sentence: the layers where a method is above ``method`` and which; the largest gap and its z
    ("within sampling noise" iff z <= :data:`Z_NOISE`); and, when ``context_mixing`` is given,
    in how many layers ``method`` is above every one of those methods."""
    r = result[result["metric"] == metric].copy()
    r["layer"] = r["layer"].astype(int) + 1
    mean = r.pivot(index="layer", columns="method", values="mean").sort_index()
    std = r.pivot(index="layer", columns="method", values="std").sort_index()
    n = r.pivot(index="layer", columns="method", values="n").sort_index()
    rows = []
    for layer in mean.index:
        others = mean.loc[layer].drop(method)
        best = str(others.idxmax())
        gap = float(others[best] - mean.loc[layer, method])
        se = float(np.sqrt(std.loc[layer, best] ** 2 / n.loc[layer, best]
                           + std.loc[layer, method] ** 2 / n.loc[layer, method]))
        above = [m for m in others.index if others[m] > mean.loc[layer, method]]
        rows.append({"layer": layer, method_label(method): mean.loc[layer, method],
                     "best other": method_label(best), "its value": others[best], "gap": gap,
                     "z": gap / se if se > 0 else np.inf, "above it": _labels(above) or "none"})
    ev = pd.DataFrame(rows).set_index("layer")
    bad = ev.index[ev["gap"] > 0]
    if not len(bad):
        return f"{method_label(method)} is above every other method in every layer.", ev
    worst = ev.loc[bad, "gap"].idxmax()
    leaders = sorted({m for s in ev.loc[bad, "above it"] for m in s.split(", ")})
    z = ev.loc[worst, "z"]
    noise = "within sampling noise" if z <= Z_NOISE else "far outside sampling noise"
    text = (f"{method_label(method)} is not the best-aligned method in layer(s) {_layers(bad)} of "
            f"{len(ev)}, where {', '.join(leaders)} score(s) higher (largest gap "
            f"{ev.loc[worst, 'gap']:.3f} in layer {worst}, z = {z:.1f}: {noise})")
    if context_mixing:
        cm = [m for m in context_mixing if m in mean.columns and m != method]
        lead = int((mean[method] > mean[cm].max(axis=1)).sum())
        text += (f"; among the context-mixing methods it is the best-aligned in {lead} of "
                 f"{len(ev)} layers")
    return text + ".", ev


def probes_why(results: dict[str, pd.DataFrame], method: str = "value_zeroing"
               ) -> tuple[str, pd.DataFrame]:
    """Why "``method`` needs the fewest probes" fails, per model condition (``results``:
    condition label -> ``vz-cue-alignment`` result). Evidence: the mean over layers of the mean
    probes needed (tokens scored above the best cue; fewer is better) per method and condition,
    and ``method``'s rank. Rule for the sentence: per condition, ``method``'s mean and rank and
    the methods needing fewer probes."""
    cols, parts = {}, []
    for cond, r in results.items():
        p = r[r["metric"] == "probes_needed"].groupby("method")["mean"].mean()
        cols[cond] = p
        fewer = p[p < p[method]].sort_values()
        parts.append(f"{cond}: {method_label(method)} {p[method]:.2f} probes on average, rank "
                     f"{int((p < p[method]).sum()) + 1} of {len(p)}"
                     + (f", behind {_labels(fewer.index)}" if len(fewer) else ""))
    ev = pd.DataFrame(cols).rename(index=method_label).sort_values(next(iter(cols)))
    return "; ".join(parts) + ".", ev


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


def claims_why(claims: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """For an item scored by claims with their evidence (frame with claim, holds, evidence,
    headline; e.g. the ``paper-examples`` run): the failed claims with their evidence, headline
    first. Rule: quote the evidence the run recorded for each failed claim."""
    ev = claims.set_index("claim")[["holds", "evidence"]]
    failed = claims[~claims["holds"].astype(bool)].sort_values("headline", ascending=False)
    if failed.empty:
        return "every claim holds.", ev
    return "; ".join(f"not {c} ({e})" for c, e in zip(failed["claim"], failed["evidence"])) \
        + ".", ev


# ---- the status page's items -----------------------------------------------------------------
def _vz_alignment(condition: str):
    def why():
        from .book_runs import run
        from .experiments import GRADIENT_METHODS

        r = run("cue-alignment", condition).result
        cm = [m for m in r["method"].unique() if m not in GRADIENT_METHODS and m != "random"]
        return alignment_why(r, context_mixing=cm)
    return why


def _vz_probes():
    from .book_runs import CONDITION_LABELS, run

    return probes_why({CONDITION_LABELS[c]: run("cue-alignment", c).result
                       for c in CONDITION_LABELS})


def _alti_fig7():
    from .book_runs import run

    res = run("alti-fig7")
    return consistency_why(res.result, res.frames["vs_alti"])


def _globenc_table2():
    from .book_runs import run
    from .reproduction import GLOBENC_TABLE2_METHODS

    res = run("globenc-correlations")
    return rollout_vs_single_why(res.frames["variants"], list(GLOBENC_TABLE2_METHODS))


def _example(item: str):
    def why():
        from .book_runs import run

        r = run("paper-examples").result
        return claims_why(r[r["item"] == item])
    return why


#: The investigation of each item that can differ, by (paper, item) as in
#: :data:`cmixlib.reproduction.ITEMS`: a function returning ``(sentence, evidence)``.
#: Value Zeroing's Table 3 has its own (:func:`cmixlib.reproduction.table3_why`, chapter 11).
ITEM_WHYS = {
    ("Value Zeroing", "Figure 1"): _vz_alignment("pretrained"),
    ("Value Zeroing", "Figure 2"): _vz_alignment("finetuned"),
    ("Value Zeroing", "Figure A.2"): _vz_probes,
    ("ALTI", "Figure 7"): _alti_fig7,
    ("GlobEnc", "Table 2"): _globenc_table2,
    ("Value Zeroing", "Table 1"): _example("VZ Table 1"),
    ("Value Zeroing", "Figure 4, Figures A.5-A.18"): _example("VZ Figure 4"),
    ("ALTI", "Tables 1, 3-9"): _example("ALTI Tables 1, 3-9"),
    ("GlobEnc", "Figure 1"): _example("GlobEnc Figure 1"),
}
