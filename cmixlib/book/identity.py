"""Which model a run ran on, as data: the one place the book reads a run's model identity.

A run's metadata carries its model twice: ``meta["model"]``, the display text of
:meth:`cmixlib.ModelBundle.describe` (one part per model, ``"key: description | ..."`` for a run
of several models), and, from this build on, ``meta["model_identity"]``, the structured identity
of :meth:`cmixlib.ModelBundle.identity`::

    {"id", "requested", "family", "layers", "hidden", "task", "variant", "fallback"}

(one dict for a run of one model; a run of several models stores a list of them, each with
``"key"``, its task or role, in the order of the display text's parts, or a dict ``{key:
identity}``). Verdicts and generated sentences read the model through :func:`model_identities`
and :func:`model_identity`, never through the display text: they return
``meta["model_identity"]`` when the run stored it, and otherwise derive the same dicts from the
display text of an older build's cached result (:func:`parse_model_text`, the only parser of
that text), so cached results keep working.

What the display text does not state is None in the derived dicts: ``task`` always, and
``requested`` unless the model is an offline fallback (the text then names the requested
model).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["IDENTITY_KEYS", "parse_model_text", "model_identities", "model_identity",
           "model_ids", "is_fallback", "stated_accuracies"]

#: The fields of a model identity (:meth:`cmixlib.ModelBundle.identity`).
IDENTITY_KEYS = ("id", "requested", "family", "layers", "hidden", "task", "variant", "fallback")

_KEY = re.compile(r"^([^\s:()]+): ")
_ACCURACY = re.compile(r"; accuracy ([0-9.]+)\s*$")
_FALLBACK = re.compile(r" -- offline fallback for '([^']*)'")
_SHAPE = re.compile(r"^\(([\w.-]+)(?:, (\d+) layers)?(?:, hidden (\d+))?\)(?:: (.*))?$", re.S)


def _parse_part(part: str) -> dict[str, Any]:
    """One model's part of the display text (see :func:`parse_model_text`)."""
    out: dict[str, Any] = dict.fromkeys(("key", *IDENTITY_KEYS, "accuracy"))
    text = part.strip()
    m = _KEY.match(text)
    if m:
        out["key"], text = m.group(1), text[m.end():]
    m = _ACCURACY.search(text)
    if m:
        out["accuracy"], text = float(m.group(1)), text[:m.start()]
    m = _FALLBACK.search(text)
    out["fallback"] = m is not None or "offline fallback" in text
    if m:
        out["requested"], text = m.group(1), text[:m.start()] + text[m.end():]
    out["id"] = text.split(" (")[0].strip()
    rest = text[len(text.split(" (")[0]):].strip()
    m = _SHAPE.match(rest)
    if m:
        out["family"] = m.group(1)
        out["layers"] = int(m.group(2)) if m.group(2) else None
        out["hidden"] = int(m.group(3)) if m.group(3) else None
        out["variant"] = (m.group(4) or "").strip() or None
    else:
        out["variant"] = rest or None
    return out


def parse_model_text(description: str) -> list[dict[str, Any]]:
    """The identities stated by a run's display text (``meta["model"]`` of a build that stored
    no ``model_identity``), one per ``" | "``-separated part, in order.

    Rule per part ``[key: ]ID[ (FAMILY, L layers, hidden H)][: VARIANT][ -- offline fallback for
    'REQUESTED'][; accuracy A]``: ``key`` is a one-word prefix before ": " (a task or role);
    ``id`` the text up to the first " ("; ``fallback`` whether the part says "offline fallback";
    ``requested`` the model the fallback stands in for; a parenthesis that does not have the
    shape above is kept, with what follows, as ``variant``. Besides :data:`IDENTITY_KEYS` and
    ``key``, each dict has ``accuracy`` (the accuracy the text appends, else None)."""
    return [_parse_part(p) for p in str(description).split(" | ")]


def _complete(identity: Mapping[str, Any], key: Any = None) -> dict[str, Any]:
    out = {k: identity.get(k) for k in IDENTITY_KEYS}
    out["fallback"] = bool(out["fallback"])
    out["key"] = identity.get("key", key)
    return out


def model_identities(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One identity per model of a run (:data:`IDENTITY_KEYS` and ``key``, the model's task or
    role, None for a run of one model), from its metadata ``meta``: ``meta["model_identity"]``
    when the run stored it (one dict, a list of dicts, or ``{key: dict}``), else derived from
    the display text ``meta["model"]`` (:func:`parse_model_text`).

    A stored single identity for a run whose display text names several models is refused
    (ValueError): a verdict on the first model alone would be a guess about the others."""
    stored = meta.get("model_identity")
    if stored is None:
        return [_complete(p) for p in parse_model_text(meta.get("model", ""))]
    if isinstance(stored, Mapping) and "id" in stored:
        parts = str(meta.get("model", "")).count(" | ") + 1
        if parts > 1:
            raise ValueError(f"meta['model_identity'] holds one model but meta['model'] names "
                             f"{parts}: store one identity per model (a list, in the order of "
                             "the display text's parts, each with its 'key').")
        return [_complete(stored)]
    if isinstance(stored, Mapping):
        return [_complete(v, key=k) for k, v in stored.items()]
    return [_complete(v) for v in stored]


def model_identity(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The identity of a run of one model (:func:`model_identities`); a run of several models
    is refused (ValueError: use :func:`model_identities`)."""
    ids = model_identities(meta)
    if len(ids) != 1:
        raise ValueError(f"This run has {len(ids)} models "
                         f"({', '.join(str(i['key']) for i in ids)}): use model_identities().")
    return ids[0]


def model_ids(meta: Mapping[str, Any]) -> list[str]:
    """The model id of each model of the run, in order (:func:`model_identities`)."""
    return [str(i["id"]) for i in model_identities(meta)]


def is_fallback(meta: Mapping[str, Any]) -> bool:
    """Whether any model of the run is an offline fallback for another
    (:func:`model_identities`)."""
    return any(i["fallback"] for i in model_identities(meta))


def stated_accuracies(meta: Mapping[str, Any]) -> list[tuple[str | None, float]]:
    """``(key, accuracy)`` of each model whose accuracy the run states: ``meta["model_accuracy"]``
    (``{key: accuracy}``, a run of one model under key None) when the run stored it, else the
    "; accuracy A" the display text appends to a part (:func:`parse_model_text`)."""
    stored = meta.get("model_accuracy")
    if stored is not None:
        if isinstance(stored, Mapping):
            return [(k, float(v)) for k, v in stored.items() if v is not None]
        return [(None, float(stored))]
    return [(p["key"], p["accuracy"]) for p in parse_model_text(meta.get("model", ""))
            if p["accuracy"] is not None]
