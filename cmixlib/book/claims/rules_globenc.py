"""The tests of GlobEnc's claims (``globenc.json``), each on the book's runs; the docstrings
state the rules. Figure 1's and Figures A.2/A.3's claims are tested on the figure's two
sentences ("a deep and meaningful film ." and "big fat waste of time .", sentiment words
*meaningful* and *waste*) with the SST-2 classifier of ``globenc-correlations``, rolled out as
GlobEnc's code does (:func:`cmixlib.experiments.saliency.rollout_maps`, raw maps, no identity).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from cmixlib.book.claims.compare import (SE_NOTE, Outcome, combine, gap_z, layers_text,
                                         not_tested, relation)
from cmixlib.book.notebook import quick_mode
from cmixlib.book.runs import run, run_arguments
from cmixlib.experiments.globenc import GLOBENC_METHODS
from cmixlib.experiments.saliency import experiment_inputs, rollout_maps, text_example
from cmixlib.methods.registry import method_label

__all__ = ["TABLE2_METHODS", "FIG3_HEADLINE", "TABLE2_HEADLINE", "FIG1_SENTENCES",
           "almost_every_layer", "fig3_claims", "table2_claims", "ge_table1_best", "ge_table2",
           "ge_fig3", "ge_fig1", "fig1_maps", "fig3_headline", "content_positions", "TASKS",
           "FLATTEN_SHARE", "ge_table1_above", "FOCUS_TOP"]

#: GlobEnc's Table 2 methods (N, N-Res, N-Enc), in the book's names.
TABLE2_METHODS = ("attn_norm", "attn_norm_res", "globenc_layer")
#: Figure 3's headline claim (its caption), the key of its outcome in :func:`fig3_claims`.
FIG3_HEADLINE = "N-Enc has the highest correlation in almost every layer"
#: Table 2's headline claim, the key of its outcome in :func:`table2_claims`.
TABLE2_HEADLINE = ("rollout correlates more than the single layer at the last layer, for N, "
                   "N-Res and N-Enc")
#: "focuses on the relevant words": the named word among this many top content tokens.
FOCUS_TOP = 2
#: Figure 1's sentences and the sentiment word the text names for each.
FIG1_SENTENCES = (("a deep and meaningful film .", "meaningful"),
                  ("big fat waste of time .", "waste"))
TASKS = ("SST-2", "MNLI", "HateXplain")
_REL = {"above": "holds", "below": "fails", "tie": "tie"}


def _run(name: str):
    return run(name)


def almost_every_layer(flags: pd.Series) -> bool:
    """Rule for "almost every layer": the claim holds in every layer but at most one (and in at
    least one)."""
    flags = pd.Series(flags).astype(bool)
    return bool(len(flags)) and int((~flags).sum()) <= 1


#: "flatten out after only a few layers": the share of the rise made by the middle layer.
FLATTEN_SHARE = 0.75


def fig3_claims(result: pd.DataFrame, task: str = "SST-2") -> pd.Series:
    """Figure 3's claims on ``globenc-correlations``'s result (rollout rows of ``task``): the
    caption's headline (:data:`FIG3_HEADLINE`, :func:`almost_every_layer`); N above W and N-Res
    above W-Res almost in all layers, one claim each; "the correlation curves flatten out after
    only a few layers": N-Enc's curve has made at least :data:`FLATTEN_SHARE` of its rise from
    layer 1 to L by the middle layer ceil(L/2) (the paper's BERT, Table 2: -0.47, +0.74, +0.77
    at layers 1, 6, 12, 98%)."""
    r = result[(result.task == task) & (result.aggregation == "rollout")]
    t = r.pivot(index="layer", columns="method", values="mean").sort_index()
    enc = t["globenc_layer"]
    L, mid = int(t.index.max()), int(-(-t.index.max() // 2))
    return pd.Series({
        FIG3_HEADLINE: almost_every_layer(enc > t.drop(columns="globenc_layer").max(axis=1)),
        "N above W in almost every layer": almost_every_layer(t["attn_norm"] > t["attention"]),
        "N-Res above W-Res in almost every layer":
            almost_every_layer(t["attn_norm_res"] > t["w_res"]),
        "the N-Enc curve flattens (reaches at least 3/4 of its rise by the middle layer)":
            bool(enc[mid] - enc[1] >= FLATTEN_SHARE * (enc[L] - enc[1])),
    })


def table2_claims(result: pd.DataFrame, task: str = "SST-2") -> pd.Series:
    """Table 2's claim ("applying rollout ... results in higher correlations ... than the raw
    single layer attribution maps, especially in deeper layers") for N, N-Res and N-Enc:
    rollout above the single layer at the last layer (:data:`TABLE2_HEADLINE`), at the middle
    layer (the paper's 6 of 12: ours L // 2) and at the best layer of each (MAX)."""
    r = result[result.task == task]
    m = list(TABLE2_METHODS)
    piv = lambda agg: r[r.aggregation == agg].pivot(  # noqa: E731
        index="layer", columns="method", values="mean")[m]
    roll, ind = piv("rollout"), piv("individual")
    L, mid = int(roll.index.max()), max(1, int(roll.index.max()) // 2)
    return pd.Series({
        TABLE2_HEADLINE: bool((roll.loc[L] > ind.loc[L]).all()),
        "... at the middle layer, for N, N-Res and N-Enc":
            bool((roll.loc[mid] > ind.loc[mid]).all()),
        "... at the best layer of each (MAX), for N, N-Res and N-Enc":
            bool((roll.max() > ind.max()).all()),
    })


def ge_table1_best(task: str) -> Outcome:
    """"incorporating the vector norms, residual connection, and both layer normalizations
    yields the highest correlation": N-Enc's last-layer rollout (raw, GlobEnc's code) above each
    other setting of the task, by :func:`~cmixlib.book.claims.compare.relation`."""
    r = _run("globenc-correlations").result
    r = r[(r.task == task) & (r.aggregation == "rollout") & (r.layer == r.layer.max())]
    t = r.set_index("method")
    parts, worst = [], None
    for m in t.index.drop("globenc_layer"):
        gap, z = gap_z(t.loc["globenc_layer"], t.loc[m])
        parts.append(_REL[relation(gap, z)])
        if worst is None or z < worst[1]:
            worst = (m, z)
    return Outcome(combine(parts), f"{task}: N-Enc {t.loc['globenc_layer', 'mean']:+.3f}; "
                   f"closest {method_label(worst[0])} {t.loc[worst[0], 'mean']:+.3f} "
                   f"(z = {worst[1]:+.1f})", SE_NOTE)


def ge_table1_above(task: str, pairs: list[list[str]]) -> Outcome:
    """A Table 1 claim that one setting beats another ("the significant gap between weight-based
    and norm-based settings", "a consistent improvement" of N-FixedRes over N, the W-Res/
    W-FixedRes "huge performance gap", the "sudden drop" of N-ResLN): for each ``[better,
    worse]`` of ``pairs``, the last-layer rollout (raw, GlobEnc's code) of ``better`` above
    ``worse`` on ``task`` by :func:`~cmixlib.book.claims.compare.relation`, combined."""
    r = _run("globenc-correlations").result
    t = r[(r.task == task) & (r.aggregation == "rollout")
          & (r.layer == r.layer.max())].set_index("method")
    parts, texts = [], []
    for better, worse in pairs:
        gap, z = gap_z(t.loc[better], t.loc[worse])
        parts.append(_REL[relation(gap, z)])
        texts.append(f"{method_label(better)} {t.loc[better, 'mean']:+.3f} vs "
                     f"{method_label(worse)} {t.loc[worse, 'mean']:+.3f} (z = {z:+.1f})")
    return Outcome(combine(parts), f"{task}: " + "; ".join(texts), SE_NOTE)


def ge_table2() -> Outcome:
    """Table 2's headline ("applying rollout ... results in higher correlations ... than the raw
    single layer attribution maps, especially in deeper layers") on SST-2, per method (N, N-Res,
    N-Enc) at the last layer: the rollout against the single layer by
    :func:`~cmixlib.book.claims.compare.relation` (the run's std and n), combined; the middle
    layer and each method's best layer (MAX) printed with their values, per method."""
    r = _run("globenc-correlations").result
    r = r[r.task == "SST-2"]
    L = int(r.layer.max())
    mid = max(1, L // 2)
    parts, texts = [], []
    for m in TABLE2_METHODS:
        d = r[r.method == m]
        cell = lambda agg, layer: d[(d.aggregation == agg)  # noqa: E731
                                    & (d.layer == layer)].iloc[0]
        gap, z = gap_z(cell("rollout", L), cell("individual", L))
        parts.append(_REL[relation(gap, z)])
        best = {agg: d[d.aggregation == agg]["mean"].max() for agg in ("rollout", "individual")}
        texts.append(f"{method_label(m)}: layer {L} rollout {cell('rollout', L)['mean']:+.2f} "
                     f"vs single {cell('individual', L)['mean']:+.2f} (z = {z:+.1f}, "
                     f"{_REL[relation(gap, z)]}); layer {mid} "
                     f"{cell('rollout', mid)['mean']:+.2f} vs "
                     f"{cell('individual', mid)['mean']:+.2f}; MAX {best['rollout']:+.2f} vs "
                     f"{best['individual']:+.2f}")
    return Outcome(combine(parts), "; ".join(texts), SE_NOTE)


def fig3_headline(result: pd.DataFrame, task: str) -> tuple[str, str, pd.DataFrame]:
    """Figure 3's caption, "N-Enc achieves the highest correlation in almost every layer", on
    ``task``'s rollout rows, with sampling noise: per layer, N-Enc against every other setting by
    :func:`~cmixlib.book.claims.compare.relation` (2 standard errors): "highest" when above
    every one, "below" when one is clearly above it, else "tie". Rule: holds when at most one
    layer is not "highest"; fails when more than one is "below"; else tie. Returns
    ``(outcome, text, per-layer table)``."""
    r = result[(result.task == task) & (result.aggregation == "rollout")]
    rows = []
    for layer, g in r.groupby("layer"):
        g = g.set_index("method")
        rel = {m: relation(*gap_z(g.loc["globenc_layer"], g.loc[m]))
               for m in g.index if m != "globenc_layer"}
        best = g.drop(index="globenc_layer")["mean"].idxmax()
        gap, z = gap_z(g.loc["globenc_layer"], g.loc[best])
        state = ("below" if "below" in rel.values() else
                 "highest" if all(v == "above" for v in rel.values()) else "tie")
        rows.append({"layer": int(layer), "N-Enc": float(g.loc["globenc_layer", "mean"]),
                     "best other": method_label(best), "its value": float(g.loc[best, "mean"]),
                     "z": z, "state": state})
    t = pd.DataFrame(rows).set_index("layer")
    not_top = t.index[t.state != "highest"]
    below = t.index[t.state == "below"]
    outcome = ("holds" if len(not_top) <= 1 else "fails" if len(below) > 1 else "tie")
    parts = [f"{s} in layer(s) {layers_text(list(t.index[t.state == s]))}"
             for s in ("highest", "tie", "below") if (t.state == s).any()]
    detail = "; ".join(f"layer {k}: N-Enc {t.loc[k, 'N-Enc']:+.3f} vs {t.loc[k, 'best other']} "
                       f"{t.loc[k, 'its value']:+.3f} (z = {t.loc[k, 'z']:+.1f})"
                       for k in not_top)
    return outcome, f"{task}: " + ", ".join(parts) + (f" [{detail}]" if detail else ""), t


def ge_fig3(claim: int) -> Outcome:
    """Claim ``claim`` (0: the headline, by :func:`fig3_headline`, with sampling noise; 1:
    norm-based above weight-based (both pairs), 2: the curve flattens, by :func:`fig3_claims`,
    point comparisons) on every task of the run, combined
    (:func:`~cmixlib.book.claims.compare.combine`)."""
    r = _run("globenc-correlations").result
    parts, texts = [], []
    for task in [t for t in TASKS if t in set(r.task)]:
        if claim == 0:
            outcome, text, _ = fig3_headline(r, task)
            parts.append(outcome)
            texts.append(text)
            continue
        c = fig3_claims(r, task)
        ok = bool(c.iloc[1] and c.iloc[2]) if claim == 1 else bool(c.iloc[3])
        parts.append("holds" if ok else "fails")
        texts.append(f"{task}: {'yes' if ok else 'no'}")
    return Outcome(combine(parts), "; ".join(texts),
                   SE_NOTE if claim == 0 else
                   "per-layer means; point comparison per layer (the rule counts layers)")


@lru_cache(maxsize=2)
def fig1_maps(quick: bool) -> tuple[tuple[list[str], dict[str, np.ndarray], int], ...]:
    """Per Figure 1 sentence: tokens, rolled-out maps (L, n, n) of every GlobEnc setting, and
    the sentiment word's position (``quick``: the mode, part of the cache key only)."""
    exp, _, settings = run_arguments("globenc-correlations")
    settings = {k: v for k, v in settings.items() if k != "tasks"}
    clf, _, _ = experiment_inputs(exp, settings, "sst2", data=False)
    out = []
    for text, word in FIG1_SENTENCES:
        ex = text_example(clf.tokenizer, text)
        out.append((list(ex["tokens"]), rollout_maps(clf, ex, GLOBENC_METHODS),
                    list(ex["tokens"]).index(word)))
    return tuple(out)


def content_positions(tokens: list[str]) -> list[int]:
    return [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]", "<s>", "</s>")]


def ge_fig1(claim: str) -> Outcome:
    """Figure 1's claims (and A.2's, A.3's) on its two sentences, N-Enc rollout:

    * "focus" ("focuses on the relevant words ... 'meaningful' and 'waste'"): at the last layer
      the sentiment word is among the :data:`FOCUS_TOP` largest weights of the [CLS] row's
      content tokens (not [CLS]/[SEP]), in both sentences (a sentence can hold more than one
      relevant word: "a deep and meaningful film");
    * "self": at layer 1 the [CLS] row's weight on itself is above every other token's;
    * "shift": the sentiment word's weight in the [CLS] row is higher at the last layer than at
      layer 1;
    * "plausible" (A.2): the sentiment word's share of the [CLS] row's content weight at the
      last layer is at least every other setting's (ties within 0.005 count as ties);
    * "rows" (A.3): in more than half of the content rows other than the word's own, the
      largest weight on another content token is on the sentiment word.

    Two sentences (the paper's): no sampling uncertainty to estimate."""
    try:
        maps = fig1_maps(quick_mode())
    except Exception as err:       # the classifier is not available: say so, never guess
        return not_tested(f"the SST-2 classifier could not be loaded ({err})")
    parts, texts = [], []
    for tokens, m, w in maps:
        enc, content = m["globenc_layer"], content_positions(tokens)
        word = tokens[w]
        if claim == "focus":
            row = enc[-1, 0, content]
            order = [content[k] for k in np.argsort(-row)]
            ok = w in order[:FOCUS_TOP]
            texts.append(f"'{word}' ranks {order.index(w) + 1} of {len(order)} content tokens "
                         f"({enc[-1, 0, w]:.2f}); top {FOCUS_TOP + 1}: " + ", ".join(
                             f"'{tokens[k]}' {enc[-1, 0, k]:.2f}"
                             for k in order[:FOCUS_TOP + 1]))
        elif claim == "self":
            row = enc[0, 0]
            ok = bool(row[0] > np.delete(row, 0).max())
            texts.append(f"layer 1 [CLS] self {row[0]:.2f}, largest other "
                         f"{np.delete(row, 0).max():.2f}")
        elif claim == "shift":
            ok = bool(enc[-1, 0, w] > enc[0, 0, w])
            texts.append(f"'{word}' layer 1 {enc[0, 0, w]:.2f} -> layer {len(enc)} "
                         f"{enc[-1, 0, w]:.2f}")
        elif claim == "plausible":
            share = {k: float(v[-1, 0, w] / v[-1, 0, content].sum()) for k, v in m.items()}
            best_other = max((v, k) for k, v in share.items() if k != "globenc_layer")
            gap = share["globenc_layer"] - best_other[0]
            ok = "tie" if abs(gap) <= 0.005 else gap > 0
            texts.append(f"'{word}' share: N-Enc {share['globenc_layer']:.2f}, best other "
                         f"{method_label(best_other[1])} {best_other[0]:.2f}")
        elif claim == "rows":
            rows = [i for i in content if i != w]
            hits = 0
            for i in rows:
                cols = [j for j in content if j != i]
                hits += int(cols[int(np.argmax(enc[-1, i, cols]))] == w)
            ok = 2 * hits > len(rows)
            texts.append(f"'{word}' is the top context token of {hits} of {len(rows)} rows")
        else:
            raise KeyError(f"unknown Figure 1 claim {claim!r}")
        parts.append("tie" if ok == "tie" else "holds" if ok else "fails")
    return Outcome(combine(parts), "; ".join(texts),
                   "the paper's two sentences: no sampling uncertainty to estimate")
