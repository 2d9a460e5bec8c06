"""The alternative causes of Value Zeroing's claims that fail on our run, each with the
measurement that tells it apart (the ``alternative`` of a claim in ``value_zeroing.json``;
registry: :data:`cmixlib.book.claims.alternatives.ALTERNATIVES`)."""
from __future__ import annotations

import itertools

import numpy as np

from cmixlib.book.claims.compare import Z_NOISE, Measured, gap_z, paired_gap_z, relation
from cmixlib.book.claims.rules_vz import HIGHLY
from cmixlib.book.claims.rules_vz import alignment_pairs, alignment_rows
from cmixlib.book.claims.rules_vz_probing import (compression_steps, compression_table, curves,
                                                  step_text)
from cmixlib.book.verdicts import ALPHA, permutation_p
from cmixlib.metrics.statistics import spearman
from cmixlib.book.claims.rules import example_holds
from cmixlib.book.runs import CONDITION_LABELS, run
from cmixlib.data.blimp import load_spacy
from cmixlib.experiments.examples import VZ_TABLE1
from cmixlib.book.depth_verdicts import pinned_variant
from cmixlib.methods.registry import method_label

__all__ = ["table2_power_alternative", "rollout_common_alternative", "mdl_noise_alternative", "layers_noise_alternative",
           "annotation_parse_alternative"]


def rollout_common_alternative() -> str:
    """The measurement for "GlobEnc and ALTI benefit from the rollout": the alternative cause is
    that every method's last single-layer map is weak, so any rollout would look better, told
    apart by the same comparison (rollout vs the last layer's single map,
    :func:`~cmixlib.book.claims.compare.relation`) for the other context-mixing methods of the
    ``rollout-depth`` run. Rule: some of them not above -> the benefit is not common to every
    method (named); all above -> it is, and the claim says nothing specific."""
    texts, not_above = [], set()
    for c in CONDITION_LABELS:
        d = pinned_variant(run("rollout-depth", c).result)
        L = int(d.layer.max())
        rel = {}
        for m in d.method.unique():
            if m in ("globenc_layer", "alti_layer", "random", "nearness"):
                continue
            cell = d[(d.method == m) & (d.layer == L)].set_index("aggregation")
            rel[m] = relation(*gap_z(cell.loc["rollout"], cell.loc["single"]))
        below = [m for m, r in rel.items() if r != "above"]
        not_above.update(below)
        texts.append(f"{CONDITION_LABELS[c]}: rollout not above the single map at layer {L} "
                     f"for {', '.join(method_label(m) for m in below) or 'none'} of "
                     f"{len(rel)} other methods")
    return "; ".join(texts) + (": the benefit is not common to every method"
                               if not_above else ": every method benefits alike")


def mdl_noise_alternative() -> str:
    """The measurement for a fall of compression from one layer to the next, whose alternative
    cause is the run-to-run noise of the MDL estimate (probe initialisation and data order): the
    probe repeated with several seeds per layer, each step paired by seed (:func:`compression_steps`). Per condition, each falling step (mean
    difference below 0; none falling: the last layer's step) with its mean difference, standard
    error and z; rule: below 0 by more than 2 standard errors -> "outside noise: the fall is
    real on this model"; a fall within 2 -> "within noise: a tie, not a fall"; a rise -> "a
    rise"."""
    parts, n = [], 0
    for c in CONDITION_LABELS:
        table, _ = compression_table(c)
        n = table.shape[1]
        steps = compression_steps(table)
        show = steps[steps["mean"] < 0] if (steps["mean"] < 0).any() else steps.iloc[[-1]]
        notes = []
        for k, s in show.iterrows():
            verdict = ("a rise" if s["mean"] > 0 else "one probe seed: the noise is not "
                       "measured" if n < 2 else "outside noise: the fall is real on this model"
                       if s["kind"] == "fall" else "within noise: a tie, not a fall")
            notes.append(f"{step_text(int(k), s)}: {verdict}")
        parts.append(f"{CONDITION_LABELS[c]}, " + "; ".join(notes))
    return (f"repeating the probe with {n} seeds per layer and pairing each step by seed (a fall is outside noise when its mean difference is below 0 by more than "
            f"{Z_NOISE:g} standard errors): " + " | ".join(parts))


def layers_noise_alternative(condition: str, a: str, b: str,
                             metrics: tuple[str, ...] = ("dot", "ap")) -> str:
    """The measurement for an every-layer claim "``a`` above ``b``" of the cue-alignment run
    failing, whose alternative cause is sampling noise: at each layer where ``a`` is not above
    ``b``, the paired gap and its z (:func:`~cmixlib.book.claims.compare.paired_gap_z`; the
    unpaired one where the run keeps no pairs). Rule: |z| > 2 -> outside noise (the difference
    is real on this run); else within noise."""
    parts = []
    for metric in metrics:
        rows = alignment_rows(condition, metric)
        pairs = alignment_pairs(condition, metric)
        for layer, d in rows.groupby("layer", sort=True):
            d = d.set_index("method")
            gap, z = paired_gap_z(pairs, int(layer), a, b) or gap_z(d.loc[a], d.loc[b])
            if relation(gap, z) != "above":
                parts.append(f"{metric} layer {int(layer)}: {method_label(a)} minus "
                             f"{method_label(b)} {gap:+.3f} (z = {z:+.1f}, "
                             f"{'outside' if abs(z) > Z_NOISE else 'within'} noise)")
    return ("the paired gap at each layer where it fails: " + "; ".join(parts)) if parts else \
        "no layer where it fails"


def annotation_parse_alternative() -> str:
    """The measurement for VZ Table 1's caption failing (an example whose underlined cue words
    our annotation does not mark exactly): the alternative cause is the parse (another spaCy
    model than the authors'), told apart by our parse of that example: for each underlined word
    we do not mark, its dependency and head (:func:`cmixlib.data.blimp.load_spacy`). Rule: every
    such word attached to a word we mark -> the parse has the paper's phrase and our rule (which
    words of it to mark) is what differs; else the parse may be the cause."""
    rows = run("paper-examples").result
    rows = rows[(rows["item"] == "VZ Table 1") & ~rows["headline"].astype(bool)]
    examples = {ex["uid"]: ex for ex in VZ_TABLE1}
    nlp = load_spacy()
    texts, attached = [], True
    for _, r in rows.iterrows():
        if example_holds(r):
            continue
        uid = str(r["claim"]).split(":", 1)[0]
        ours = set(str(r["value"]).split())
        doc = nlp(examples[uid]["good"])
        for word in [w for w in examples[uid]["cues"] if w not in ours]:
            tok = next(t for t in doc if t.text == word)
            attached = attached and tok.head.text in ours
            texts.append(f"{uid}: '{word}' is {tok.dep_} of '{tok.head.text}' in our parse "
                         f"(we mark {', '.join(sorted(ours))})")
    if not texts:
        return "every example marked as the paper underlines it"
    return ("our parse of the examples we mark otherwise: " + "; ".join(texts) + ": "
            + ("the parse has the paper's phrase; our rule (which of its words to mark) is what "
               "differs" if attached else "the parse differs from the paper's phrase: it may be "
               "the cause"))


def table2_power_alternative(condition: str) -> Measured:
    """The measurement for VZ Table 2's "highly positively correlated" not holding clearly,
    whose alternative cause is that a Spearman over so few layers cannot be told from chance:
    the smallest rho whose exact one-sided permutation p over the run's L layers is at most
    :data:`~cmixlib.book.verdicts.ALPHA` (every order of L ranks enumerated; L <= 8), beside
    Value Zeroing's rho (seed 0's curve) and its p. Rule: Value Zeroing's rho at least
    :data:`~cmixlib.book.claims.rules_vz.HIGHLY` but below that smallest rho -> the number of
    layers, not the value, leaves it undecided (the alternative holds); else it does not
    explain the outcome."""
    x, table = curves(condition, "value_zeroing")
    y = table[table.columns[0]].to_numpy()
    n = len(x)
    rho, p = permutation_p(x, y)[:2]
    if n > 8:
        return Measured(f"{n} layers: too many orders to enumerate; p = {p:.3f}", None)
    ranks = np.arange(n, dtype=float)
    all_rhos = np.array([spearman(ranks, np.array(o, dtype=float))
                         for o in itertools.permutations(range(n))])
    reach = [r for r in np.unique(all_rhos) if (all_rhos >= r - 1e-12).mean() <= ALPHA]
    needed = float(min(reach)) if reach else float("nan")
    holds = bool(HIGHLY <= rho < needed - 1e-9)          # ties of rho: float round-off
    return Measured(f"over {n} layers a Spearman must reach {needed:+.2f} for p <= {ALPHA:g}; "
                    f"Value Zeroing's {rho:+.2f} has p = {p:.3f}: "
                    + ("the number of layers, not the value, leaves it undecided" if holds
                       else "the number of layers does not explain the outcome"), holds)
