"""The three papers' claims, in their own words, as data.

One JSON file per paper (``value_zeroing.json``, ``alti.json``, ``globenc.json``, package data)
lists every claim the paper makes about each numbered item (table or figure) and the claims of
its text that the book tests: the verbatim quote, where it is (section or caption), its scope
(methods, layers, tasks, metric, model condition) and the id of the test that decides it
(:data:`cmixlib.book.claims.rules.TESTS`). One claim per item is the item's headline (``"headline":
true``): the paper's main claim about it, which the item's verdict weights
(:func:`cmixlib.book.claims.rules.claims_verdict`,
:func:`cmixlib.book.claims.rules.table_verdict`).

Every quote is checked against the papers' texts (:func:`quote_in_text`, tests/test_claims.py):
only whitespace and hyphenated line breaks are normalised. The texts live beside the clone in
``../shared/seeds`` (:func:`seeds_dir`); readers of the book do not need them.

Example::

    from cmixlib.book.claims import claims_for
    for c in claims_for("ALTI", "Figure 6"):
        print(c.where, f'"{c.quote}"', c.test)
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["Claim", "PAPER_FILES", "load_claims", "claims_for", "claimed_items",
           "normalise_text", "quote_in_text", "seeds_dir", "seed_path"]

_HERE = Path(__file__).resolve().parent

#: The claims file of each paper (the papers' names as :mod:`cmixlib.data.paper_numbers` spells them).
PAPER_FILES = {"Value Zeroing": "value_zeroing.json", "ALTI": "alti.json",
               "GlobEnc": "globenc.json"}


@dataclass(frozen=True)
class Claim:
    """One claim of a paper: ``quote`` (verbatim), ``where`` (section or caption), ``scope``
    (methods, layers, tasks, metric, condition: what the claim is about), ``test`` (the id of
    its test) with ``args``, and whether it is its item's ``headline``. ``alternative``: where
    the claim can fail on our run, the cause other than the one the status page reads off our
    numbers, and the measurement that tells the two apart: ``{"cause": ..., "test": <id in
    cmixlib.book.claims.rules.ALTERNATIVES>, "args": {...}}``."""

    id: str
    paper: str
    item: str
    quote: str
    where: str
    test: str
    scope: dict[str, Any] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)
    headline: bool = False
    alternative: dict[str, Any] = field(default_factory=dict)

    def scope_text(self) -> str:
        """The scope for reading: "methods: ...; layers: ...; ..."."""
        return "; ".join(f"{k}: {v}" for k, v in self.scope.items())


@lru_cache(maxsize=None)
def _load(paper: str) -> tuple[Claim, ...]:
    data = json.loads((_HERE / PAPER_FILES[paper]).read_text(encoding="utf-8"))
    if data["paper"] != paper:
        raise ValueError(f"{PAPER_FILES[paper]} is about {data['paper']!r}, not {paper!r}")
    out = tuple(Claim(paper=paper, **{k: v for k, v in c.items()}) for c in data["claims"])
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate claim ids in {PAPER_FILES[paper]}")
    return out


def load_claims(paper: str | None = None) -> list[Claim]:
    """Every claim of ``paper`` (None: of the three papers), in the files' order."""
    papers = [paper] if paper is not None else list(PAPER_FILES)
    unknown = [p for p in papers if p not in PAPER_FILES]
    if unknown:
        raise KeyError(f"no claims file for {unknown}; known: {', '.join(PAPER_FILES)}")
    return [c for p in papers for c in _load(p)]


def claims_for(paper: str, item: str) -> list[Claim]:
    """The claims about one status row (``item`` as :data:`cmixlib.book.reproduction.ITEMS` names
    it), headline first."""
    rows = [c for c in load_claims(paper) if c.item == item]
    return sorted(rows, key=lambda c: not c.headline)


def claimed_items(paper: str) -> list[str]:
    """The status rows that ``paper``'s claims are about, in the file's order."""
    return list(dict.fromkeys(c.item for c in load_claims(paper)))


def seed_file(paper: str) -> str:
    """The file name of ``paper``'s text in the seeds folder."""
    return json.loads((_HERE / PAPER_FILES[paper]).read_text(encoding="utf-8"))["seed"]


def seeds_dir() -> Path | None:
    """The papers' texts: ``$CMIX_SEEDS`` if set, else the first ``shared/seeds`` folder beside
    a parent of this package (the clone's ``../shared/seeds``); None when there is none."""
    env = os.environ.get("CMIX_SEEDS")
    if env:
        return Path(env) if Path(env).is_dir() else None
    for parent in _HERE.parents:
        cand = parent / "shared" / "seeds"
        if cand.is_dir():
            return cand
    return None


def seed_path(paper: str) -> Path | None:
    """The path of ``paper``'s text, or None when the seeds are absent."""
    d = seeds_dir()
    return d / seed_file(paper) if d is not None else None


def normalise_text(text: str) -> str:
    """The only normalisation before a quote is looked up: a hyphen at a line break joins the
    two halves ("infor-\\nmation" -> "information"), and every run of whitespace becomes one
    space."""
    text = re.sub(r"(\w)-\s*\n\s*(\w)", r"\1\2", text)
    return re.sub(r"\s+", " ", text).strip()


def quote_in_text(quote: str, text: str) -> bool:
    """Whether ``quote`` occurs verbatim in ``text`` (both :func:`normalise_text`-ed)."""
    return normalise_text(quote) in normalise_text(text)
