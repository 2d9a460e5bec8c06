"""The tests of Value Zeroing's §6 claims (probing, Figure 3 and Table 2) on the book's
``mdl-probing`` runs: compression per layer repeated over several probe seeds (frame
``compression_seeds``), so that a step between layers and a Spearman over layers carry the
probe's run-to-run noise; the docstrings state the rules."""
from __future__ import annotations

import numpy as np
import pandas as pd

from cmixlib.book.claims.compare import Z_NOISE, Outcome, combine, not_tested
from cmixlib.book.claims.rules_vz import GRADIENTS, HIGHLY
from cmixlib.book.identity import model_identities
from cmixlib.book.runs import CONDITION_LABELS, run
from cmixlib.book.verdicts import ALPHA, permutation_p
from cmixlib.methods.registry import method_label
from cmixlib.metrics.statistics import spearman

__all__ = ["compression_table", "compression_steps", "step_text", "seeds_note",
           "vz_compression_rises", "vz_compression_jumps", "vz_jumps_where_alignment_rises",
           "seed_spearmans", "vz_table2_high", "curves",
           "vz_table2_gradients_negative"]

_VZ = "value_zeroing"


def compression_table(condition: str) -> tuple[pd.DataFrame, int]:
    """``(layer x seed table of compression, the model's layer count)`` of one condition's
    ``mdl-probing`` run: frame ``compression_seeds`` (one column per probe seed), or the single
    seed of frame ``compression`` in a run made before the seeds."""
    res = run("mdl-probing", condition)
    d = res.frames.get("compression_seeds")
    d = res.frames["compression"].assign(seed=0) if d is None else d
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


def step_text(k: int, step: pd.Series) -> str:
    return (f"layer {k - 1}->{k} {step['mean']:+.2f} (se {step['se']:.2f}, "
            f"z = {step['z']:+.1f})")


def seeds_note(n: int) -> str:
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
        table, _ = compression_table(c)
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
                + step_text(int(k), s) for k, s in down.iterrows())))
    return Outcome(combine(parts), "mean compression by layer from "
                   + str(int(table.index.min())) + " (± std over the seeds): " + "; ".join(texts),
                   seeds_note(min(ns)))


def vz_compression_jumps() -> Outcome:
    """The fine-tuned jumps "at layers 4 and 9" of BERT's 12 layers. On a 12-layer model: the
    rises (mean over the probe seeds) at layers 4 and 9 are each above the median rise over
    layers 1..12 ("holds"), else "fails". On a model of another depth "not tested": where
    BERT's layers 4 and 9 fall in it is not defined; our fine-tuned rises per layer (mean ± std
    over the seeds of the paired differences) are printed."""
    table, layers = compression_table("finetuned")
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
                   seeds_note(table.shape[1]))


def vz_jumps_where_alignment_rises(condition: str = "finetuned") -> Outcome:
    """"a jump in probing performance ... the same layers for which we found a higher alignment
    with cue words", tested without BERT's layer numbers: the layer where Value Zeroing's cue
    alignment (dot product, ``cue-alignment``) rises most from the layer before is one of the
    two layers where compression (mean over the probe seeds) rises most relative to the layer
    before (the ratio c_k / c_(k-1): compression grows by orders of magnitude, so absolute rises
    would always favour the last layers). Rule: it is -> holds; else fails. Printed: both
    curves' steps."""
    x, table = curves(condition, _VZ)
    comp = table.mean(axis=1)
    ratio = (comp / comp.shift(1)).iloc[1:]
    rise = pd.Series(np.diff(x), index=comp.index[1:])
    if rise.empty:
        return not_tested("a model of one layer has no step between layers")
    top_align = int(rise.idxmax())
    top_jumps = [int(k) for k in ratio.sort_values(ascending=False).index[:2]]
    return Outcome("holds" if top_align in top_jumps else "fails",
                   f"{CONDITION_LABELS[condition]}: largest rise of Value Zeroing's alignment "
                   f"at layer {top_align} ({rise[top_align]:+.3f}); largest compression jumps "
                   f"at layer(s) " + ", ".join(f"{k} (x{ratio[k]:.2f})" for k in top_jumps)
                   + "; alignment steps " + ", ".join(
                       f"{int(k)} {v:+.3f}" for k, v in rise.items())
                   + "; compression ratios " + ", ".join(f"{int(k)} x{v:.2f}"
                                                         for k, v in ratio.items()),
                   f"compression: mean over {table.shape[1]} probe seeds; alignment: the run's "
                   "layer means")


def _table2(condition: str) -> pd.DataFrame:
    return run("mdl-probing", condition).result.set_index("method")


def curves(condition: str, method: str, metric: str = "dot") -> tuple[np.ndarray, pd.DataFrame]:
    """``method``'s mean cue alignment per layer (``metric``) and the layer x seed compression
    table over layers 1..L, in the same layer order."""
    table, _ = compression_table(condition)
    a = run("cue-alignment", condition).result
    a = a[(a.method == method) & (a.metric == metric)].sort_values("layer")
    return a["mean"].to_numpy(), table.loc[[int(k) + 1 for k in a["layer"]]]


def seed_spearmans(condition: str, method: str = _VZ, metric: str = "dot") -> list[float]:
    """Table 2's Spearman of ``method`` (its mean cue alignment per layer, ``metric``, from the
    ``cue-alignment`` run) against each probe seed's compression curve over layers 1..L
    (:func:`compression_table`): how much the probe's run-to-run noise moves the number."""
    x, table = curves(condition, method, metric)
    return [float(spearman(x, table[seed].to_numpy())) for seed in table.columns]


def _exact_p(condition: str, method: str, sign: float = 1.0) -> float:
    """The one-sided permutation p of ``method``'s Spearman over the layers (seed 0's curve;
    exact over every order of the layers, :func:`cmixlib.book.verdicts.permutation_p`), for a
    positive correlation (``sign`` 1) or a negative one (-1)."""
    x, table = curves(condition, method)
    return float(permutation_p(sign * x, table[table.columns[0]].to_numpy())[1])


def vz_table2_high(condition: str) -> Outcome:
    """"alignment according to Value Zeroing is highly positively correlated with the probing
    performance": Value Zeroing's Spearman over layers (seed 0: Table 2's number) at least
    :data:`~cmixlib.book.claims.rules_vz.HIGHLY` on every probe seed's curve
    (:func:`seed_spearmans`), and told from no correlation: its exact one-sided permutation p
    over the layers at most :data:`~cmixlib.book.verdicts.ALPHA` (6 layers: rho 0.66 has p
    0.09). Rule: every seed at least HIGHLY and p <= ALPHA -> holds; no seed at least HIGHLY ->
    fails; else tie. The best other method is printed beside (the claim is about Value
    Zeroing's value, not its rank)."""
    t = _table2(condition)["spearman"]
    others = t.drop(index=[_VZ])
    best = str(others.idxmax())
    rhos = seed_spearmans(condition)
    p = _exact_p(condition, _VZ)
    high = [r >= HIGHLY for r in rhos]
    outcome = ("holds" if all(high) and p <= ALPHA else "fails" if not any(high) else "tie")
    return Outcome(outcome, f"{method_label(_VZ)} {t[_VZ]:+.2f} (one-sided p = {p:.3f}, exact "
                   f"over the layer orders; best other {method_label(best)} "
                   f"{others[best]:+.2f}); over {len(rhos)} probe seeds {min(rhos):+.2f} to "
                   f"{max(rhos):+.2f}",
                   f"Spearman over {int(_table2(condition)['n_layers'].iloc[0])} layer means; "
                   "the spread: one compression curve per probe seed")


def vz_table2_gradients_negative(condition: str) -> Outcome:
    """"a highly negative correlation with probing results" for the gradient methods: each one's
    Spearman over layers at most -:data:`~cmixlib.book.claims.rules_vz.HIGHLY`, with its exact
    one-sided p (for a negative correlation) at most :data:`~cmixlib.book.verdicts.ALPHA`. Rule:
    all -> holds; none at most -HIGHLY -> fails; else tie."""
    t = _table2(condition)["spearman"]
    vals = {g: float(t[g]) for g in GRADIENTS if g in t.index}
    ps = {g: _exact_p(condition, g, sign=-1.0) for g in vals}
    low = [v <= -HIGHLY for v in vals.values()]
    sig = all(p <= ALPHA for p in ps.values())
    return Outcome("holds" if all(low) and sig else "fails" if not any(low) else "tie",
                   ", ".join(f"{method_label(g)} {v:+.2f} (p = {ps[g]:.3f})"
                             for g, v in vals.items()),
                   f"Spearman over {int(_table2(condition)['n_layers'].iloc[0])} "
                   "layer means; one-sided p exact over the layer orders")
