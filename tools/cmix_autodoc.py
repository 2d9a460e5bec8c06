"""Sphinx extension for the book's API pages: signatures and constants that read like numpydoc.

* In signatures, type names are shown by their last component (``Mapping``, ``DataFrame``,
  ``Inputs``) instead of Sphinx's ``~typing.Mapping`` text that class signatures of dataclasses
  keep, string annotations lose their quotes, and a dataclass field made by a default factory
  shows ``...`` instead of ``<factory>``.
* A module constant shows its value only when the value is short and plain (at most
  :data:`MAX_VALUE` characters, no ``<...>`` object reprs): a registry or a table of dozens of
  entries is described by its docstring, not dumped as a repr.

Loaded by ``_config.yml`` (``sphinx: local_extensions``).
"""
from __future__ import annotations

import re

from sphinx.ext.autodoc import DataDocumenter
from sphinx.util.inspect import object_description

#: Longest value (its repr) a constant of the API pages shows.
MAX_VALUE = 60

_QUALIFIED = re.compile(r"~?\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)")
_QUOTED = re.compile(r"(:\s*)'([^']*)'")
_STRING = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


def tidy_signature(text: str | None) -> str | None:
    """A signature or return annotation as the API pages show it (module docstring)."""
    if not text:
        return text
    text = text.replace("<factory>", "...")
    text = _QUOTED.sub(lambda m: m.group(1) + m.group(2), text)
    parts = _STRING.split(text)          # odd parts are string literals: left as they are
    return "".join(p if k % 2 else _QUALIFIED.sub(lambda m: m.group(1), p)
                   for k, p in enumerate(parts))


def _process_signature(app, what, name, obj, options, signature, return_annotation):
    return tidy_signature(signature), tidy_signature(return_annotation)


def value_is_shown(value: object) -> bool:
    """Rule: a constant's value is shown iff its repr is at most :data:`MAX_VALUE` characters,
    one line, and holds no ``<...>`` object repr."""
    try:
        text = object_description(value)
    except Exception:  # noqa: BLE001 - an object without a usable repr is not shown
        return False
    return len(text) <= MAX_VALUE and "\n" not in text and "<" not in text


class ShortValueDataDocumenter(DataDocumenter):
    """:class:`~sphinx.ext.autodoc.DataDocumenter` that hides long values (:func:`value_is_shown`)."""

    priority = DataDocumenter.priority + 1

    def should_suppress_value_header(self) -> bool:
        return super().should_suppress_value_header() or not value_is_shown(self.object)


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    app.add_autodocumenter(ShortValueDataDocumenter, override=True)
    app.connect("autodoc-process-signature", _process_signature)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
