"""Alternative causes: for a claim that can fail on our run, the cause other than the one the
status page reads off our numbers, and the measurement that tells the two apart.

A claim declares its alternative in its paper's JSON file (``"alternative": {"cause": ...,
"test": <id>, "args": {...}}``); :data:`ALTERNATIVES` maps each id to the function that measures
it (:mod:`.alternatives_vz`, :mod:`.alternatives_alti`, :mod:`.alternatives_globenc`, and
:func:`parts_margin` for the overall claims); :func:`alternative_text` is the sentence the status
page prints in the item's *why* (:func:`cmixlib.book.claims.status.claims_why`)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from cmixlib.book.claims import Claim, load_claims
from cmixlib.book.claims import alternatives_alti as A
from cmixlib.book.claims import alternatives_globenc as G
from cmixlib.book.claims import alternatives_vz as V
from cmixlib.book.claims.rules import evaluate

__all__ = ["ALTERNATIVES", "measure", "alternative_text", "alternative_holds", "claim_by_id",
           "parts_margin"]


def claim_by_id(claim_id: str) -> Claim:
    """The claim with id ``claim_id`` (any paper)."""
    for c in load_claims():
        if c.id == claim_id:
            return c
    raise KeyError(f"no claim {claim_id!r}")


def parts_margin(claims: Sequence[str]) -> str:
    """The measurement behind an overall claim's alternative "it fails on a near miss in one
    evaluation": each part (a headline claim, by id) with its outcome and our numbers. Rule: a
    part *fails* only outside sampling noise (each test calls a gap within 2 standard errors, or
    a 95% interval that includes 0, a *tie*), so a failing part is not a near miss; the
    conclusion names the failing parts, or says that none fails clearly."""
    rows = [(claim_by_id(i), evaluate(claim_by_id(i))) for i in claims]
    failing = [o.outcome in ("fails", "reversed") for _, o in rows]
    bad = [c for (c, _), f in zip(rows, failing) if f]
    text = "; ".join(f"{c.item}: {o.outcome}" + (f" ({o.ours})" if f else "")
                     for (c, o), f in zip(rows, failing))
    return (f"the parts' outcomes: {text}. "
            + (f"{len(bad)} part(s) fail outside noise ({', '.join(c.item for c in bad)}):"
               f" not a near miss" if bad else "no part fails outside noise"))


#: Every alternative-cause measurement by id (the ``alternative`` of a claim in the papers'
#: JSON files): a function of the alternative's ``args`` returning the measurement, with its
#: numbers and the conclusion its docstring's rule draws.
ALTERNATIVES: dict[str, Callable[..., str]] = {
    "parts_margin": parts_margin,
    "alti_fig3_repository": A.fig3_repository_alternative,
    "alti_sva_paper_values": A.sva_lower_paper_alternative,
    "alti_depth_student": A.depth_student_alternative,
    "alti_fig7_distillation": A.fig7_distillation_alternative,
    "ge_fig1_gradient": G.fig1_gradient_alternative,
    "ge_fig3_noise": G.fig3_noise_alternative,
    "ge_plausibility": G.plausibility_alternative,
    "ge_fig4_readings": G.fig4_reading_alternative,
    "ge_fig5_thresholds": G.fig5_threshold_alternative,
    "vz_rollout_common": V.rollout_common_alternative,
    "vz_mdl_noise": V.mdl_noise_alternative,
    "vz_table2_power": V.table2_power_alternative,
    "vz_layers_noise": V.layers_noise_alternative,
    "vz_annotation_parse": V.annotation_parse_alternative,
}


def measure(claim: Claim) -> str | None:
    """The measurement of ``claim``'s declared alternative cause (:data:`ALTERNATIVES`; a
    :class:`~cmixlib.book.claims.compare.Measured` where the function says whether the
    alternative holds); None for a claim that declares none. KeyError for an unknown test."""
    alt = claim.alternative
    if not alt:
        return None
    if alt["test"] not in ALTERNATIVES:
        raise KeyError(f"claim {claim.id}: no alternative test {alt['test']!r}; known: "
                       f"{', '.join(ALTERNATIVES)}")
    return ALTERNATIVES[alt["test"]](**alt.get("args", {}))


def alternative_holds(claim: Claim) -> bool:
    """Whether ``claim``'s declared alternative cause is found at work by its measurement
    (:func:`measure` gives a :class:`~cmixlib.book.claims.compare.Measured` with ``holds``
    True); False for a claim without one, or a measurement that rules it out or cannot tell."""
    return getattr(measure(claim), "holds", None) is True


def alternative_text(claim: Claim) -> str | None:
    """"Alternative cause (<claim id>): <cause>; told apart by <measurement>" for a claim that
    declares an ``alternative`` (:func:`measure`); None for one that does not."""
    measured = measure(claim)
    if measured is None:
        return None
    return (f"Alternative cause ({claim.id}): {claim.alternative['cause']}; told apart by "
            f"{measured}")
