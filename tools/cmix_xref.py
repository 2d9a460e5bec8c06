"""Sphinx extension for the book's API pages: resolve a short cross-reference in a docstring
(``:func:`load_sva``` in :mod:`cmixlib.data.inputs`, whose function is documented as
``cmixlib.data.load_sva``) to the documented cmixlib object of that name nearest to the module
the reference was written in. Sphinx alone searches only the current module and the top level.

Loaded by ``_config.yml`` (``sphinx: local_extensions``). A reference that still finds nothing
stays dead and ``tools/check_site.py`` reports it.
"""
from __future__ import annotations

import builtins

from docutils import nodes
from sphinx.util.nodes import make_refnode

OBJ_TYPES = {"func": ("function", "method", "staticmethod", "classmethod"),
             "meth": ("method", "classmethod", "staticmethod", "property", "function"),
             "class": ("class", "exception"), "exc": ("exception", "class"),
             "data": ("data", "attribute"), "attr": ("attribute", "property", "data"),
             "const": ("data", "attribute"), "mod": ("module",), "obj": None}
EXTERNAL = {"torch", "nn", "numpy", "np", "scipy", "sklearn", "pandas", "pd", "transformers", "captum",
            "datasets", "matplotlib", "spacy", "networkx", "IPython", "ipywidgets", "nbformat",
            "nbconvert", "typing", "collections", "pathlib", "json", "os", "re", "warnings"}
#: Python's built-in names (``int``, ``str``, ``None``, ...): autodoc writes a type alias's
#: ``alias of int | None`` with references to them, which no page of this offline book documents.
BUILTINS = {name for name in dir(builtins) if not name.startswith("_")}


def _shared_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a.split("."), b.split(".")):
        if x != y:
            break
        n += 1
    return n


def nearest_object(objects: dict, target: str, modname: str | None, kinds) -> str | None:
    """Full name of the cmixlib object ``target`` (a short or partial dotted name) most likely
    meant from module ``modname``: the match sharing the longest module prefix, then the
    shortest name; None when nothing matches."""
    target = target.lstrip(".~")
    suffix = "." + target
    found = [name for name, entry in objects.items()
             if name.startswith("cmixlib") and (name == target or name.endswith(suffix))
             and (kinds is None or entry.objtype in kinds) and not entry.aliased]
    if not found:
        return None
    here = modname or "cmixlib"
    return min(found, key=lambda name: (-_shared_prefix(name, here), name.count("."), name))


def is_plain_code(target: str, reftype: str = "obj") -> bool:
    """Whether an unresolved ``target`` is shown as plain code rather than a dead link: another
    library's object (:data:`EXTERNAL`), a private helper (``_name``) or, as a type (the
    ``class``/``obj`` references autodoc writes in signatures and aliases), a built-in
    (:data:`BUILTINS`); never a ``cmixlib`` path. A docstring writes built-ins as literals."""
    target = target.lstrip(".~")
    if target.startswith("cmixlib"):
        return False
    return (target.split(".")[-1].startswith("_") or target.split(".")[0] in EXTERNAL
            or (reftype in ("class", "obj") and target.removeprefix("builtins.") in BUILTINS))


def plain_literal(contnode):
    """The reference's text as plain code, without the ``xref`` class of a dead link."""
    node = contnode.deepcopy()
    if not isinstance(node, nodes.Element):     # a type annotation in a signature: plain text
        return node
    node["classes"] = [c for c in node.get("classes", []) if c != "xref"]
    return node


def missing_reference(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    reftype = node.get("reftype")
    if reftype not in OBJ_TYPES:
        return None
    target = node["reftarget"].lstrip(".~")
    domain = env.get_domain("py")
    kinds = OBJ_TYPES[reftype]
    modname = node.get("py:module")
    name = nearest_object(domain.objects, target, modname, kinds)
    if name is None and "." in target:
        # ``cmixlib.experiments.common.cls_rows_batch`` documented as
        # ``cmixlib.experiments.cls_rows_batch``; ``rescale.deeplift_rescale`` likewise.
        where, short = target.rsplit(".", 1)
        name = nearest_object(domain.objects, short, where if where.startswith("cmixlib") else modname,
                              kinds)
    if name is None:
        # Other libraries' objects (torch, numpy, scipy, ...: the book builds offline, without
        # intersphinx), built-ins and private helpers (``_name``) are not on the API pages:
        # plain code.
        if is_plain_code(target, reftype):
            return plain_literal(contnode)
        return None
    entry = domain.objects[name]
    if entry.objtype == "module":
        return domain._make_module_refnode(app.builder, node["refdoc"], name, contnode)
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, [contnode], name)


def setup(app):
    app.connect("missing-reference", missing_reference)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
