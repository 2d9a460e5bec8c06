"""The verdict of the items that hold no result a rule could test: diagrams, and example maps
about which the papers state nothing (:data:`NO_CLAIM`, with what they show and where the book
draws its own). The papers' example items that carry claims (Value Zeroing's Table 1 and
Figure 4, ALTI's Tables 1 and 3-9, GlobEnc's Figure 1 and A.2/A.3) are decided by their claims
(:mod:`cmixlib.book.claims`, from the book run "paper-examples" and the figures' sentences).
"""
from __future__ import annotations

from cmixlib.book.verdicts import NO_CLAIM

__all__ = ["NO_CLAIM", "no_claim"]


def no_claim(what: str) -> str:
    """The detail of a :data:`NO_CLAIM` item: what it is and where the book draws it."""
    return f"{NO_CLAIM}: {what}"
