"""The terms of the BLiMP annotation rules (:mod:`cmixlib.data.blimp_rules`) that need no parse:
the two grammatical numbers (:data:`SINGULAR`, :data:`PLURAL`), the :class:`Cue` a cue rule
returns, and :func:`expand_contractions`, run on each sentence before it is parsed (its source
code is part of :func:`~cmixlib.data.blimp_rules.annotation_rules_hash`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: The two grammatical numbers of a BLiMP cue.
SINGULAR, PLURAL = "singular", "plural"

_NEG_CONTRACTION = re.compile(r"\b([A-Za-z]+)n't\b")

# the regex captures the part before "n't": "wo" (won't), "ca" (can't), "sha" (shan't)
_IRREGULAR_NEG = {"wo": "will", "ca": "can", "sha": "shall"}


def expand_contractions(sentence: str) -> str:
    """Expand negative contractions: ``doesn't`` -> ``does not``, ``won't`` -> ``will not``,
    ``can't`` -> ``can not``, ``shan't`` -> ``shall not`` (capitalisation of the first letter kept).

    These are the only contractions in the five paradigms; possessive ``'s`` is left alone.
    """
    def repl(m: re.Match) -> str:
        stem = m.group(1)
        full = _IRREGULAR_NEG.get(stem.lower(), stem.lower())
        if stem[0].isupper():
            full = full[0].upper() + full[1:]
        return f"{full} not"
    return _NEG_CONTRACTION.sub(repl, sentence)


@dataclass(frozen=True)
class Cue:
    """Result of a cue rule (see :func:`cmixlib.data.blimp_rules.cue_for`): ``indices``, the cue
    word positions in the Doc, and ``rule``, the name of the rule that found them; or
    ``indices = rule = None`` and a ``drop_reason`` (``cue_not_found``, ``unreliable_parse``)."""

    indices: list[int] | None
    rule: str | None
    drop_reason: str | None = None
