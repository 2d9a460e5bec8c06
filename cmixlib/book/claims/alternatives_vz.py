"""The alternative causes of Value Zeroing's claims that fail on our run, each with the
measurement that tells it apart (the ``alternative`` of a claim in ``value_zeroing.json``;
registry: :data:`cmixlib.book.claims.alternatives.ALTERNATIVES`)."""
from __future__ import annotations

from cmixlib.book.claims.compare import gap_z, relation
from cmixlib.book.runs import CONDITION_LABELS, run
from cmixlib.book.depth_verdicts import pinned_variant
from cmixlib.methods.registry import method_label

__all__ = ["rollout_common_alternative"]


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
