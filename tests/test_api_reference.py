"""The API reference (book/api.md, book/api/*.md): cmixlib.__all__ is importable and every name
is on the page, the docstring examples of the public names run, the module pages name real
modules, the book's {func}/{mod}/{class}/{data} roles name real objects, and tools/check_site.py
reports a dead cross-reference (an xref that Sphinx rendered outside any link)."""
from __future__ import annotations

import doctest
import importlib
import inspect
import json
import re
import sys
import time
from pathlib import Path

import pytest

import cmixlib

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = ROOT / "book" / "api.md"
API_PAGES = [API_PAGE, *sorted((ROOT / "book" / "api").glob("*.md"))]
ROLE = re.compile(r"\{(mod|func|class|data|meth|attr|exc|obj)\}`~?([A-Za-z_][\w.]*)(?:\(\))?`")
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
DOCTEST_BUDGET_S = 60.0


def public_objects():
    return [(name, getattr(cmixlib, name)) for name in cmixlib.__all__
            if not inspect.ismodule(getattr(cmixlib, name)) and not isinstance(getattr(cmixlib, name), dict)]


def test_all_names_are_importable_and_unique():
    assert len(cmixlib.__all__) == len(set(cmixlib.__all__))
    for name in cmixlib.__all__:
        exec(f"from cmixlib import {name}", {})
        assert hasattr(cmixlib, name), name
    namespace: dict = {}
    exec("from cmixlib import *", namespace)
    assert set(cmixlib.__all__) <= set(namespace)


def test_every_public_name_is_on_the_api_page():
    text = API_PAGE.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\s*\.\. auto(?:function|class|exception|data)::\s+cmixlib\.(\w+)\s*$", text, re.M))
    listed |= set(re.findall(r"^\s*\.\. data::\s+(\w+)\s*$", text, re.M))
    modules = set(re.findall(r"\{mod\}`cmixlib\.(\w+)`", text))
    for name in cmixlib.__all__:
        obj = getattr(cmixlib, name)
        where = modules if inspect.ismodule(obj) else listed
        assert name in where, f"cmixlib.{name} is in __all__ but not documented on book/api.md"
    assert listed <= set(cmixlib.__all__), f"book/api.md documents names outside __all__: {listed - set(cmixlib.__all__)}"


def test_the_api_pages_are_in_the_table_of_contents():
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    for page in API_PAGES:
        rel = page.relative_to(ROOT).with_suffix("").as_posix()
        assert f"file: {rel}\n" in toc, f"{rel} is not in _toc.yml"


def test_the_module_pages_name_real_modules():
    for page in API_PAGES:
        for mod in re.findall(r"^\s*\.\. automodule::\s+([\w.]+)\s*$", page.read_text(encoding="utf-8"), re.M):
            importlib.import_module(mod)


def test_every_public_function_and_class_has_an_example():
    missing = [name for name, obj in public_objects() if ">>>" not in (inspect.getdoc(obj) or "")]
    assert not missing, f"public names without an Examples section: {missing}"


def _role_targets() -> list[tuple[str, str, str]]:
    found = []
    for path in [*sorted((ROOT / "notebooks").glob("*.ipynb")), *sorted((ROOT / "book").glob("*.md"))]:
        if path.suffix == ".ipynb":
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        else:
            text = path.read_text(encoding="utf-8")
        found += [(path.name, kind, target) for kind, target in ROLE.findall(text)]
    return found


def _resolve(target: str):
    parts = target.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(target)


def test_the_books_cross_references_name_real_cmixlib_objects():
    """A static stand-in for the built-site check: a role's target must exist (the API pages
    document every public module; tools/check_site.py checks the rendered links)."""
    targets = _role_targets()
    assert targets, "no {func}/{mod} roles found in the book"
    bad = []
    for page, kind, target in targets:
        if not target.startswith("cmixlib"):
            bad.append((page, kind, target, "not a cmixlib path"))
            continue
        try:
            obj = _resolve(target)
        except (ImportError, AttributeError) as exc:
            bad.append((page, kind, target, repr(exc)))
            continue
        if kind == "mod" and not inspect.ismodule(obj):
            bad.append((page, kind, target, "not a module"))
    assert not bad, bad


def _page_doctests() -> list[doctest.DocTest]:
    parser = doctest.DocTestParser()
    return [parser.get_doctest(API_PAGE.read_text(encoding="utf-8"), {}, "book/api.md", str(API_PAGE), 0)]


def test_docstring_examples_run():
    """Every ``>>>`` example of the public names (and of book/api.md) runs and prints what it
    says, within the time budget (the examples use cmixlib.random_model)."""
    start = time.perf_counter()
    finder = doctest.DocTestFinder(recurse=False)
    tests = [t for name, obj in public_objects() for t in finder.find(obj, f"cmixlib.{name}", globs={})]
    tests += _page_doctests()
    from cmixlib.methods.value_zeroing import value_zeroing_layer      # a method page's example too
    tests += finder.find(value_zeroing_layer, "cmixlib.methods.value_zeroing.value_zeroing_layer", globs={})
    failures, ran = [], 0
    for test in tests:
        out: list[str] = []
        runner = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS, verbose=False)
        result = runner.run(test, out=out.append)
        ran += result.attempted
        if result.failed:
            failures.append(f"{test.name}:\n{''.join(out)}")
    elapsed = time.perf_counter() - start
    assert not failures, "\n".join(failures)
    assert ran >= len(public_objects()), f"only {ran} examples ran"
    assert elapsed < DOCTEST_BUDGET_S, f"docstring examples took {elapsed:.0f} s (budget {DOCTEST_BUDGET_S:.0f} s)"


def test_a_failing_example_is_reported():
    """The runner above can fail: a wrong expected output is a failure."""
    test = doctest.DocTestParser().get_doctest(">>> 1 + 1\n3\n", {}, "wrong", None, 0)
    result = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS).run(test, out=lambda s: None)
    assert result.failed == 1


# --- tools/check_site.py: dead cross-references -------------------------------------------------

def _check_site():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        return importlib.import_module("check_site")
    finally:
        sys.path.pop(0)


RESOLVED = ('<p>See <a class="reference internal" href="api.html#cmixlib.rollout" title="cmixlib.rollout">'
            '<code class="xref py py-func docutils literal notranslate"><span class="pre">cmixlib.rollout()</span>'
            '</code></a>.</p>')
DEAD = ('<p>See <code class="xref py py-func docutils literal notranslate"><span class="pre">'
        'cmixlib.methods.aggregation.no_such_function()</span></code>.</p>')
DEAD_DOC = '<p>Read <span class="xref std std-doc">../notebooks/missing</span>.</p>'


def _site(tmp_path: Path, body: str) -> Path:
    (tmp_path / "api.html").write_text('<html><body><dl><dt id="cmixlib.rollout">rollout</dt></dl></body></html>')
    (tmp_path / "page.html").write_text(f"<html><body><main>{body}</main></body></html>")
    return tmp_path


def test_check_site_accepts_a_resolved_cross_reference(tmp_path):
    errors, _, _ = _check_site().check_site(_site(tmp_path, RESOLVED))
    assert not errors, errors


@pytest.mark.parametrize("body, target", [(DEAD, "cmixlib.methods.aggregation.no_such_function()"),
                                          (DEAD_DOC, "../notebooks/missing")])
def test_check_site_reports_a_dead_cross_reference(tmp_path, body, target):
    errors, _, _ = _check_site().check_site(_site(tmp_path, RESOLVED + body))
    assert len(errors) == 1, errors
    assert "page.html" in errors[0] and "dead cross-reference" in errors[0] and target in errors[0]


def test_check_site_page_parser_counts_only_unlinked_xrefs():
    page = _check_site().Page()
    page.feed(RESOLVED + DEAD + DEAD + "<p><code>plain code</code></p>")
    page.close()
    assert page.dead_xrefs == ["cmixlib.methods.aggregation.no_such_function()"] * 2


def test_short_docstring_references_find_the_nearest_documented_object():
    """tools/cmix_xref.py: ``:func:`load_sva``` written in cmixlib.data.inputs finds
    cmixlib.data.load_sva; of two objects with one name the one nearest the module wins."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        xref = importlib.import_module("cmix_xref")
    finally:
        sys.path.pop(0)

    class Entry:
        def __init__(self, objtype):
            self.objtype, self.aliased = objtype, False

    objects = {"cmixlib.data.load_sva": Entry("function"), "cmixlib.rollout": Entry("function"),
               "cmixlib.methods.aggregation.rollout": Entry("function"),
               "cmixlib.experiments.common.GRADIENT_METHODS": Entry("data"),
               "cmixlib.gradients.captum_methods.GRADIENT_METHODS": Entry("data")}
    func, data = xref.OBJ_TYPES["func"], xref.OBJ_TYPES["data"]
    assert xref.nearest_object(objects, "load_sva", "cmixlib.data.inputs", func) == "cmixlib.data.load_sva"
    assert xref.nearest_object(objects, "rollout", "cmixlib.methods.aggregation", func) == "cmixlib.methods.aggregation.rollout"
    assert xref.nearest_object(objects, "rollout", "cmixlib.experiments.runner", func) == "cmixlib.rollout"
    assert (xref.nearest_object(objects, "GRADIENT_METHODS", "cmixlib.gradients", data)
            == "cmixlib.gradients.captum_methods.GRADIENT_METHODS")
    assert xref.nearest_object(objects, "load_sva", "cmixlib.data", data) is None     # wrong kind
    assert xref.nearest_object(objects, "no_such_name", "cmixlib", None) is None
    # unresolved: another library's object, a built-in (a type alias's ``alias of int | None``)
    # or a private helper is plain code; a cmixlib path or an unknown name stays a dead link
    for target, kind in [("torch.Tensor", "func"), ("int", "class"), ("None", "obj"),
                         ("builtins.str", "class"), ("_helper", "func"), ("x._y", "func")]:
        assert xref.is_plain_code(target, kind), target
    for target, kind in [("cmixlib.no_such_name", "func"), ("no_such_name", "class"),
                         ("cmixlib._private", "func"), ("print", "func")]:
        assert not xref.is_plain_code(target, kind), target


def test_api_pages_show_short_type_names_and_no_long_values():
    """tools/cmix_autodoc.py: signatures without ``~typing.``/``<factory>``/quoted annotations
    (string defaults untouched), and constants show a value only when it is short and plain."""
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    from cmix_autodoc import MAX_VALUE, tidy_signature, value_is_shown

    sig = ("(compute: ~typing.Callable[[~cmixlib.experiments.runner.Context], "
           "~typing.Mapping[str, ~pandas.DataFrame]], defaults: dict = <factory>, "
           "directory: 'Path', scale: float = 1.5, name='a.b')")
    assert tidy_signature(sig) == ("(compute: Callable[[Context], Mapping[str, DataFrame]], "
                                   "defaults: dict = ..., directory: Path, scale: float = 1.5, "
                                   "name='a.b')")
    assert tidy_signature(None) is None
    assert value_is_shown(4) and value_is_shown(("sst2", "mnli"))
    assert not value_is_shown("x" * (MAX_VALUE + 1)) and not value_is_shown({"f": print})
    config = (ROOT / "_config.yml").read_text()
    assert "cmix_autodoc: tools/" in config
