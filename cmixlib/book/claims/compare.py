"""The comparisons the claim tests share, each with its uncertainty and a stated rule.

A claim's test returns an :class:`Outcome`: one of :data:`OUTCOMES`, our numbers and their
uncertainty. Two means are compared by :func:`relation`: "above"/"below" when their gap is
larger than :data:`Z_NOISE` standard errors, else "tie" (a tie is shown as a tie, never broken).
The runs store per method and layer the mean, the (population) std and n over examples, so the
standard error is std / sqrt(n) and the two errors are combined as if unpaired (the examples are
the same, so this is conservative when two methods' scores correlate positively); where a run
keeps the paired differences of two methods over the same examples (the cue-alignment runs'
``pairs``), :func:`paired_gap_z` uses their own standard error; where a run keeps per-example
values, :func:`paired_bootstrap` resamples the examples instead.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cmixlib.methods.registry import method_label

__all__ = ["Outcome", "Measured", "OUTCOMES", "Z_NOISE", "BOOTSTRAP", "SE_NOTE", "PAIRED_NOTE", "relation",
           "gap_z", "paired_gap_z", "layer_states",
           "layers_text", "every_layer", "combine", "paired_bootstrap", "not_run", "not_tested"]

#: The outcomes of a claim's test: "holds"; "fails"; "reversed" (the opposite holds clearly);
#: "tie" (within :data:`Z_NOISE` standard errors somewhere, nowhere against it); "not tested"
#: (the run lacks what the test needs: the outcome says what); "not run" (another model).
OUTCOMES = ("holds", "fails", "reversed", "tie", "not tested", "not run")
#: A gap of at most this many standard errors is a tie.
Z_NOISE = 2.0
#: Resamples of :func:`paired_bootstrap` (seed 0).
BOOTSTRAP = 2000
#: What the uncertainty of a mean-over-examples comparison is, for the page.
SE_NOTE = ("tie = gap within 2 standard errors (std/sqrt(n) of each mean, combined unpaired: "
           "conservative where the examples are the same)")
#: The same where the two methods' paired differences over the same examples are kept.
PAIRED_NOTE = ("tie = gap within 2 standard errors of the paired difference (std/sqrt(n) of "
               "the per-example differences between the two methods, same examples)")


class Measured(str):
    """An alternative cause's measurement (its text, a ``str``) and whether it finds the
    alternative cause at work: ``holds`` True (the failure may be the alternative's, not the
    method's), False (ruled out) or None (not told apart). The status page reads ``holds``:
    a headline that fails while its declared alternative holds leaves the item "not decided"
    (:func:`cmixlib.book.claims.status.claims_item`)."""

    holds: bool | None

    def __new__(cls, text: str, holds: bool | None = None) -> "Measured":
        obj = super().__new__(cls, text)
        obj.holds = holds
        return obj


@dataclass(frozen=True)
class Outcome:
    """A claim's outcome: ``outcome`` (one of :data:`OUTCOMES`), ``ours`` (the numbers the test
    read, printed) and ``uncertainty`` (how sure, or what is missing)."""

    outcome: str
    ours: str = ""
    uncertainty: str = ""

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")


def not_run(reason: str) -> Outcome:
    """The outcome of a claim about a model the book's runs do not use."""
    return Outcome("not run", "", reason)


def not_tested(reason: str) -> Outcome:
    """The outcome of a claim the runs hold nothing to test with (``reason`` says what)."""
    return Outcome("not tested", "", reason)


def gap_z(a: pd.Series, b: pd.Series) -> tuple[float, float]:
    """``(gap, z)`` of two rows with mean, std, n: gap = mean_a - mean_b,
    z = gap / sqrt(std_a^2/n_a + std_b^2/n_b) (inf when both errors are 0 and the gap is not)."""
    gap = float(a["mean"] - b["mean"])
    se = float(np.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"]))
    if se > 0:
        return gap, gap / se
    return gap, (0.0 if gap == 0 else float(np.sign(gap)) * np.inf)


def paired_gap_z(pairs: pd.DataFrame | None, layer: int, a: str, b: str
                 ) -> tuple[float, float] | None:
    """``(gap, z)`` of ``a`` minus ``b`` at ``layer`` from a frame of paired differences
    (columns layer, a, b, mean, std, n: the mean, std and count of a - b over the examples both
    score, :func:`cmixlib.metrics.paired.paired_alignment`): gap = the mean difference,
    z = gap / (std / sqrt(n)); None where the frame has no such pair."""
    if pairs is None:
        return None
    sign, lo, hi = (1.0, a, b) if a < b else (-1.0, b, a)
    row = pairs[(pairs["layer"] == layer) & (pairs["a"] == lo) & (pairs["b"] == hi)]
    if row.empty:
        return None
    r = row.iloc[0]
    gap, se = sign * float(r["mean"]), float(r["std"]) / np.sqrt(max(int(r["n"]), 1))
    if se > 0:
        return gap, gap / se
    return gap, (0.0 if gap == 0 else float(np.sign(gap)) * np.inf)


def relation(gap: float, z: float) -> str:
    """Rule: "above" iff z > :data:`Z_NOISE`, "below" iff z < -:data:`Z_NOISE`, else "tie"."""
    return "above" if z > Z_NOISE else "below" if z < -Z_NOISE else "tie"


def layers_text(layers: Iterable[int]) -> str:
    """[1, 2, 3, 5] -> "1-3, 5"."""
    v, out, i = sorted(int(x) for x in layers), [], 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[j + 1] == v[j] + 1:
            j += 1
        out.append(str(v[i]) if i == j else f"{v[i]}-{v[j]}")
        i = j + 1
    return ", ".join(out)


def layer_states(rows: pd.DataFrame, a: str, others: Sequence[str], *,
                 higher_is_better: bool = True, pairs: pd.DataFrame | None = None
                 ) -> tuple[dict[int, str], list[str]]:
    """Per layer, ``a`` against each of ``others`` (:func:`relation`; paired where ``pairs``
    has the pair, :func:`paired_gap_z`): "above" when above every one, "below" when below at
    least one, else "tie"; and, for each layer not above, a note naming the method that ties or
    beats ``a`` with both means and z. Returns ``({layer: kind}, notes)``."""
    sign = 1.0 if higher_is_better else -1.0
    per, notes = {}, []
    for layer, d in rows.groupby("layer", sort=True):
        d = d.set_index("method")
        if a not in d.index:
            raise KeyError(f"{a!r} has no row at layer {layer}")
        rel = {}
        for m in others:
            if m in d.index:
                gap, z = paired_gap_z(pairs, int(layer), a, m) or gap_z(d.loc[a], d.loc[m])
                rel[m] = (relation(sign * gap, sign * z), sign * z)
        if not rel:
            raise KeyError(f"none of {list(others)} has a row at layer {layer}")
        kinds = {r for r, _ in rel.values()}
        kind = "below" if "below" in kinds else "tie" if "tie" in kinds else "above"
        per[int(layer)] = kind
        if kind != "above":
            worst = min(rel, key=lambda m: rel[m][1])
            notes.append(f"layer {layer}: {method_label(a)} {d.loc[a, 'mean']:.3f} vs "
                         f"{method_label(worst)} {d.loc[worst, 'mean']:.3f} (z = "
                         f"{rel[worst][1]:+.1f}, {kind})")
    return per, notes


def every_layer(rows: pd.DataFrame, a: str, others: Sequence[str], *,
                higher_is_better: bool = True, what: str = "",
                pairs: pd.DataFrame | None = None) -> tuple[str, str]:
    """A claim "``a`` is better than each of ``others`` in every layer" on ``rows`` (columns
    method, layer (numbered from 1), mean, std, n); with ``pairs`` (the same layers' paired
    differences, :func:`paired_gap_z`) each gap is the paired one and its z the paired z.

    Rule, per layer (:func:`layer_states`): ``a`` against each other method by :func:`relation`
    (signs flipped when lower is better); the layer is "above" when ``a`` is above every one,
    "below" when it is below at least one, else "tie". The claim "holds" when every layer is
    above, "fails" when some layer is below, else "tie". Returns ``(outcome, text)``; the text
    names the layers of each kind and, for every layer that is not above, the method that ties
    or beats ``a`` with both means and z."""
    per, notes = layer_states(rows, a, others, higher_is_better=higher_is_better, pairs=pairs)
    groups = {k: [l for l, v in per.items() if v == k] for k in ("above", "tie", "below")}
    text = "; ".join(f"{k} in layer(s) {layers_text(v)}" for k, v in groups.items() if v)
    if notes:
        text += " [" + "; ".join(notes) + "]"
    outcome = "fails" if groups["below"] else "tie" if groups["tie"] else "holds"
    return outcome, (f"{what}: " if what else "") + text


def combine(outcomes: Sequence[str]) -> str:
    """The outcome of a claim tested in several places (metrics, conditions, tasks). Rule: every
    part reversed -> "reversed"; any part fails or is reversed -> "fails"; every part holds ->
    "holds"; any part not tested/not run (and none fails) -> "not tested"; else "tie"."""
    o = list(outcomes)
    if o and all(x == "reversed" for x in o):
        return "reversed"
    if any(x in ("fails", "reversed") for x in o):
        return "fails"
    if o and all(x == "holds" for x in o):
        return "holds"
    if any(x in ("not tested", "not run") for x in o):
        return "not tested"
    return "tie"


def paired_bootstrap(a: np.ndarray, b: np.ndarray, *, seed: int = 0,
                     level: float = 0.95) -> tuple[float, float, float]:
    """``(mean difference, low, high)``: the mean of a - b over paired examples and its
    percentile interval from :data:`BOOTSTRAP` resamples of the examples (seeded); with fewer
    than 2 examples the interval is undefined (NaN): one example says nothing of the spread."""
    d = np.asarray(a, float) - np.asarray(b, float)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        return (float(d.mean()) if len(d) else float("nan")), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(BOOTSTRAP, len(d)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(d.mean()), float(lo), float(hi)
