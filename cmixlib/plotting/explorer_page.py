"""The explorer's page (:mod:`cmixlib.plotting.explorer`): the method table its controls read,
the data packed into the page (:func:`encode_payload`) and the self-contained HTML fragment
(:func:`explorer_html`: the data and the viewer ``explorer.js``, nothing fetched).

Light on purpose (the registry and the standard library only), so that the explorer of a user's
own results (:mod:`cmixlib.plotting.result_views`, :meth:`cmixlib.MixingResult.to_html`) needs
none of the book's experiments.
"""
from __future__ import annotations

import base64
import html
import json
import zlib
from pathlib import Path
from typing import Any

from cmixlib.methods.registry import (ALL_METHODS, ROLLOUT_PREFIX, method_color, method_label,
                                      resolve)

__all__ = ["method_table", "encode_payload", "decode_payload", "payload_size", "explorer_html"]


def method_table(names: list[str]) -> list[dict[str, Any]]:
    """Registry rows (name, label, kind, colour, base, reference) of ``names``; a
    ``"rollout:X"`` is aggregated, based on X, labelled and coloured by the registry."""
    rows = []
    for name in names:
        m = ALL_METHODS[resolve(name)]
        roll = name.startswith(ROLLOUT_PREFIX)
        rows.append({"name": name, "label": method_label(name),
                     "kind": "aggregated" if roll else m.kind, "colour": method_color(name),
                     "base": resolve(name) if roll else m.base, "reference": m.reference})
    return rows


def encode_payload(data: dict[str, Any]) -> str:
    """``data`` as compact JSON, deflated (zlib format, level 9) and base64-encoded."""
    raw = json.dumps(data, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def decode_payload(text: str) -> dict[str, Any]:
    """The inverse of :func:`encode_payload`."""
    return json.loads(zlib.decompress(base64.b64decode(text)).decode("utf-8"))


def payload_size(data: dict[str, Any]) -> dict[str, int]:
    """Bytes of the page's data: ``json`` (uncompressed) and ``page`` (what the page stores)."""
    return {"json": len(json.dumps(data, separators=(",", ":")).encode()),
            "page": len(encode_payload(data))}


_ASSET = Path(__file__).with_name("explorer.js")


def explorer_html(data: dict[str, Any], element_id: str = "cmix-explorer") -> str:
    """One self-contained HTML fragment (a container, the data as deflated base64 JSON in a
    ``<script type="application/json">`` and the viewer script from ``explorer.js``): no
    external file, nothing fetched."""
    payload = json.dumps({"encoding": "deflate+base64", "payload": encode_payload(data)})
    eid = html.escape(element_id, quote=True)
    return (f'<div id="{eid}" class="cmix-explorer" '
            f'style="font:14px sans-serif;max-width:100%;overflow-x:auto"></div>\n'
            f'<script type="application/json" id="{eid}-data">{payload}</script>\n'
            f"<script>{_ASSET.read_text(encoding='utf-8')}\n"
            f'cmixExplorer("{eid}");</script>')
